"""What the SQS API keeps with a message, in its item hash's field ``a`` (opaque bytes to
the core): compact JSON ``{"m": message attributes, "s": system attributes, "i": the
MessageId it keeps through dead-letter moves, "q": the queue it was dead-lettered from,
"t": its first SentTimestamp, "r": the receives and "f" the first receive (ms) it had in the
queue it was dead-lettered from, which its receives in the dead-letter queue continue, as in SQS,
"d": a FIFO message's MessageDeduplicationId}``, each attribute ``[DataType, value]`` (binary values
base64, with a third element 1). A message with none of these has no field ``a``."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from typing import Any

from .md5 import Attribute


@dataclass
class Stored:
    attributes: dict[str, Attribute] = field(default_factory=dict)
    system: dict[str, Attribute] = field(default_factory=dict)
    message_id: str | None = None
    source: str | None = None
    sent_ms: int | None = None
    receives: int | None = None
    first_ms: int | None = None
    dedup_id: str | None = None

    def dump(self) -> bytes | None:
        out: dict[str, Any] = {}
        if self.attributes:
            out["m"] = _dump_attributes(self.attributes)
        if self.system:
            out["s"] = _dump_attributes(self.system)
        for key, value in (
            ("i", self.message_id),
            ("q", self.source),
            ("t", self.sent_ms),
            ("r", self.receives),
            ("f", self.first_ms),
            ("d", self.dedup_id),
        ):
            if value is not None:
                out[key] = value
        return json.dumps(out, separators=(",", ":"), ensure_ascii=False).encode() if out else None

    @classmethod
    def load(cls, raw: bytes | None) -> Stored:
        """The stored form; anything unreadable (written by someone else) reads as nothing."""
        if not raw:
            return cls()
        try:
            d = json.loads(raw)
            return cls(
                _load_attributes(d.get("m")),
                _load_attributes(d.get("s")),
                d.get("i"),
                d.get("q"),
                d.get("t"),
                d.get("r"),
                d.get("f"),
                d.get("d"),
            )
        except (ValueError, TypeError, AttributeError):
            return cls()


def _dump_attributes(attributes: dict[str, Attribute]) -> dict[str, list[Any]]:
    return {
        name: [t, base64.b64encode(v).decode(), 1] if isinstance(v, bytes) else [t, v]
        for name, (t, v) in attributes.items()
    }


def _load_attributes(raw: Any) -> dict[str, Attribute]:
    if not raw:
        return {}
    return {name: (v[0], base64.b64decode(v[1]) if len(v) > 2 else v[1]) for name, v in raw.items()}
