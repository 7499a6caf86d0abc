"""Consumer: claim, handle, then ack (done) or release (try again later). A Worker runs this
loop for you, with threads, heartbeats and retries (see the Workers page).
Runs as it is: `python examples/quickstart/sync_consumer.py` (Redis at KEYQUEUE_URL)."""

from keyqueue import Queue

q = Queue("emails", visibility_timeout=30, max_receives=5)


def send(email: dict) -> None:
    print("sending to", email["to"])


while (msg := q.claim(wait=1)) is not None:       # long-poll up to 1 s; None: nothing came
    try:
        send(msg.json())
    except Exception as exc:
        msg.release(delay=10, error=repr(exc))     # try again in 10 s; the reason is kept
    else:
        msg.ack()                                  # done: the message is deleted
print(q.stats())
