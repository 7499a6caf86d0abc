"""Running an asyncio worker in your own program: `aio.Worker.run()` installs no signal
handlers (the application owns its loop's signals), so wire them to `stop()`.
`keyqueue worker` does this for you. Runs as it is: `python examples/workers/async_signals.py`."""

import asyncio
import signal

from keyqueue.aio import Queue

emails = Queue("emails")


@emails.worker(concurrency=100)
async def send(message):
    print("sent", message.text)


async def main(burst: bool = False) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, send.stop)  # first signal: stop claiming, finish within the grace period
    await emails.enqueue_many(["one", "two"])
    await send.run(burst=burst)


if __name__ == "__main__":
    asyncio.run(main(burst=True))  # burst here, so that the example ends; without it, until a signal
