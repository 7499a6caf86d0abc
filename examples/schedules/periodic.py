"""A schedule kept in Redis with its queue, fired by whatever consumes it."""

import os

from keyqueue import Queue

q = Queue("reports", url=os.environ.get("KEYQUEUE_URL", "redis://localhost:6379/0"))

# Every process may run this at start: the same schedule again changes nothing.
q.schedule("nightly", cron="0 3 * * *", tz="Europe/Berlin", body="nightly report")
q.schedule("heartbeat", every=1, body="ping", catch_up="none")
for s in q.schedules():
    print(s.id, s.cron or f"every {s.every:g}s", s.tz, "paused" if s.paused else "active")

# A consumer alone fires due schedules as it claims (so do Workers and Reapers).
msg = q.claim(wait=10)
assert msg is not None
print(msg.text, "made for", "a fire time" if msg.scheduled_for else "nothing")
msg.ack()

q.pause_schedule("heartbeat")
print(q.fire_schedule("nightly") != "", q.peek(1)[0].text)  # one message now, the schedule unchanged
