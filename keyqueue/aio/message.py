"""A message delivered by an asyncio queue: the same fields, awaitable settlement."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..message import Message as _Message

if TYPE_CHECKING:
    from .queue import Queue


class Message(_Message):
    """One delivery from a ``keyqueue.aio.Queue``: ``await msg.ack()`` and friends."""

    def _aqueue(self) -> Queue:
        return self._queue()  # type: ignore[return-value]

    async def ack(self) -> bool:  # type: ignore[override]
        return await self._aqueue().ack(self)

    async def extend(self, seconds: float) -> bool:  # type: ignore[override]
        return await self._aqueue().extend(self, seconds)

    async def release(self, delay: float = 0.0, error: str | None = None) -> bool:  # type: ignore[override]
        return await self._aqueue().release(self, delay=delay, error=error)

    async def dead_letter(self, reason: str = "") -> bool:  # type: ignore[override]
        return await self._aqueue().dead_letter(self, reason)
