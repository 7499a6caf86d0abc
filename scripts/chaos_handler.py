"""The handler of the chaos soak (``scripts/chaos.py``), run by ``keyqueue worker
chaos_handler:handle`` with ``scripts/`` on PYTHONPATH.

Every delivery is recorded on the queue's own Redis server in one MULTI/EXEC, so the record
is as durable as the queue (AOF, ``appendfsync always``) and lands whole or not at all:

- ``chaos:done``        set of payload numbers processed at least once (idempotent SADD)
- ``chaos:deliveries``  hash payload number -> completed deliveries
- ``chaos:log``         list, one entry per delivery: ``<message id> <n> <pid> <receives> <epoch s>``
- ``chaos:working``     set of the workers (the number of their spawn, CHAOS_SPAWN) that have
  handled a message: the soak kills a worker only once it has been seen working

If the record fails (Redis is down), the handler raises: the worker releases the message or
it comes back after its visibility timeout, so it is recorded later.
"""

from __future__ import annotations

import os
import time

from keyqueue import Message

DONE = "chaos:done"
DELIVERIES = "chaos:deliveries"
LOG = "chaos:log"
WORKING = "chaos:working"

#: Simulated work per message, so that a SIGKILLed worker dies holding messages.
WORK_SECONDS = float(os.environ.get("CHAOS_WORK_MS", "5")) / 1000.0


def handle(message: Message) -> None:
    n = int(message.json()["n"])
    if WORK_SECONDS > 0:
        time.sleep(WORK_SECONDS)
    assert message.queue is not None
    pipe = message.queue.client.pipeline(transaction=True)
    pipe.sadd(DONE, n)
    pipe.hincrby(DELIVERIES, str(n), 1)
    pipe.rpush(LOG, f"{message.id} {n} {os.getpid()} {message.receives} {time.time():.6f}")
    pipe.sadd(WORKING, os.environ.get("CHAOS_SPAWN", ""))
    pipe.execute()
