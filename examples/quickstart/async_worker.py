"""An async worker (tasks.py): `keyqueue worker tasks:send` runs it until SIGTERM/Ctrl-C.
Run as it is (`python examples/quickstart/async_worker.py`), it drains the queue and returns."""

import asyncio

from keyqueue.aio import Queue

emails = Queue("emails", max_receives=5)


async def deliver(email: dict) -> None:
    await asyncio.sleep(0.01)  # your mail service's HTTP API, say
    print("sent to", email["to"])


@emails.worker(concurrency=50, retry_backoff=2.0)  # a keyqueue.aio.Worker
async def send(message):
    await deliver(message.json())  # raise to retry later; return to ack


if __name__ == "__main__":
    asyncio.run(send.run(burst=True))  # burst: drain what is waiting, then return
