"""Queue settings: defaults, validation, and their form in the ``P:{NAME}:config`` hash.

Every process reads the same hash, so workers, the reaper and the CLI apply one set of
values; a Queue given explicit values writes them (last writer wins, as SQS
SetQueueAttributes).
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, fields, replace
from functools import cached_property
from typing import Any, Mapping

from .errors import InvalidArgument

#: Seconds a claimed message stays invisible before it is redelivered.
DEFAULT_VISIBILITY_TIMEOUT = 30.0
#: Deliveries before a message goes to dead letters (None: no limit).
DEFAULT_MAX_RECEIVES: int | None = None
#: Width of a timer bucket; precision never depends on it (each id's own deadline decides).
DEFAULT_BUCKET_SECONDS = 60
#: Largest body accepted, in bytes (SQS's limit).
DEFAULT_MAX_BODY_BYTES = 256 * 1024
#: Seconds during which a dedup_key suppresses a second enqueue (SQS FIFO uses 5 minutes).
DEFAULT_DEDUP_WINDOW = 300.0
#: Longest retention a queue takes (10 years), so expiry times stay exact in epoch ms.
MAX_RETENTION = 10 * 365.25 * 86400
#: Settings whose absent or empty config field means None (no limit).
OPTIONAL = frozenset({"max_receives", "retention", "dead_retention", "rate_limit", "max_in_flight"})
#: Most claims one rate-limit window allows (a count beyond any real rate, still exact in Lua).
MAX_RATE_COUNT = 10**9


class Unset(enum.Enum):
    """Marks a setting the caller did not give: it is then read from the config hash."""

    UNSET = "unset"


UNSET = Unset.UNSET


@dataclass(frozen=True)
class QueueSettings:
    visibility_timeout: float = DEFAULT_VISIBILITY_TIMEOUT
    max_receives: int | None = DEFAULT_MAX_RECEIVES
    bucket_seconds: float = DEFAULT_BUCKET_SECONDS
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    dedup_window: float = DEFAULT_DEDUP_WINDOW
    #: Seconds from a message's first enqueue (or its requeue) after which it is deleted
    #: instead of delivered; None keeps it until it is handled.
    retention: float | None = None
    #: Seconds a dead letter is kept from the moment it was dead-lettered; None: for ever.
    dead_retention: float | None = None
    #: At most N claims per window of S seconds, for the whole queue, as the text "N/S"
    #: (windows aligned on the server's clock); None: no rate limit.
    rate_limit: str | None = None
    #: At most this many messages of the queue owned at once, by every consumer; None: no cap.
    max_in_flight: int | None = None
    #: At most this many messages of one message group released (waiting or in flight) at
    #: once; 1 delivers a group's messages one at a time, in order.
    group_concurrency: int = 1

    @cached_property
    def visibility_ms(self) -> int:
        return to_ms(self.visibility_timeout)

    @cached_property
    def bucket_ms(self) -> int:
        return max(1, to_ms(self.bucket_seconds))

    @cached_property
    def dedup_ms(self) -> int:
        return max(1, to_ms(self.dedup_window))

    @cached_property
    def retention_ms(self) -> int | None:
        return None if self.retention is None else math.ceil(round(self.retention * 1000, 6))  # (never early)

    @cached_property
    def rate(self) -> tuple[int, int] | None:
        """The rate limit as (claims, window ms), or None."""
        if self.rate_limit is None:
            return None
        n, seconds = parse_rate(self.rate_limit)
        return n, to_ms(seconds)

    @cached_property
    def dead_retention_ms(self) -> int | None:
        return None if self.dead_retention is None else math.ceil(round(self.dead_retention * 1000, 6))

    def to_hash(self, names: set[str] | None = None) -> dict[str, str]:
        out = {}
        for f in fields(self):
            if names is None or f.name in names:
                v = getattr(self, f.name)
                out[f.name] = "" if v is None else v if isinstance(v, str) else _decimal(v)
        return out

    @classmethod
    def from_hash(cls, stored: Mapping[bytes, bytes]) -> QueueSettings:
        """Parse a config hash; raises ValueError on a value that is not a valid setting."""
        values: dict[str, Any] = {}
        for f in fields(cls):
            raw = stored.get(f.name.encode())
            if raw is None:
                continue
            text = raw.decode(errors="replace")
            try:
                if f.name in OPTIONAL and text == "":
                    values[f.name] = None
                elif f.name == "rate_limit":
                    values[f.name] = text
                elif f.name in ("max_receives", "max_body_bytes", "max_in_flight", "group_concurrency"):
                    values[f.name] = int(text)
                else:
                    values[f.name] = float(text)
            except ValueError:
                raise InvalidArgument(f"{f.name} is {text!r}, not a number") from None
        return validate(cls(), values)


#: The fields of the config hash.
SETTING_NAMES = frozenset(f.name for f in fields(QueueSettings))


def validate(base: QueueSettings, given: Mapping[str, Any]) -> QueueSettings:
    """``base`` with ``given`` applied, every value checked."""
    checked: dict[str, Any] = {}
    for name, value in given.items():
        if name in ("max_receives", "max_in_flight"):
            if value is not None and (not _is_int(value) or not 1 <= value <= MAX_RATE_COUNT):
                raise InvalidArgument(f"{name} must be a whole number >= 1 or None, not {value!r}")
        elif name == "rate_limit":
            value = None if value is None else rate_text(*parse_rate(value))
        elif name == "max_body_bytes":
            whole_number(name, value, 1)
        elif name == "group_concurrency":
            if not _is_int(value) or not 1 <= value <= MAX_RATE_COUNT:
                raise InvalidArgument(f"group_concurrency must be a whole number >= 1, not {value!r}")
        elif name in ("retention", "dead_retention"):
            if value is not None:
                check_retention(name, value)
        else:
            check_seconds(name, value, allow_zero=name == "dedup_window")
        checked[name] = value
    return replace(base, **checked)


def parse_rate(value: object) -> tuple[int, float]:
    """A rate limit, "N/S" or (N, S): at most N (a whole number >= 1) claims per S seconds
    (a number > 0, at least a millisecond); a clear error otherwise."""
    count: object
    seconds: object
    if isinstance(value, str):
        count_text, sep, seconds_text = value.strip().partition("/")
        try:
            count, seconds = int(count_text), float(seconds_text)
        except ValueError:
            count, seconds = None, None
        if not sep:
            count = None
    elif isinstance(value, (tuple, list)) and len(value) == 2:
        count, seconds = value
    else:
        count, seconds = None, None
    if (
        not _is_int(count)
        or not 1 <= count <= MAX_RATE_COUNT  # type: ignore[operator]
        or not _is_number(seconds)
        or not 0 < seconds <= MAX_SECONDS  # type: ignore[operator]
        or to_ms(seconds) < 1  # type: ignore[arg-type]
    ):
        raise InvalidArgument(
            f"rate_limit must be 'N/S' or (N, S): N a whole number >= 1 of claims per S seconds "
            f"(a number > 0, at least 0.001), or None, not {value!r}"
        )
    return count, float(seconds)  # type: ignore[return-value,arg-type]


def rate_text(count: int, seconds: float) -> str:
    """The stored form of a rate limit: "20/1", "5/0.5"."""
    return f"{count}/{int(seconds) if seconds.is_integer() else repr(seconds)}"


def whole_number(name: str, value: object, minimum: int) -> int:
    """An int argument of at least ``minimum`` (bool is not a number here), or a clear error."""
    if not _is_int(value) or value < minimum:  # type: ignore[operator]
        raise InvalidArgument(f"{name} must be a whole number >= {minimum}, not {value!r}")
    return value  # type: ignore[return-value]


#: Longest duration any argument or setting takes (about 31 years): times are kept as epoch
#: milliseconds, and a larger one would overflow a Lua number's exact range.
MAX_SECONDS = 1e9


def check_seconds(name: str, value: object, *, allow_zero: bool = True) -> float:
    """A finite, non-negative (or positive) number of seconds, or a clear error."""
    seconds = float(value) if _is_number(value) else math.nan  # type: ignore[arg-type]
    if not 0 <= seconds <= MAX_SECONDS or (not allow_zero and seconds == 0):
        need = ">= 0" if allow_zero else "> 0"
        raise InvalidArgument(
            f"{name} must be a finite number of seconds {need} and at most {MAX_SECONDS:.0e}, not {value!r}"
        )
    return seconds


def check_retention(name: str, value: object) -> float:
    """A retention: a finite number of seconds > 0 and at most 10 years (bool is no number)."""
    seconds = float(value) if _is_number(value) else math.nan  # type: ignore[arg-type]
    if not 0 < seconds <= MAX_RETENTION:
        raise InvalidArgument(
            f"{name} must be a number of seconds > 0 and at most 10 years ({MAX_RETENTION:.0f}) or None, not {value!r}"
        )
    return seconds


def to_ms(seconds: float) -> int:
    return int(round(seconds * 1000))


def seconds_arg(name: str, value: object, *, allow_zero: bool = True) -> int:
    """A non-negative duration argument in ms, or a clear error."""
    if value == 0 and allow_zero and type(value) in (int, float):
        return 0
    return to_ms(check_seconds(name, value, allow_zero=allow_zero))


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _decimal(v: float | int) -> str:
    return str(v) if isinstance(v, int) else repr(float(v))
