"""keyqueue on asyncio: the same queue, every operation the core's, run on redis.asyncio.

``Queue`` does no I/O when constructed (a module-level queue works where no loop runs);
settings are read or written on first use. ``Worker`` runs ``async def`` handlers,
``concurrency`` at once on one loop. Sync and async clients can serve one queue together.
"""

from __future__ import annotations

from typing import Any

from .message import Message
from .queue import Queue, claim_any, list_queues

__all__ = ["Queue", "Message", "Worker", "claim_any", "list_queues"]


def __getattr__(name: str) -> Any:
    if name == "Worker":  # imported on use: a producer never loads the worker runtime
        from ..worker.tasks import Worker

        return Worker
    raise AttributeError(name)
