"""Schedules without I/O: their definitions, checks, fire times and what one fire does.

Cron expressions are parsed and stepped by cronsim over naive wall-clock times; the zone
rules are applied here, so they are the same for every expression: a wall time that does
not exist (spring forward) fires once, at the first instant after the gap, and one that
occurs twice (fall back) fires once, at its first occurrence.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import math
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Iterator, NamedTuple, Sequence
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from ..errors import InvalidSchedule
from ..keys import NAME_RE, QueueKeys
from .roundtrip import Command

CATCH_UP = ("one", "all", "none")
#: Messages one fire enqueues at most with catch_up="all" (older fire times are missed).
CATCH_UP_LIMIT = 1000
#: Fire times one fire steps through at most; any further back are counted missed.
SCAN_LIMIT = 100_000
#: Fire times of a cron expression worked out one at a time, each kept for schedules alike
#: (a fire steps through a few); a longer catch-up steps through the rest in one go.
CRON_CACHED_STEPS = 8
#: How late a fire time may be fired and still be the current one (catch_up="none"): above
#: the couple of seconds a Reaper or Worker at its default interval takes.
LATE_MS = 5000

UTC = timezone.utc


@dataclass(frozen=True)
class Schedule:
    """A schedule as stored: times are epoch seconds (None: never, or no more)."""

    id: str
    cron: str | None
    every: float | None
    tz: str
    body: bytes
    next_fire: float | None
    last_fire: float | None
    fired: int
    missed: int
    paused: bool
    start: float | None = None
    end: float | None = None
    jitter: float = 0.0
    catch_up: str = "one"
    misfire_grace: float | None = None

    def to_json(self) -> dict[str, Any]:
        """The fields as JSON values (the body as UTF-8 text when it is, else base64 under body_base64)."""
        out: dict[str, Any] = {name: getattr(self, name) for name in self.__dataclass_fields__ if name != "body"}
        try:
            out["body"] = self.body.decode("utf-8")
        except UnicodeDecodeError:
            out["body"], out["body_base64"] = None, base64.b64encode(self.body).decode()
        return out


@dataclass(frozen=True)
class Definition:
    """What an upsert sets; two upserts with equal definitions change nothing."""

    cron: str | None
    every_ms: int | None
    tz: str
    start_ms: int | None
    end_ms: int | None
    jitter_ms: int
    catch_up: str
    grace_ms: int | None

    def dump(self) -> str:
        return json.dumps(
            [
                self.cron,
                self.every_ms,
                self.tz,
                self.start_ms,
                self.end_ms,
                self.jitter_ms,
                self.catch_up,
                self.grace_ms,
            ],
            separators=(",", ":"),
        )

    @classmethod
    def load(cls, raw: str | bytes) -> Definition:
        return _load(raw)


@functools.lru_cache(maxsize=4096)
def _load(raw: str | bytes) -> Definition:
    """A stored definition, parsed once: schedules alike share one, and a firer reads it at every fire."""
    cron, every, tz, start, end, jitter, catch_up, grace = json.loads(raw)
    return Definition(cron, every, tz, start, end, jitter, catch_up, grace)


def _ms(what: str, value: object) -> int | None:
    """Epoch seconds (int/float) or an aware datetime as epoch ms."""
    if value is None:
        return None
    if isinstance(value, datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise InvalidSchedule(f"{what} must be an aware datetime or epoch seconds, not a naive datetime")
        return round(value.timestamp() * 1000)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InvalidSchedule(f"{what} must be epoch seconds or an aware datetime, not {value!r}")
    return round(value * 1000)


def _seconds_ms(what: str, value: object, minimum: float) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < minimum:
        raise InvalidSchedule(f"{what} must be a number of seconds >= {minimum:g}, not {value!r}")
    return round(value * 1000)


def zone(tz: object) -> ZoneInfo:
    if not isinstance(tz, str) or not tz:
        raise InvalidSchedule(f"tz must be an IANA zone name such as 'Europe/Berlin', not {tz!r}")
    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidSchedule(f"unknown time zone {tz!r}: use an IANA name such as 'Europe/Berlin'") from None


def check_cron(cron: object) -> str:
    if not isinstance(cron, str) or len(cron.split()) not in (5, 6):
        raise InvalidSchedule(f"cron must be 5 fields (minute first) or 6 (seconds first), not {cron!r}")
    try:
        next(CronSim(cron, datetime(2000, 1, 1)))
    except (CronSimError, StopIteration, ValueError) as exc:
        raise InvalidSchedule(f"cannot parse cron {cron!r}: {exc or 'no fire time'}") from None
    return " ".join(cron.split())


def check_id(schedule_id: object) -> str:
    if not isinstance(schedule_id, str) or not NAME_RE.fullmatch(schedule_id):
        raise InvalidSchedule(f"invalid schedule id {schedule_id!r}: use 1 to 200 characters from A-Z a-z 0-9 . _ -")
    return schedule_id


def definition(
    *,
    cron: object,
    every: object,
    tz: object,
    start: object,
    end: object,
    jitter: object,
    catch_up: object,
    misfire_grace: object,
) -> Definition:
    """The checked definition of a schedule; InvalidSchedule for anything unusable."""
    if (cron is None) == (every is None):
        raise InvalidSchedule("give exactly one of cron= and every=")
    zone(tz)
    assert isinstance(tz, str)
    expr = None if cron is None else check_cron(cron)
    every_ms = None if every is None else _seconds_ms("every", every, 1)
    start_ms, end_ms = _ms("start", start), _ms("end", end)
    if start_ms is not None and end_ms is not None and end_ms <= start_ms:
        raise InvalidSchedule("end must be after start")
    if catch_up not in CATCH_UP:
        raise InvalidSchedule(f"catch_up must be one of {', '.join(CATCH_UP)}, not {catch_up!r}")
    assert isinstance(catch_up, str)
    grace = None if misfire_grace is None else _seconds_ms("misfire_grace", misfire_grace, 0)
    if grace == 0:  # (every fire is some ms late: a grace of 0 would skip them all, as APScheduler refuses it)
        raise InvalidSchedule(f"misfire_grace must be a number of seconds > 0 (None: no limit), not {misfire_grace!r}")
    return Definition(expr, every_ms, tz, start_ms, end_ms, _seconds_ms("jitter", jitter, 0), catch_up, grace)


# -- fire times ---------------------------------------------------------------------------


def _instant(wall: datetime, tz: ZoneInfo) -> datetime:
    """The instant a wall time stands for: its first occurrence, or for a wall time in a
    gap, the first instant after the gap."""
    first = wall.replace(tzinfo=tz, fold=0)
    back = first.astimezone(UTC).astimezone(tz).replace(tzinfo=None)
    if back == wall:
        return first
    # In a gap: fold=0 reads it with the offset before the gap (an instant after the gap),
    # fold=1 with the one after (an instant before it); the gap ends between the two.
    lo = int(wall.replace(tzinfo=tz, fold=1).timestamp())
    hi = int(first.timestamp())
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if datetime.fromtimestamp(mid, tz).replace(tzinfo=None) > wall:
            hi = mid
        else:
            lo = mid
    return datetime.fromtimestamp(hi, tz)


def _cron_times(cron: str, tz: ZoneInfo, after: datetime) -> Iterator[datetime]:
    """Fire instants strictly after ``after``, in order, each once."""
    wall = after.astimezone(tz).replace(tzinfo=None, microsecond=0)
    last = after
    for w in CronSim(cron, wall):
        t = _instant(w, tz)
        if t > last:
            last = t
            yield t


def fire_times_ms(d: Definition, anchor_ms: int, after_ms: int) -> Iterator[int]:
    """Fire times (epoch ms) strictly after ``after_ms``, from ``start`` on, to ``end``."""
    if d.start_ms is not None and after_ms < d.start_ms - 1:
        after_ms = d.start_ms - 1
    if d.every_ms is not None:
        base = d.start_ms if d.start_ms is not None else anchor_ms
        k = max(0, (after_ms - base) // d.every_ms + 1)
        t = base + k * d.every_ms
        while d.end_ms is None or t <= d.end_ms:
            yield t
            t += d.every_ms
        return
    assert d.cron is not None
    last = after_ms
    for _ in range(CRON_CACHED_STEPS + 1):
        step = _cron_next(d.cron, d.tz, last)
        if step is None or (d.end_ms is not None and step > d.end_ms):
            return
        yield step
        last = step
    for instant in _cron_times(d.cron, zone(d.tz), datetime.fromtimestamp(last / 1000, UTC)):
        ms = round(instant.timestamp() * 1000)
        if d.end_ms is not None and ms > d.end_ms:
            return
        yield ms


@functools.lru_cache(maxsize=4096)
def _cron_next(cron: str, tz: str, after_ms: int) -> int | None:
    """The first fire time of an expression after ``after_ms``: schedules alike step from
    the same fire time, so a firer of many works it out once."""
    after = datetime.fromtimestamp(after_ms / 1000, UTC)
    instant = next(_cron_times(cron, zone(tz), after), None)
    return None if instant is None else round(instant.timestamp() * 1000)


def next_fire_ms(d: Definition, anchor_ms: int, after_ms: int) -> int | None:
    return next(fire_times_ms(d, anchor_ms, after_ms), None)


def next_fires(
    *,
    cron: str | None = None,
    every: float | None = None,
    tz: str = "UTC",
    start: float | datetime | None = None,
    after: datetime,
    count: int,
) -> list[datetime]:
    """The next ``count`` fire times strictly after the aware datetime ``after``, as aware
    datetimes in ``tz``; ``every`` is anchored at ``start`` (default: ``after``)."""
    if not isinstance(after, datetime) or after.tzinfo is None or after.utcoffset() is None:
        raise InvalidSchedule(f"after must be an aware datetime, not {after!r}")
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise InvalidSchedule(f"count must be a whole number >= 0, not {count!r}")
    d = definition(cron=cron, every=every, tz=tz, start=start, end=None, jitter=0, catch_up="one", misfire_grace=None)
    after_ms = math.floor(after.timestamp() * 1000)
    anchor = d.start_ms if d.start_ms is not None else after_ms
    z = zone(tz)
    out: list[datetime] = []
    for ms in fire_times_ms(d, anchor, after_ms):
        if len(out) >= count:
            break
        t = datetime.fromtimestamp(ms / 1000, z)
        if t > after:
            out.append(t)
    return out


# -- firing -------------------------------------------------------------------------------


def jitter_ms(schedule_id: str, fire_ms: int, jitter: int) -> int:
    """A delay in [0, jitter) ms that every process computes alike for this fire time."""
    if jitter <= 0:
        return 0
    h = hashlib.sha256(f"{schedule_id}\0{fire_ms}".encode()).digest()
    return int.from_bytes(h[:8], "big") * jitter >> 64


class Known(NamedTuple):
    """What a firer read of a stored schedule: its version, stored next fire (ms), pause,
    definition (parsed and as stored) and anchor (ms). (A tuple: a firer of many makes one
    per fire.)"""

    version: str
    next_ms: int | None
    paused: bool
    d: Definition
    dump: bytes
    anchor_ms: int

    def fired(self, next_ms: int | None) -> Known:
        """The schedule as a fire of this version left it."""
        return self._replace(version=str(int(self.version) + 1), next_ms=next_ms, paused=False)


@dataclass(frozen=True)
class Fire:
    """What one fire of a schedule does: the messages (fire time, due time) in order, the
    stored next fire it moves to (None: no more), and the fire times it skips."""

    messages: list[tuple[int, int]]
    next_ms: int | None
    missed: int


def plan_fire(schedule_id: str, d: Definition, anchor_ms: int, next_ms: int, now_ms: int) -> Fire:
    """The fire of every fire time from ``next_ms`` to ``now_ms``. The latest is the current
    fire time while it is at most LATE_MS old; the others were missed (nothing fired them in
    time) and follow catch_up: "one" folds them into the current fire's message, "all" gives
    each its own (the latest CATCH_UP_LIMIT), "none" skips them. Fire times older than
    misfire_grace are skipped whatever catch_up says. Missed counts those without a message
    of their own."""
    skipped = 0
    due: list[int] = []
    t: int | None = next_ms
    every = d.every_ms
    if every is not None and 0 <= now_ms - next_ms < every and (d.start_ms is None or next_ms >= d.start_ms):
        # One fire time due, the usual case: the next one is fire_times_ms's first step.
        base = d.start_ms if d.start_ms is not None else anchor_ms
        t = base + max(0, (next_ms - base) // every + 1) * every
        if d.end_ms is not None and t > d.end_ms:
            t = None
    if t is not None and t != next_ms and t > now_ms:
        due.append(next_ms)
    else:
        t = next_ms
        if every is not None and next_ms <= now_ms:
            behind = (now_ms - next_ms) // every + 1
            if behind > SCAN_LIMIT:  # a long outage: step over what no catch_up keeps
                skipped = behind - CATCH_UP_LIMIT
                next_ms += skipped * every
                t = next_ms
        times = fire_times_ms(d, anchor_ms, next_ms)
        while t is not None and t <= now_ms:
            if len(due) >= SCAN_LIMIT:
                skipped += len(due) - CATCH_UP_LIMIT
                due = due[-CATCH_UP_LIMIT:]
            due.append(t)
            t = next(times, None)
    if d.grace_ms is not None:
        fresh = [f for f in due if now_ms - f <= d.grace_ms]
        skipped += len(due) - len(fresh)
        due = fresh
    if d.catch_up == "all":
        keep = due[-CATCH_UP_LIMIT:]
    elif d.catch_up == "one":
        keep = due[-1:]
    else:
        keep = [f for f in due[-1:] if now_ms - f <= LATE_MS]
    skipped += len(due) - len(keep)
    if d.jitter_ms:
        messages = [(f, f + jitter_ms(schedule_id, f, d.jitter_ms)) for f in keep]
    else:
        messages = [(f, f) for f in keep]
    return Fire(messages, t, skipped)


# -- stored schedules ---------------------------------------------------------------------

#: The index score of a schedule with nothing to fire (paused, or past its end).
NEVER = "inf"


def score(next_ms: int | None, paused: bool) -> str:
    return NEVER if paused or next_ms is None else str(next_ms)


#: The fields of a schedule's state, packed in this order, ':' between (QueueKeys.schedule_state):
#: version, fired, last fire ms, missed, anchor ms, paused, next fire ms (empty: none).
STATE_FIELDS = (b"v", b"f", b"l", b"m", b"a", b"p", b"n")
_STATE_DEFAULTS = {b"f": b"0", b"m": b"0", b"p": b"0"}


def pack_state(raw: dict[bytes, bytes]) -> bytes:
    """A schedule's state field from its fields (v and a are required)."""
    return b":".join(raw.get(f, _STATE_DEFAULTS.get(f, b"")) for f in STATE_FIELDS)


def fired_state(raw: dict[bytes, bytes], messages: int, last_ms: int | None, missed: int, next_ms: int | None) -> bytes:
    """The state a fire leaves (the schedule as read: its version one up, the counts grown,
    its next fire moved on); the scripts do the same in Lua."""
    out = {**raw, b"v": str(int(raw[b"v"]) + 1).encode()}
    out.pop(b"n", None)
    if next_ms is not None:
        out[b"n"] = str(next_ms).encode()
    out[b"f"] = str(int(raw.get(b"f", 0)) + messages).encode()
    out[b"m"] = str(int(raw.get(b"m", 0)) + missed).encode()
    if messages and last_ms is not None:
        out[b"l"] = str(last_ms).encode()
    return pack_state(out)


def unpack(
    state: bytes | None, dump: bytes | None, body: bytes | None, index: bytes | float | None = None
) -> dict[bytes, bytes]:
    """A schedule's stored parts as one dict of fields (d, b, i and those of STATE_FIELDS): {}
    without a state (no schedule). A state keyqueue cannot read gives none of its fields
    (reading it fails; an upsert writes it whole again). ``index`` is the schedule's index
    score as read (field i, its text: the compare-and-set of a write); the fires that moved
    only the index since the state was written are counted in (fired_since)."""
    if state is None:
        return {}
    values = bytes(state).split(b":")
    raw: dict[bytes, bytes] = {}
    if len(values) == len(STATE_FIELDS):
        raw = {f: v for f, v in zip(STATE_FIELDS, values) if v}
    if dump is not None:
        raw[b"d"] = dump
    raw[b"b"] = body or b""
    raw[b"i"] = index_text(index)
    z = None if index is None else float(index)
    k = fired_since(raw, z)
    if k:
        assert z is not None
        every = Definition.load(raw[b"d"]).every_ms or 0
        raw[b"f"] = str(int(raw.get(b"f", 0)) + k).encode()
        raw[b"l"] = str(int(z) - every).encode()
        raw[b"n"] = str(int(z)).encode()
    return raw


def index_text(index: bytes | float | None) -> bytes:
    """An index score as read (RESP2 text, RESP3 a float) as text Lua's tonumber reads alike."""
    if index is None:
        return b""
    if isinstance(index, bytes):
        return index
    return b"inf" if index == math.inf else str(int(index) if index == int(index) else index).encode()


def fired_since(raw: dict[bytes, bytes], index: float | None) -> int:
    """How many fires moved only the index of a schedule since its state was written.

    schedule_fire_due.lua fires an ``every`` schedule without writing its state: the index
    score moves on by the interval and nothing else changes, so a state's next fire, last
    fire and fired count are as of its last write, and the index tells how many intervals
    have passed since (same test in schedule_fire_many.lua's state_fired). 0 for any other
    schedule, or when the index is not on the state's grid (the fsck reports that)."""
    n = raw.get(b"n")
    if index is None or n is None or raw.get(b"p") == b"1" or b"d" not in raw or not math.isfinite(index):
        return 0
    try:
        every = Definition.load(raw[b"d"]).every_ms
        moved = index - int(n)
    except (ValueError, TypeError):
        return 0
    if not every or moved <= 0 or moved % every:
        return 0
    return int(moved // every)


def on_grid(raw: dict[bytes, bytes], index: float) -> float | None:
    """For an ``every`` schedule (not paused) whose index score is past its state's next fire
    but off its grid (start, or else the anchor, plus whole intervals), the first fire time
    of the grid at or after that score: a score the fires of the look can have reached. None
    for any other schedule or score."""
    try:
        d = Definition.load(raw[b"d"])
        n, anchor = int(raw[b"n"]), int(raw[b"a"])
    except (KeyError, ValueError, TypeError):
        return None
    if not d.every_ms or raw.get(b"p") == b"1" or not math.isfinite(index) or index <= n:
        return None
    base = d.start_ms if d.start_ms is not None else anchor
    return float(base + -(-(int(index) - base) // d.every_ms) * d.every_ms)


def schedule_reads(k: QueueKeys, ids: Sequence[str]) -> list[Command]:
    """What reads schedules (ids not empty) in one round trip: schedule_raws decodes the replies."""
    return [
        # (The index first: a planned fire between the two reads leaves the new state beside
        # the old score, which counts in nothing, where the other way round a planned fire's
        # move would be counted in as fires of the look.)
        ("ZMSCORE", k.schedules, *ids),
        ("HMGET", k.schedule_state, *ids),
        ("HMGET", k.schedule_defs, *ids),
        ("HMGET", k.schedule_bodies, *ids),
    ]


def schedule_raws(replies: Sequence[Any]) -> list[dict[bytes, bytes]]:
    """The replies of schedule_reads as one dict of fields per schedule ({} for one absent)."""
    scores, states, dumps, bodies = replies
    return [unpack(*parts) for parts in zip(states, dumps, bodies, scores)]


def _opt_int(raw: dict[bytes, bytes], field: bytes) -> int | None:
    v = raw.get(field)
    return None if v is None else int(v)


def stored(schedule_id: str, raw: dict[bytes, bytes]) -> Schedule:
    """A schedule's fields (d, b, a, n, l, f, m, p, v: unpack) as a Schedule."""
    d = Definition.load(raw[b"d"])
    n, last = _opt_int(raw, b"n"), _opt_int(raw, b"l")
    return Schedule(
        schedule_id,
        d.cron,
        None if d.every_ms is None else d.every_ms / 1000,
        d.tz,
        raw.get(b"b", b""),
        None if n is None else n / 1000,
        None if last is None else last / 1000,
        int(raw.get(b"f", 0)),
        int(raw.get(b"m", 0)),
        raw.get(b"p") == b"1",
        None if d.start_ms is None else d.start_ms / 1000,
        None if d.end_ms is None else d.end_ms / 1000,
        d.jitter_ms / 1000,
        d.catch_up,
        None if d.grace_ms is None else d.grace_ms / 1000,
    )
