"""Finding what is wrong: the kinds of finding, each id decided by the reaper's own rules
(``plan``: its state, what is wrong with it, the commands that fix it), and the findings of
a whole snapshot (``findings``).

The states of a live id (one with an item hash):
  waiting     in ``items`` (not in ``processing``), listed in ``queue``, no ``d``
  processing  in ``processing`` (not in ``items``), with ``c`` and ``d``, in its timer set
  delayed     in neither set, with ``d`` (no ``c``), in its timer set, not dead
  dead        in ``dead`` once, in neither set, without ``c`` and ``d``; only a dead letter has ``x``
  held        in its group's list ``group:<g>`` only (a grouped message behind its group's
              released ones: those waiting or in flight, and those delayed with ``j``);
              ``groups`` counts each group's released messages, ``held`` every group
              list's entries

An id owned without a receipt is a claim between its steps. The script-free mode puts a
claim's *intent* in a timer set first and its reaper settles such an id once that bucket
has passed; until then the check only notes it, so it never races a slow claimer.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from ..core.replies import int_or
from ..core.roundtrip import Command
from ..core.schedules import score, stored
from ..core.states import Seen, owed
from ..keys import QueueKeys
from .scan import IdView, Snapshot

# Problems: the queue is inconsistent until they are repaired.
OWNED_AND_WAITING = "owned-and-waiting"
UNTIMED = "untimed-processing"
ORPHAN = "orphan-item"
MISSING_HASH = "missing-hash"
UNLISTED = "unlisted-waiting"
TIMER_INDEX = "timer-index"
DEAD_DUPLICATE = "dead-duplicate"
WRONG_TYPE = "wrong-type"
STRAY_FIELDS = "stray-fields"
SCHEDULE_INDEX = "schedule-index"
BAD_SCHEDULE = "bad-schedule"
SCHEDULE_STRAY = "schedule-stray"
BAD_FLOW = "bad-flow-key"
GROUP_COUNT = "group-count"
GROUP_ENTRY = "group-entry"
HELD_COUNT = "held-count"
GROUP_MARK = "group-mark"
# Notes: states claimers and the reaper settle on their own; harmless. Repair removes the
# leftovers (the first three) and leaves claims in progress to their claimer.
STALE_LIST = "stale-list-entry"
STALE_TIMER = "stale-timer-entry"
EMPTY_INDEX = "empty-timer-index"
CLAIMING = "claim-in-progress"

#: Every kind, in report order, with what it means.
KINDS: dict[str, str] = {
    WRONG_TYPE: "keys of the wrong Redis type (never changed by repair: fix them by hand)",
    MISSING_HASH: "ids in items, processing or dead without an item hash",
    ORPHAN: "item hashes no waiting, processing, timer or dead entry refers to",
    OWNED_AND_WAITING: "ids in both items and processing",
    UNTIMED: "ids in processing without a receipt, a deadline or their timer entry",
    UNLISTED: "ids in items but not in the queue list (no claim can see them)",
    DEAD_DUPLICATE: "ids in the dead list twice, or dead and in another state",
    STRAY_FIELDS: "waiting, delayed or dead ids with a receipt or timer field left over, or live ones with a "
    "dead-lettering time (x)",
    TIMER_INDEX: "timer buckets missing from the index or indexed after their earliest timer",
    SCHEDULE_INDEX: "schedules missing from the schedule index or scored unlike their next fire, "
    "and index entries without a schedule",
    BAD_SCHEDULE: "schedules keyqueue cannot read, or state without a definition (never changed by repair: "
    "upsert them again)",
    SCHEDULE_STRAY: "schedule definitions or bodies without a schedule (no state)",
    BAD_FLOW: "rate-limit window counters or the throttle holding something other than a whole number, or "
    "without an expiry (a claim that died between its two commands): they would last for ever",
    GROUP_COUNT: "message groups whose count of released messages is not what their messages show, or that "
    "have room and hold messages back (stuck)",
    GROUP_ENTRY: "group list entries of ids that are not held messages of that group",
    HELD_COUNT: "the held counter differs from the entries of the group lists",
    GROUP_MARK: "queues with message groups whose counters hash lacks the mark that has claims read a "
    "message's group (they would deliver grouped messages without it)",
    STALE_LIST: "queue list entries of ids not in items (claims drop them)",
    STALE_TIMER: "timer entries of ids with no timer in that bucket (the reaper drops them)",
    EMPTY_INDEX: "index entries of buckets without a timer set (the reaper drops them)",
    CLAIMING: "ids owned without a receipt yet, within their claim's timer bucket (left to "
    "the claimer, or to the reaper once the bucket has passed)",
}
NOTE_KINDS = frozenset({STALE_LIST, STALE_TIMER, EMPTY_INDEX, CLAIMING})
#: Kinds fixed by re-deciding their id as a whole (the others concern one entry or bucket).
ID_KINDS = frozenset({MISSING_HASH, ORPHAN, OWNED_AND_WAITING, UNTIMED, UNLISTED, DEAD_DUPLICATE, STRAY_FIELDS})


@dataclass(frozen=True)
class Finding:
    """One thing found: a kind and its subject (an id, a bucket number or a key name)."""

    kind: str
    subject: str
    bucket: str = ""  # the timer set of a stale timer entry


# -- one id: what it is, what is wrong, how to fix it ---------------------------------------


@dataclass
class Plan:
    """The state an id is in (or is owed), what is wrong with it, the commands that fix it."""

    state: str  # waiting, processing, delayed, dead, or gone (no item hash)
    kinds: list[str] = field(default_factory=list)
    ops: list[Command] = field(default_factory=list)

    def add(self, kind: str | None, *ops: Command) -> None:
        if kind and kind not in self.kinds:
            self.kinds.append(kind)
        self.ops.extend(ops)


def plan(v: IdView, k: QueueKeys, bucket_ms: int) -> Plan:
    """Decide an id. The scan and the repair's re-read both use this, so they cannot disagree."""
    i, ik = v.id, k.item(v.id)
    if v.exists and v.held and not (v.waiting or v.processing or v.dead or v.timer is not None or v.receipt):
        return Plan("held")
    if not v.exists:
        p = Plan("gone")
        if v.waiting or v.processing or v.dead:
            p.add(
                MISSING_HASH,
                ("SREM", k.items, i),
                ("SREM", k.processing, i),
                ("LREM", k.dead, 0, i),
                ("LREM", k.queue, 0, i),
            )
        return p
    # Which state it is in or is owed: the reaper's rules (core/states.py), so the fsck and
    # the reaper cannot disagree about an id.
    state, unclaim = owed(
        Seen(
            exists=True,
            receipt=v.receipt,
            timer=v.timer,
            processing=v.processing,
            waiting=v.waiting,
            dead=v.dead > 0,
            timed=v.timed,
        ),
        settled=not v.intent,
    )
    if state == "claiming":
        return Plan("processing", [CLAIMING])
    timer_del: Command = ()  # leave the id's own timer set
    timer_add: list[Command] = []
    if v.timer is not None:
        bucket = v.timer // bucket_ms
        timer_del = ("SREM", k.timer(bucket), i)
        timer_add = [("SADD", k.timer(bucket), i), ("ZADD", k.timers, "LT", v.timer, bucket)]

    assert state is not None  # the dead list was read
    p = Plan(state)
    if unclaim:  # a claim that died between its two steps, or an abandoned claim
        p.add(OWNED_AND_WAITING if v.waiting else UNTIMED, ("SREM", k.processing, i))
    elif state == "processing" and not v.timed:
        p.add(UNTIMED, *timer_add)
    elif (state == "delayed" and not v.timed) or (state == "waiting" and not v.waiting):
        p.add(ORPHAN)  # in no set, or delayed without its timer entry

    # Complete the state. Fixes that are part of a move found above are not reported again.
    stray = None if p.kinds else STRAY_FIELDS
    written: list[Command] = [("HSET", ik, *v.first)] if v.first else []  # before the receipt goes
    if p.state == "waiting":
        if not v.waiting:
            p.add(None, ("SADD", k.items, i))
        if v.listed == 0:
            p.add(UNLISTED if v.waiting else None, ("RPUSH", k.queue, i))
        if not v.waiting or v.listed == 0:
            # a write to the hash: a script-free claimer that found an entry of this id
            # stale WATCHes it, and so keeps the entry added here (see backends/commands/consume.py)
            p.add(None, ("HINCRBY", ik, "n", 0))
        if v.receipt or v.timer is not None:
            p.add(stray, *written, ("HDEL", ik, "c", "d"))
    elif p.state == "delayed":
        if not v.timed:
            p.add(None, *timer_add)
        if v.receipt:
            p.add(stray, *written, ("HDEL", ik, "c"))
    elif p.state == "dead" and (v.receipt or v.timer is not None):
        p.add(stray, *written, ("HDEL", ik, "c", "d"))
    if v.lettered and p.state != "dead":
        # x would make dead_retention count from a dead-lettering this message has not had
        p.add(stray, ("HDEL", ik, "x"))
    if v.timed and p.state in ("waiting", "dead"):
        p.add(None, timer_del)
    if v.dead and p.state != "dead":
        p.add(DEAD_DUPLICATE, ("LREM", k.dead, 0, i))
    elif v.dead > 1:
        p.add(DEAD_DUPLICATE, ("LREM", k.dead, 1 - v.dead, i))  # keep the first (oldest) entry
    if p.kinds == [ORPHAN] and p.state == "waiting" and v.group is not None and not v.released:
        # a grouped message in no state waits at the end of its group, as it would have
        return Plan("held", [ORPHAN], [("RPUSH", k.group(v.group), i), ("INCR", k.held), ("HINCRBY", ik, "n", 0)])
    return p


def keeps_timer(v: IdView, p: Plan, bucket: str, bucket_ms: int) -> bool:
    """Whether the id's entry in timer set ``bucket`` is the one the reaper needs (its
    timer, or the intent of a claim in progress)."""
    return CLAIMING in p.kinds or (
        p.state in ("processing", "delayed") and v.timer is not None and str(v.timer // bucket_ms) == bucket
    )


# -- the whole queue ---------------------------------------------------------------------------


def findings(s: Snapshot, k: QueueKeys, bucket_ms: int, group_limit: int = 1) -> tuple[list[Finding], Counter[str]]:
    """The findings of one snapshot, and how many ids are in each state."""
    found = [Finding(WRONG_TYPE, n) for n in sorted(s.broken)]
    states: Counter[str] = Counter()
    if not s.complete(k):
        return found, states
    ids = set(s.hashes) | set(s.listed) | s.waiting | s.processing | set(s.dead)
    ids = ids.union(*s.timers.values()) - s.broken_ids(k)
    views: dict[str, tuple[IdView, Plan]] = {}
    # ids in a timer set whose bucket has not passed: a claim's intent, if they are owned
    passing = {i for b, members in s.timers.items() if _ends_after(b, bucket_ms, s.now) for i in members}
    for i in sorted(ids, key=_natural):
        receipt, timer, lettered, first = s.hashes.get(i, (False, None, False, ()))
        own = None if timer is None else str(timer // bucket_ms)
        if own is not None and k.timer(own) in s.broken:
            continue  # its timer set is corrupt: leave it to the wrong-type finding
        v = IdView(
            i,
            i in s.hashes,
            receipt,
            timer,
            i in s.waiting,
            i in s.processing,
            s.listed[i],
            s.dead[i],
            own is not None and i in s.timers.get(own, ()),
            i in passing,
            lettered,
            *_grouping(s, i),
            first=first,
        )
        p = plan(v, k, bucket_ms)
        views[i] = (v, p)
        states[p.state] += 1
        found.extend(Finding(kind, i) for kind in p.kinds)
        if s.listed[i] and not v.waiting and CLAIMING not in p.kinds:  # a claim drops its own
            found.append(Finding(STALE_LIST, i))
    for bucket in sorted(s.timers, key=_natural):
        earliest: int | None = None
        for i in sorted(s.timers[bucket], key=_natural):
            if i not in views:
                continue
            v, p = views[i]
            if not keeps_timer(v, p, bucket, bucket_ms):
                found.append(Finding(STALE_TIMER, i, bucket))
            elif v.timer is not None:
                earliest = v.timer if earliest is None else min(earliest, v.timer)
        score = s.index.get(bucket)
        if earliest is not None and (score is None or score > earliest):
            found.append(Finding(TIMER_INDEX, bucket))
    found.extend(Finding(EMPTY_INDEX, b) for b in sorted(s.index, key=_natural) if k.timer(b) not in s.types)
    found += group_findings(s, {i: p.state for i, (_, p) in views.items()}, group_limit)
    found += schedule_findings(s, k)
    found += [Finding(BAD_FLOW, n) for n, (value, ttl) in sorted(s.flow.items()) if not flow_ok(value, ttl)]
    return found, states


def _grouping(s: Snapshot, i: str) -> tuple[str | None, bool, bool]:
    """An id's group, whether it is released, and whether its group's list holds it."""
    g, released = s.grouped.get(i, (None, False))
    return g, released, g is not None and i in s.group_lists.get(g, ())


def released_counts(s: Snapshot, states: dict[str, str]) -> Counter[str]:
    """Each group's released messages, as the messages show them: the waiting and in-flight
    ones, and the delayed ones with j (released again with a delay after a delivery)."""
    return Counter(
        g
        for i, (g, j) in s.grouped.items()
        if states.get(i) in ("waiting", "processing") or j and states.get(i) == "delayed"
    )


def group_findings(s: Snapshot, states: dict[str, str], limit: int) -> list[Finding]:
    released = released_counts(s, states)
    out = []
    for g in sorted(set(s.group_counts) | set(s.group_lists) | set(released)):
        stored = int_or(s.group_counts[g], -1) if g in s.group_counts else 0
        if stored != released[g] or (released[g] < limit and s.group_lists.get(g)):
            out.append(Finding(GROUP_COUNT, g))
    for g, ids in sorted(s.group_lists.items()):
        for i in dict.fromkeys(ids):
            if s.grouped.get(i, ("", False))[0] != g or states.get(i) != "held" or ids.count(i) > 1:
                out.append(Finding(GROUP_ENTRY, i, g))
    total = sum(len(ids) for ids in s.group_lists.values())
    if (0 if s.held_count is None else int_or(s.held_count, -1)) != total:
        out.append(Finding(HELD_COUNT, "held"))
    if (s.grouped or s.group_counts or s.group_lists) and s.group_mark is None:
        out.append(Finding(GROUP_MARK, "counters"))
    return out


def flow_ok(value: bytes | None, ttl: int) -> bool:
    """Whether a flow-control key holds a whole number and expires (as every writer leaves it)."""
    return value is not None and value.lstrip(b"-").isdigit() and ttl >= 0


def schedule_score(raw: dict[bytes, bytes]) -> float | None:
    """The index score a schedule's fields (schedules.unpack) call for; None when they cannot
    be read."""
    try:
        stored("", raw)
        int(raw[b"v"]), int(raw[b"a"])
        return float(score(None if b"n" not in raw else int(raw[b"n"]), raw.get(b"p") == b"1"))
    except (KeyError, ValueError, TypeError):
        return None


def schedule_findings(s: Snapshot, k: QueueKeys) -> list[Finding]:
    """A schedule exists while it has a state: the index must score it as its state says and
    hold nothing else; its definition and body go with it."""
    if any(key in s.broken for key in (k.schedule_state, k.schedule_defs, k.schedule_bodies)):
        return []
    out = []
    for sid in sorted(set(s.schedules) | set(s.schedule_index)):
        raw = s.schedules.get(sid)
        if raw is None:
            out.append(Finding(SCHEDULE_INDEX, sid))
            continue
        want = schedule_score(raw)
        if want is None:
            out.append(Finding(BAD_SCHEDULE, sid))
        elif s.schedule_index.get(sid) != want:
            out.append(Finding(SCHEDULE_INDEX, sid))
    out += [Finding(SCHEDULE_STRAY, sid) for sid in sorted(s.schedule_strays)]
    return out


def _ends_after(bucket: str, bucket_ms: int, now: int) -> bool:
    b = int_or(bucket, None)
    return b is not None and (b + 1) * bucket_ms > now


def _natural(s: str) -> tuple[int, int, str]:
    """Sort numbers as numbers, before anything else."""
    return (0, int(s), "") if s.isascii() and s.isdigit() else (1, 0, s)
