"""A queue that feeds a rate-limited API: at most 5 calls a second across every worker,
at most 3 at once, and a 429 throttles the whole queue instead of spending a retry."""

import os

import keyqueue
from keyqueue import Queue

q = Queue(
    "mail-api",
    url=os.environ.get("KEYQUEUE_URL", "redis://localhost:6379/0"),
    rate_limit="5/1",  # 5 claims per one-second window of the Redis server's clock
    max_in_flight=3,  # 3 deliveries owned at once, by every consumer together
    max_receives=1,  # (a throttled delivery does not use its one receive up)
)
q.enqueue_many([f"mail {i}" for i in range(8)])
held = q.claim_many(10)
print(len(held), "claimed of 10 asked;", q.rate_state().in_flight, "in flight")  # max_in_flight
q.ack_many(held)

calls = 0


def send(message: keyqueue.Message) -> None:
    global calls
    calls += 1
    if calls == 2:  # the API answered 429 Too Many Requests, Retry-After: 0.5
        raise keyqueue.Throttle(0.5)
    print("sent", message.text)


# A burst run sleeps through the windows and the throttle, and drains the queue.
q.worker(send, concurrency=2).run(burst=True)
state = q.rate_state()
print(q.stats().waiting, "waiting,", q.stats().dead, "dead;", state.limit, "claims per", state.interval, "s")
print("claims held back:", q.counters()["throttled"] > 0)
