"""A thread worker: `keyqueue worker app.tasks:send` runs it until SIGINT/SIGTERM, with its
queue and options (the command line's flags win). Run as it is
(`python examples/workers/sync_worker.py`), it enqueues three messages and drains them."""

from keyqueue import Queue

emails = Queue("emails", max_receives=5)


def deliver(email: dict) -> None:
    print(f"delivered to {email['to']}")


@emails.worker(concurrency=8, retry_backoff=2.0)  # a keyqueue.Worker
def send(message):
    deliver(message.json())  # raise to retry later; return to ack


if __name__ == "__main__":
    emails.enqueue_many(['{"to": "ada@example.com"}', '{"to": "bob@example.com"}', '{"to": "cy@example.com"}'])
    send.run(burst=True)  # burst: drain and return; send.run() serves until SIGINT/SIGTERM
