"""A delivered message: ``BaseMessage`` holds what both faces' messages are (the fields,
the body's readings), ``Message`` settles through a blocking Queue. ``keyqueue.aio.Message``
is its sibling, whose settlement is awaited."""

from __future__ import annotations

import base64
import json as _json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from .errors import MessageNotJSON

if TYPE_CHECKING:
    from .core.results import Fields


M = TypeVar("M", bound="BaseMessage")


class Settler(Protocol):
    """What a message is bound to: its keyqueue.Queue. Declared here so messages import no queue."""

    name: str

    def ack(self, message: Message) -> bool: ...

    def extend(self, message: Message, seconds: float) -> bool: ...

    def release(self, message: Message, *, delay: float = 0.0, error: str | None = None) -> bool: ...

    def dead_letter(self, message: Message, reason: str = "") -> bool: ...


@dataclass(eq=False)
class BaseMessage:
    """One delivery of a message. ``receipt`` fences it: once the message is redelivered,
    this object's ack/extend/release return False. Times are epoch seconds, server clock."""

    id: str
    body: bytes = field(repr=False)
    receipt: str | None
    receives: int
    enqueued_at: float
    deadline: float | None
    last_error: str | None
    #: The keyqueue.Queue (or keyqueue.aio.Queue) it came from, None when unbound.
    queue: Any = field(default=None, repr=False)
    #: Opaque bytes stored with the message at enqueue (``attributes=``), None when none:
    #: the SQS API keeps a message's attributes here.
    attributes: bytes | None = field(default=None, repr=False)
    #: When the message was first delivered (epoch seconds), None before its first claim.
    first_claimed_at: float | None = field(default=None, repr=False)
    #: The fire time (epoch seconds) a schedule made this message for; None otherwise.
    scheduled_for: float | None = field(default=None, repr=False)
    #: The message group it was enqueued in (``group=``); None for an ungrouped message.
    group: str | None = field(default=None, repr=False)
    #: What was last done to this delivery through its queue: "ack", "release" or
    #: "dead_letter" (None: nothing yet). A Worker reads it, so a handler that settled its
    #: own message is taken at its word.
    settled: str | None = field(default=None, repr=False, compare=False)

    def __repr__(self) -> str:
        body = self.body if len(self.body) <= 60 else self.body[:60] + b"..."
        return (
            f"Message(id={self.id!r}, body={body!r} ({len(self.body)} bytes), "
            f"receives={self.receives}, last_error={self.last_error!r})"
        )

    @property
    def text(self) -> str:
        return self.body.decode("utf-8")

    def json(self) -> Any:
        """The body parsed as JSON; a body that is not UTF-8 raises MessageNotJSON (a
        ValueError) naming the message, instead of json's misleading encoding guess."""
        try:
            text = self.body.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise MessageNotJSON(
                f"message {self.id}: the body is not UTF-8 JSON (byte {exc.start} is "
                f"{self.body[exc.start : exc.start + 1]!r}); read msg.body for the raw bytes"
            ) from None
        return _json.loads(text)

    @classmethod
    def of(cls: type[M], f: Fields, queue: Any, with_receipt: bool = True) -> M:
        """A delivered (or peeked: no receipt) message bound to ``queue``."""
        # positional (the fields' order): made once per delivered message
        return cls(
            f.id,
            f.body,
            f.receipt if with_receipt else None,
            f.receives,
            f.enqueued_ms / 1000.0,
            None if f.timer_ms is None else f.timer_ms / 1000.0,
            f.error,
            queue,
            f.attributes,
            None if f.first_ms is None else f.first_ms / 1000.0,
            None if f.scheduled_ms is None else f.scheduled_ms / 1000.0,
            f.group,
        )

    def _bound(self) -> Any:
        if self.queue is None:
            raise RuntimeError("this message is not bound to a Queue")
        return self.queue


class Message(BaseMessage):
    """A delivery from a ``keyqueue.Queue``: ``msg.ack()`` and friends settle it there."""

    def _queue(self) -> Settler:
        queue: Settler = self._bound()
        return queue

    def ack(self) -> bool:
        return self._queue().ack(self)

    def extend(self, seconds: float) -> bool:
        return self._queue().extend(self, seconds)

    def release(self, delay: float = 0.0, error: str | None = None) -> bool:
        """Give the message back (visible after ``delay``); ``error`` becomes last_error
        (its first 4,096 bytes, UTF-8, ending with "…" when cut)."""
        return self._queue().release(self, delay=delay, error=error)

    def dead_letter(self, reason: str = "") -> bool:
        return self._queue().dead_letter(self, reason)


def json_body(body: bytes) -> tuple[str, bool]:
    """A body for JSON (``peek --json``, the web API): its text if it is UTF-8, else base64
    (and True)."""
    try:
        return body.decode("utf-8"), False
    except UnicodeDecodeError:
        return base64.b64encode(body).decode("ascii"), True
