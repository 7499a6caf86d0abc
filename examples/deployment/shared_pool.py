"""500 concurrent operations on one asyncio queue whose pool has 20 connections: each
waits its turn for a connection (first come, first served) instead of failing; only a
wait longer than pool_timeout raises PoolExhausted. Runs as it is:
`python examples/deployment/shared_pool.py` (Redis at KEYQUEUE_URL)."""

import asyncio
import os

from keyqueue.aio import Queue

URL = os.environ.get("KEYQUEUE_URL", "redis://localhost:6379/0")
POOL = "max_connections=20&pool_timeout=30"  # both in the URL, as every keyqueue URL takes them


async def main() -> None:
    async with Queue("bulk", url=f"{URL}{'&' if '?' in URL else '?'}{POOL}") as q:
        ids = await asyncio.gather(*(q.enqueue(f"job {i}") for i in range(500)))
        print(len(set(ids)), "messages enqueued by 500 tasks over 20 connections")


asyncio.run(main())
