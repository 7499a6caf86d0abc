"""A message delivered by an asyncio queue: the sibling of ``keyqueue.Message``, with the
same fields and its settlement awaited."""

from __future__ import annotations

from typing import Protocol

from ..message import BaseMessage


class AsyncSettler(Protocol):
    """What a message is bound to: its keyqueue.aio.Queue. Declared here so messages import no queue."""

    name: str

    async def ack(self, message: Message) -> bool: ...

    async def extend(self, message: Message, seconds: float) -> bool: ...

    async def release(self, message: Message, *, delay: float = 0.0, error: str | None = None) -> bool: ...

    async def dead_letter(self, message: Message, reason: str = "") -> bool: ...


class Message(BaseMessage):
    """One delivery from a ``keyqueue.aio.Queue``: ``await msg.ack()`` and friends."""

    def _queue(self) -> AsyncSettler:
        queue: AsyncSettler = self._bound()
        return queue

    async def ack(self) -> bool:
        return await self._queue().ack(self)

    async def extend(self, seconds: float) -> bool:
        return await self._queue().extend(self, seconds)

    async def release(self, delay: float = 0.0, error: str | None = None) -> bool:
        """Give the message back (visible after ``delay``); ``error`` becomes last_error
        (its first 4,096 bytes, UTF-8, ending with "…" when cut)."""
        return await self._queue().release(self, delay=delay, error=error)

    async def dead_letter(self, reason: str = "") -> bool:
        return await self._queue().dead_letter(self, reason)
