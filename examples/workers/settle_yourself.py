"""A handler that settles its own message: the worker takes it at its word (it does not ack,
release or dead-letter it again). Runs as it is: `python examples/workers/settle_yourself.py`."""

from keyqueue import Queue

jobs = Queue("jobs", visibility_timeout=30, max_receives=3)
KINDS = {"resize", "transcode"}


@jobs.worker(concurrency=4)
def handle(message):
    job = message.json()
    if job["kind"] not in KINDS:
        message.dead_letter(f"unknown kind {job['kind']!r}")  # no retry could help: straight to dead letters
        return
    if job["kind"] == "transcode":
        message.extend(600)  # hold it 10 minutes; the heartbeat never shortens that
    print(f"done: {job['kind']} {job['file']}")  # returning acks


if __name__ == "__main__":
    jobs.enqueue_many(['{"kind": "resize", "file": "a.png"}', '{"kind": "transcode", "file": "b.mov"}',
                       '{"kind": "shred", "file": "c.txt"}'])
    handle.run(burst=True)
    for dead in jobs.peek(source="dead"):
        print("dead letter", dead.id, dead.last_error)
