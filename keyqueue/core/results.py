"""What the backends' operations return: plain values, the same from either mode, so the
queue never reads a script's reply format; and the two a user is handed as they are
(``QueueStats``, ``ReapResult``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple


@dataclass(frozen=True)
class ReapResult:
    requeued: int = 0
    dead_lettered: int = 0
    delayed_released: int = 0
    #: Messages and dead letters deleted because they outlived retention or dead_retention.
    expired: int = 0

    def __add__(self, other: ReapResult) -> ReapResult:
        return ReapResult(
            self.requeued + other.requeued,
            self.dead_lettered + other.dead_lettered,
            self.delayed_released + other.delayed_released,
            self.expired + other.expired,
        )

    @property
    def total(self) -> int:
        return self.requeued + self.dead_lettered + self.delayed_released + self.expired


@dataclass(frozen=True)
class QueueStats:
    waiting: int
    processing: int
    delayed: int
    dead: int
    oldest_age: float | None
    #: Grouped messages waiting behind their group's released ones (counted in ``waiting`` too).
    held: int = 0


class Fields(NamedTuple):
    """One message as stored: times in epoch ms (the server's clock)."""

    id: str
    body: bytes
    enqueued_ms: int
    receives: int
    timer_ms: int | None  # deadline in flight, due time when delayed
    receipt: str | None
    error: str | None
    attributes: bytes | None = None  # field a: opaque to the core, written by a surface (SQS)
    first_ms: int | None = None  # field f: when the first delivery was made
    scheduled_ms: int | None = None  # field s: the fire time a schedule made the message for
    group: str | None = None  # field g: the message group it belongs to


class GroupInfo(NamedTuple):
    """A message group: ``held`` messages waiting behind its ``active`` released ones
    (waiting or in flight)."""

    id: str
    held: int
    active: int


@dataclass(frozen=True)
class Enqueued:
    ids: list[str]
    config_missing: bool = False


@dataclass(frozen=True)
class Claimed:
    messages: list[Fields]
    dead_lettered: int = 0
    config_missing: bool = False
    #: ms from the claim to the earliest timer of the queue (None: no timer at all)
    next_timer_ms: int | None = None
    #: A limit cut the claim: ms until one may let a claim through (the throttle's or the
    #: rate window's end); -1 when only max_in_flight cut it (a slot frees when one settles).
    limited_ms: int | None = None


@dataclass(frozen=True)
class RateState:
    """A queue's flow control as it stands: ``limit`` claims per ``interval`` seconds (None
    without a rate limit), ``used`` of them in the current window, ``resets_in`` seconds to
    its end, ``in_flight`` deliveries owned now (capped by ``max_in_flight``, None: no cap),
    ``throttled_for`` seconds left of a throttle (0 when not throttled)."""

    limit: int | None
    interval: float | None
    used: int
    resets_in: float | None
    in_flight: int
    throttled_for: float
    max_in_flight: int | None = None


#: Where a reap goes on: (bucket being scanned or "", its SSCAN cursor, due buckets to skip,
#: the ids its scan of a large bucket found due that join their group when the scan ends,
#: space-separated: reap.lua)
ReapPosition = tuple[str, str, int, str]
START: ReapPosition = ("", "0", 0, "")
#: Where an expiry sweep goes on: its phase (head, waiting, delayed, dead), a SCAN cursor, and
#: the rank of the timer bucket it is in.
ExpirePosition = tuple[str, str, int]
EXPIRE_START: ExpirePosition = ("head", "0", 0)


@dataclass(frozen=True)
class ExpireStep:
    expired: int
    position: ExpirePosition
    done: bool


@dataclass(frozen=True)
class ReapStep:
    moved: ReapResult
    position: ReapPosition
    done: bool
    config_missing: bool = False
    broken: list[str] = field(default_factory=list)  # keys of the wrong type, left as they are


@dataclass(frozen=True)
class Fired:
    """One fire of a schedule: done (False: the schedule changed since it was read, nothing
    was done), the ids it enqueued, and whether the config hash is gone."""

    done: bool
    ids: list[str]
    config_missing: bool = False


@dataclass(frozen=True)
class Looked:
    """A look at the head of a queue's schedule index that fired, in the same call, the due
    schedules needing no planning: the server's time (ms), how many it fired, the earliest
    fire time it knows after now (ms, or None), how many entries it looked at, the due
    schedules it left to the client (id, index score), and whether the config hash is gone."""

    now: int
    fired: int
    soonest: int | None
    looked: int
    left: list[tuple[str, float]]
    config_missing: bool


@dataclass(frozen=True)
class Requeued:
    requeued: int
    examined: int
    cursor: str


@dataclass(frozen=True)
class Purged:
    count: int
    position: tuple[int, str]
    done: bool


@dataclass(frozen=True)
class Counts:
    waiting: int
    processing: int
    delayed: int
    dead: int
    oldest_ms: int | None
    now_ms: int
    held: int = 0
