"""Handlers for the CLI's worker tests: ``send`` is a Worker made with ``@queue.worker`` (as
in the README), ``plain`` a plain function. The decorated queue connects to KQ_TEST_URL."""

from __future__ import annotations

import os
import time

from keyqueue import Message, Queue

DONE = "test:cli-done"  # hash "queue:id" -> seconds of visibility left when the handler ran

jobs = Queue("decorated", url=os.environ["KQ_TEST_URL"], max_receives=3)


@jobs.worker(concurrency=3, retry_backoff=40.0, visibility_timeout=50.0)
def send(message: Message) -> None:
    if message.text == "fail":
        raise RuntimeError("failing as asked")
    assert message.queue is not None and message.deadline is not None
    message.queue.client.hset(DONE, f"{message.queue.name}:{message.id}", f"{message.deadline - time.time():.3f}")


def plain(message: Message) -> None:
    send.handler(message)
