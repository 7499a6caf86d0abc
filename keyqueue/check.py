"""An fsck for one queue: find messages that are not in exactly one state, and repair them.

It uses plain commands only (no Lua), so it works where the server denies EVAL. Its reads
are not atomic and the queue may be live, so a finding counts only when a second look
``settle`` seconds later sees it too, and every repair is a small WATCH/MULTI/EXEC
transaction that re-reads its id and acts only if what it finds is what was confirmed:
a message is never lost or owned twice because of a repair.

The whole check is one operation of the I/O-free core (``check_op``): its reads are round
trips, its wait a ``Sleep``, so ``Queue.check`` and ``keyqueue.aio.Queue.check`` run the
same code; every round trip goes to one connection, which WATCH/MULTI/EXEC needs.

The states of a live id (one with an item hash):
  waiting     in ``items`` (not in ``processing``), listed in ``queue``, no ``d``
  processing  in ``processing`` (not in ``items``), with ``c`` and ``d``, in its timer set
  delayed     in neither set, with ``d`` (no ``c``), in its timer set, not dead
  dead        in ``dead`` once, in neither set, without ``c`` and ``d``

An id owned without a receipt is a claim between its steps. The script-free mode puts a
claim's *intent* in a timer set first and its reaper settles such an id once that bucket
has passed; until then the check only notes it, so it never races a slow claimer.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Sequence, Union

from redis.exceptions import ResponseError

from .core.replies import text
from .core.states import Seen, owed
from .core.roundtrip import Command as RoundTripCommand
from .core.roundtrip import Op, Sleep, T, one, transaction
from .keys import QueueKeys
from .settings import check_seconds

if TYPE_CHECKING:
    from .core.queue_core import QueueCore

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
    STRAY_FIELDS: "waiting, delayed or dead ids with a receipt or timer field left over",
    TIMER_INDEX: "timer buckets missing from the index or indexed after their earliest timer",
    STALE_LIST: "queue list entries of ids not in items (claims drop them)",
    STALE_TIMER: "timer entries of ids with no timer in that bucket (the reaper drops them)",
    EMPTY_INDEX: "index entries of buckets without a timer set (the reaper drops them)",
    CLAIMING: "ids owned without a receipt yet, within their claim's timer bucket (left to "
              "the claimer, or to the reaper once the bucket has passed)",
}
NOTE_KINDS = frozenset({STALE_LIST, STALE_TIMER, EMPTY_INDEX, CLAIMING})
#: Kinds fixed by re-deciding their id as a whole (the others concern one entry or bucket).
ID_KINDS = frozenset({MISSING_HASH, ORPHAN, OWNED_AND_WAITING, UNTIMED, UNLISTED,
                      DEAD_DUPLICATE, STRAY_FIELDS})

#: Keys whose wrong type makes every other check meaningless.
CORE = ("queue", "items", "processing", "timers", "dead")

ATTEMPTS = 8   # tries of one repair when a watched key keeps changing
BATCH = 1000   # commands per round trip, elements per LRANGE/SSCAN step
SHOWN = 20     # ids printed per line

Command = tuple[Union[str, int, float], ...]


@dataclass(frozen=True)
class Finding:
    """One thing found: a kind and its subject (an id, a bucket number or a key name)."""

    kind: str
    subject: str
    bucket: str = ""  # the timer set of a stale timer entry


# -- the report ---------------------------------------------------------------------------

@dataclass
class Problem:
    """One kind of finding and the ids (bucket numbers, key names) it concerns."""

    kind: str
    ids: list[str]
    detail: str
    repaired: bool = False

    def line(self) -> str:
        shown = " ".join(self.ids[:SHOWN])
        more = f" ... ({len(self.ids)} in all)" if len(self.ids) > SHOWN else ""
        done = " [repaired]" if self.repaired else ""
        return f"{self.kind}: {shown}{more} -- {self.detail}{done}"


@dataclass
class CheckReport:
    """What a check found; ``consistent`` is False while a problem is unrepaired."""

    queue: str
    problems: list[Problem] = field(default_factory=list)
    notes: list[Problem] = field(default_factory=list)
    waiting: int = 0
    processing: int = 0
    delayed: int = 0
    dead: int = 0
    keys: int = 0          # keys of the queue found (0: it is empty or does not exist)
    complete: bool = True  # False: a core key has the wrong type, ids were not checked

    @property
    def consistent(self) -> bool:
        return all(p.repaired for p in self.problems)

    def to_dict(self) -> dict[str, Any]:
        def rows(ps: list[Problem]) -> list[dict[str, Any]]:
            return [{"kind": p.kind, "ids": p.ids, "count": len(p.ids), "detail": p.detail,
                     "repaired": p.repaired} for p in ps]

        return {"queue": self.queue, "consistent": self.consistent, "complete": self.complete,
                "counts": {"waiting": self.waiting, "processing": self.processing,
                           "delayed": self.delayed, "dead": self.dead},
                "keys": self.keys, "problems": rows(self.problems), "notes": rows(self.notes)}

    def __str__(self) -> str:
        lines = [p.line() for p in self.problems] + [f"note {p.line()}" for p in self.notes]
        left = sum(len(p.ids) for p in self.problems if not p.repaired)
        fixed = sum(len(p.ids) for p in self.problems if p.repaired)
        noted = sum(len(p.ids) for p in self.notes)
        verdict = "consistent" if self.consistent else f"INCONSISTENT ({left} unrepaired)"
        summary = (f"queue {self.queue!r}: {self.waiting} waiting, {self.processing} processing, "
                   f"{self.delayed} delayed, {self.dead} dead; {left + fixed} problems"
                   f"{f' ({fixed} repaired)' if fixed else ''}, {noted} notes: {verdict}")
        if not self.complete:
            summary += " (ids not checked: a core key has the wrong type)"
        elif not self.keys:
            summary += " (no keys: the queue is empty or does not exist)"
        return "\n".join(lines + [summary])


# -- one id: what it is, what is wrong, how to fix it ---------------------------------------

@dataclass(frozen=True)
class IdView:
    """What one look showed of one id."""

    id: str
    exists: bool             # its item hash exists
    receipt: bool            # c is set
    timer: int | None        # d in ms (None: absent or not a number)
    waiting: bool            # in items
    processing: bool         # in processing
    listed: int | None       # entries in the queue list (None: not looked up)
    dead: int                # entries in the dead list
    timed: bool              # in the timer set of its own bucket
    intent: bool = False     # in a timer set whose bucket has not passed (a claim's intent)


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
    if not v.exists:
        p = Plan("gone")
        if v.waiting or v.processing or v.dead:
            p.add(MISSING_HASH, ("SREM", k.items, i), ("SREM", k.processing, i),
                  ("LREM", k.dead, 0, i), ("LREM", k.queue, 0, i))
        return p
    # Which state it is in or is owed: the reaper's rules (core/states.py), so the fsck and
    # the reaper cannot disagree about an id.
    state, unclaim = owed(Seen(exists=True, receipt=v.receipt, timer=v.timer, processing=v.processing,
                               waiting=v.waiting, dead=v.dead > 0, timed=v.timed), settled=not v.intent)
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
            p.add(stray, ("HDEL", ik, "c", "d"))
    elif p.state == "delayed":
        if not v.timed:
            p.add(None, *timer_add)
        if v.receipt:
            p.add(stray, ("HDEL", ik, "c"))
    elif p.state == "dead" and (v.receipt or v.timer is not None):
        p.add(stray, ("HDEL", ik, "c", "d"))
    if v.timed and p.state in ("waiting", "dead"):
        p.add(None, timer_del)
    if v.dead and p.state != "dead":
        p.add(DEAD_DUPLICATE, ("LREM", k.dead, 0, i))
    elif v.dead > 1:
        p.add(DEAD_DUPLICATE, ("LREM", k.dead, 1 - v.dead, i))  # keep the first (oldest) entry
    return p


def keeps_timer(v: IdView, p: Plan, bucket: str, bucket_ms: int) -> bool:
    """Whether the id's entry in timer set ``bucket`` is the one the reaper needs (its
    timer, or the intent of a claim in progress)."""
    return CLAIMING in p.kinds or (p.state in ("processing", "delayed") and v.timer is not None
                                   and str(v.timer // bucket_ms) == bucket)


# -- reading the whole queue -------------------------------------------------------------

@dataclass
class Snapshot:
    """Every key of the queue as one pass of plain reads saw it (not atomically)."""

    types: dict[str, str]
    listed: Counter[str] = field(default_factory=Counter)
    waiting: set[str] = field(default_factory=set)
    processing: set[str] = field(default_factory=set)
    dead: Counter[str] = field(default_factory=Counter)
    index: dict[str, float] = field(default_factory=dict)
    timers: dict[str, set[str]] = field(default_factory=dict)        # bucket -> ids
    hashes: dict[str, tuple[bool, int | None]] = field(default_factory=dict)  # id -> (c?, d)
    broken: set[str] = field(default_factory=set)                    # keys of the wrong type
    now: int = 0                                                     # server time, ms

    def broken_ids(self, k: QueueKeys) -> set[str]:
        """Ids whose item key has the wrong type: left alone, reported as that key."""
        base = k.item("")
        return {n[len(base):] for n in self.broken if n.startswith(base)}


def read_snapshot(k: QueueKeys) -> Op[Snapshot]:
    """One pass of plain reads over every key of the queue, in round trips of up to BATCH
    commands (the lists, and the sets, are paged side by side)."""
    names: dict[str, None] = {}  # SCAN may return a key twice: one TYPE each
    cursor = "0"
    while True:
        (reply,) = yield [("SCAN", cursor, "MATCH", k.pattern, "COUNT", BATCH)]
        cursor = text(_ok(reply)[0])
        names.update((_name(n), None) for n in reply[1])
        if cursor == "0":
            break
    *kinds, now = yield from _batched([*(("TYPE", n) for n in names), ("TIME",)])
    types = {n: text(t) for n, t in zip(names, kinds) if text(t) != "none"}
    sec, usec = _ok(now)
    s = Snapshot(types, broken={n for n, t in types.items() if expected_type(k, n) not in ("", t)},
                 now=int(sec) * 1000 + int(usec) // 1000)
    if any(getattr(k, name) in s.broken for name in CORE):
        return s
    queue, dead = yield from _read_lists([k.queue, k.dead])
    s.listed.update(queue)
    s.dead.update(dead)
    (index,) = yield [("ZRANGE", k.timers, 0, -1, "WITHSCORES")]
    s.index = {_name(b): float(sc) for b, sc in _scored(_ok(index))}
    timer_base = k.base + "timer:"
    timer_keys = [n for n in types if n.startswith(timer_base) and n not in s.broken]
    sets = yield from _read_sets([k.items, k.processing, *timer_keys])
    s.waiting, s.processing = sets[0], sets[1]
    s.timers = {n[len(timer_base):]: members for n, members in zip(timer_keys, sets[2:])}
    item_base = k.base + "item:"
    ids = {n[len(item_base):] for n in types if n.startswith(item_base) and n not in s.broken}
    ids |= set(s.listed) | s.waiting | s.processing | set(s.dead)
    ids = ids.union(*s.timers.values())
    looked = sorted(ids - s.broken_ids(k))
    out = yield from _batched([cmd for i in looked
                               for cmd in (("EXISTS", k.item(i)), ("HMGET", k.item(i), "c", "d"))])
    for j, i in enumerate(looked):
        exists, fields = out[2 * j], out[2 * j + 1]
        if isinstance(fields, Exception):  # became something else since the SCAN
            s.broken.add(k.item(i))
        elif exists:
            s.hashes[i] = (fields[0] is not None, _int_or_none(fields[1]))
    return s


def expected_type(k: QueueKeys, key: str) -> str:
    """The Redis type a key of the queue must have ('' for a name keyqueue does not use)."""
    return k.kind(key)


def _read_lists(keys: Sequence[str]) -> Op[list[list[str]]]:
    """The whole of each list, BATCH elements a step, the lists side by side."""
    out: list[list[str]] = [[] for _ in keys]
    pending = list(range(len(keys)))
    while pending:
        parts = yield [("LRANGE", keys[j], len(out[j]), len(out[j]) + BATCH - 1) for j in pending]
        for j, part in zip(pending, parts):
            out[j] += [_name(x) for x in _ok(part)]
        pending = [j for j, part in zip(pending, parts) if len(part) == BATCH]
    return out


def _read_sets(keys: Sequence[str]) -> Op[list[set[str]]]:
    """The members of each set (SSCAN), up to BATCH sets a round trip."""
    out: list[set[str]] = [set() for _ in keys]
    cursors = {j: "0" for j in range(len(keys))}
    while cursors:
        step = list(cursors)[:BATCH]
        replies = yield [("SSCAN", keys[j], cursors[j], "COUNT", BATCH) for j in step]
        for j, reply in zip(step, replies):
            cursor = text(_ok(reply)[0])
            out[j].update(_name(m) for m in reply[1])
            if cursor == "0":
                del cursors[j]
            else:
                cursors[j] = cursor
    return out


def analyze(s: Snapshot, k: QueueKeys, bucket_ms: int) -> tuple[list[Finding], Counter[str]]:
    """The findings of one snapshot, and how many ids are in each state."""
    found = [Finding(WRONG_TYPE, n) for n in sorted(s.broken)]
    states: Counter[str] = Counter()
    if any(getattr(k, name) in s.broken for name in CORE):
        return found, states
    ids = set(s.hashes) | set(s.listed) | s.waiting | s.processing | set(s.dead)
    ids = ids.union(*s.timers.values()) - s.broken_ids(k)
    views: dict[str, tuple[IdView, Plan]] = {}
    # ids in a timer set whose bucket has not passed: a claim's intent, if they are owned
    passing = {i for b, members in s.timers.items() if _ends_after(b, bucket_ms, s.now)
               for i in members}
    for i in sorted(ids, key=_natural):
        receipt, timer = s.hashes.get(i, (False, None))
        own = None if timer is None else str(timer // bucket_ms)
        if own is not None and k.timer(own) in s.broken:
            continue  # its timer set is corrupt: leave it to the wrong-type finding
        v = IdView(i, i in s.hashes, receipt, timer, i in s.waiting, i in s.processing,
                   s.listed[i], s.dead[i], own is not None and i in s.timers.get(own, ()),
                   i in passing)
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
    found.extend(Finding(EMPTY_INDEX, b) for b in sorted(s.index, key=_natural)
                 if k.timer(b) not in s.types)
    return found, states


# -- repairs ------------------------------------------------------------------------------

def _transact(watch: Sequence[str], decide: Callable[[], Op[list[Command] | None]]) -> Op[bool]:
    """WATCH ``watch``, let ``decide`` re-read the state and name the commands that fix it,
    and run them in MULTI/EXEC, again from the start when a watched key changed meanwhile.
    ``decide`` returns None to leave the state alone (not what was confirmed), [] when
    there is nothing left to fix. True when the state is now fixed."""
    for attempt in range(ATTEMPTS):
        try:
            cmds = yield from _watching(watch, decide())
            if not cmds:
                yield from one(("UNWATCH",))
                return cmds is not None
            done = yield from transaction(cmds)
        except ResponseError:  # a key turned into the wrong type: leave it
            yield from one(("UNWATCH",))
            return False
        if done is not None:
            return not any(isinstance(x, Exception) for x in done)
        yield Sleep(0.002 * (attempt + 1))
    return False


def _watching(keys: Sequence[str], op: Op[T]) -> Op[T]:
    """``op`` with WATCH ``keys`` sent ahead of its first round trip (not in one of its own)."""
    try:
        step = next(op)
    except StopIteration as stop:
        yield [("WATCH", *keys)]
        return stop.value
    first = True
    while True:
        if first and not isinstance(step, Sleep):
            replies = (yield [("WATCH", *keys), *step])[1:]
            first = False
        else:
            replies = yield step
        try:
            step = op.send(replies)
        except StopIteration as stop:
            return stop.value


def read_view(k: QueueKeys, bucket_ms: int, i: str, *, lists: bool = True) -> Op[IdView | None]:
    """A fresh look at one id (None: one of its keys has the wrong type). ``lists=False``
    skips counting its queue list entries (a scan of the list)."""
    ik = k.item(i)
    reads: list[RoundTripCommand] = [
        ("TYPE", ik), ("HMGET", ik, "c", "d"), ("SISMEMBER", k.items, i),
        ("SISMEMBER", k.processing, i), ("LPOS", k.dead, i, "COUNT", 0)]
    if lists:
        reads.append(("LPOS", k.queue, i, "COUNT", 0))
    out = yield reads
    if any(isinstance(x, Exception) for x in out) or text(out[0]) not in ("hash", "none"):
        return None
    timer = _int_or_none(out[1][1])
    timed = False
    if timer is not None:
        (member,) = yield [("SISMEMBER", k.timer(timer // bucket_ms), i)]
        if isinstance(member, Exception):
            return None
        timed = bool(member)
    return IdView(i, text(out[0]) == "hash", out[1][0] is not None, timer, bool(out[2]),
                  bool(out[3]), len(out[5]) if lists else None, len(out[4]), timed)


class Repairer:
    """Applies the fixes of confirmed findings, each in its own watched transaction."""

    def __init__(self, keys: QueueKeys, bucket_ms: int) -> None:
        self.k, self.bucket_ms = keys, bucket_ms

    def run(self, findings: Sequence[Finding]) -> Op[set[Finding]]:
        """The findings now repaired. Ids first: their fixes may add timers and index entries."""
        done: set[Finding] = set()
        by_id: dict[str, list[Finding]] = defaultdict(list)
        for f in findings:
            if f.kind in ID_KINDS:
                by_id[f.subject].append(f)
        for i, found in by_id.items():
            if (yield from self.fix_id(i, {f.kind for f in found})):
                done.update(found)
        entry_fixes: dict[str, Callable[[Finding], Op[bool]]] = {
            TIMER_INDEX: self.reindex, STALE_TIMER: self.drop_timer_entry,
            STALE_LIST: self.drop_list_entries, EMPTY_INDEX: self.drop_index_entry}
        for kind, fix in entry_fixes.items():
            for f in findings:
                if f.kind == kind and (yield from fix(f)):
                    done.add(f)
        return done

    def fix_id(self, i: str, confirmed: set[str]) -> Op[bool]:
        """Put an id in one state, if what is wrong with it now is what was confirmed."""
        def decide() -> Op[list[Command] | None]:
            v = yield from read_view(self.k, self.bucket_ms, i)
            if v is None:
                return None
            p = plan(v, self.k, self.bucket_ms)
            return p.ops if set(p.kinds) <= confirmed else None

        return (yield from _transact([self.k.item(i), self.k.items, self.k.processing], decide))

    def reindex(self, f: Finding) -> Op[bool]:
        """Index a bucket no later than its earliest timer (ZADD LT only lowers: always safe)."""
        tk = self.k.timer(f.subject)

        def decide() -> Op[list[Command] | None]:
            (ids,) = yield from _read_sets([tk])
            got = yield from _batched([("HGET", self.k.item(i), "d") for i in sorted(ids)])
            timers = [t for t in map(_int_or_none, got)
                      if t is not None and str(t // self.bucket_ms) == f.subject]
            return [("ZADD", self.k.timers, "LT", min(timers), f.subject)] if timers else []

        return (yield from _transact([tk], decide))

    def drop_timer_entry(self, f: Finding) -> Op[bool]:
        """Remove a timer entry the id does not need, only when the id is otherwise sound."""
        tk = self.k.timer(f.bucket)

        def decide() -> Op[list[Command] | None]:
            v = yield from read_view(self.k, self.bucket_ms, f.subject, lists=False)
            if v is None:
                return None
            p = plan(v, self.k, self.bucket_ms)
            if keeps_timer(v, p, f.bucket, self.bucket_ms):
                return []
            if p.kinds:
                return None
            replies = yield [("SISMEMBER", tk, f.subject), ("SCARD", tk),
                             ("ZSCORE", self.k.timers, f.bucket)]
            member, size, score = map(_ok, replies)
            if not member:
                return []
            cmds: list[Command] = [("SREM", tk, f.subject)]
            if size == 1 and score is not None:  # its last entry: the bucket leaves the index
                cmds.append(("ZREM", self.k.timers, f.bucket))
            return cmds

        return (yield from _transact([self.k.item(f.subject), self.k.items, self.k.processing, tk],
                                     decide))

    def drop_list_entries(self, f: Finding) -> Op[bool]:
        """Remove the queue list entries of an id that is not waiting."""
        def decide() -> Op[list[Command] | None]:
            (member,) = yield [("SISMEMBER", self.k.items, f.subject)]
            return [] if _ok(member) else [("LREM", self.k.queue, 0, f.subject)]

        return (yield from _transact([self.k.items, self.k.item(f.subject)], decide))

    def drop_index_entry(self, f: Finding) -> Op[bool]:
        """Remove an index entry whose timer set does not exist."""
        tk = self.k.timer(f.subject)

        def decide() -> Op[list[Command] | None]:
            (exists,) = yield [("EXISTS", tk)]
            return [] if _ok(exists) else [("ZREM", self.k.timers, f.subject)]

        return (yield from _transact([tk], decide))


# -- the entry point ------------------------------------------------------------------------

def check_op(core: QueueCore, *, repair: bool, settle: float) -> Op[CheckReport]:
    """Check every message of the queue is in exactly one state; with ``repair``, fix what
    is not. Only findings still there after ``settle`` seconds count: a live operation
    passes through some of these states for a round trip or two. One operation: every
    round trip on one connection, the wait a ``Sleep`` (so it runs sync or on asyncio)."""
    check_seconds("settle", settle)  # before any I/O
    return _check(core, repair, settle)


def _check(core: QueueCore, repair: bool, settle: float) -> Op[CheckReport]:
    k, bucket_ms = core.keys, (yield from core.ready()).bucket_ms
    snap = yield from read_snapshot(k)
    found, states = analyze(snap, k, bucket_ms)
    if found and settle > 0:
        yield Sleep(settle)
        first = set(found)
        snap = yield from read_snapshot(k)
        again, states = analyze(snap, k, bucket_ms)
        found = [f for f in again if f in first]
    repaired = (yield from Repairer(k, bucket_ms).run(found)) if repair else set()
    report = CheckReport(core.name, waiting=states["waiting"], processing=states["processing"],
                         delayed=states["delayed"], dead=states["dead"], keys=len(snap.types),
                         complete=not any(getattr(k, n) in snap.broken for n in CORE))
    for kind, detail in KINDS.items():
        for flag in (False, True):
            ids = [f.subject for f in found if f.kind == kind and (f in repaired) == flag]
            if ids:
                (report.notes if kind in NOTE_KINDS else report.problems).append(
                    Problem(kind, ids, detail, flag))
    return report


def check_queue(queue: Any, *, repair: bool = False, settle: float = 1.0) -> CheckReport:
    """``queue.check(...)``: the check of a blocking Queue (``check_op`` run on its client)."""
    return queue.check(repair=repair, settle=settle)


# -- small helpers ----------------------------------------------------------------------------

def _name(v: Any) -> str:
    """A key name, member or list entry as text. Unlike ``replies.text`` it never raises:
    bytes that are not UTF-8 (damage a fsck may meet) come out escaped."""
    return v.decode("utf-8", "backslashreplace") if isinstance(v, bytes) else str(v)


def _int_or_none(v: Any) -> int | None:
    """A field as an integer, None when absent or not a number (``replies.int_or`` has no
    None: here an absent timer and timer 0 differ)."""
    try:
        return int(v)
    except (TypeError, ValueError):
        return None


def _ok(reply: Any) -> Any:
    """A reply, or the error reply raised."""
    if isinstance(reply, Exception):
        raise reply
    return reply


def _batched(commands: Sequence[RoundTripCommand]) -> Op[list[Any]]:
    """The replies of ``commands`` (errors in place), sent BATCH commands a round trip."""
    out: list[Any] = []
    for start in range(0, len(commands), BATCH):
        out += yield list(commands[start : start + BATCH])
    return out


def _scored(raw: Any) -> list[tuple[Any, Any]]:
    """ZRANGE ... WITHSCORES as (member, score) pairs: a flat list under RESP2, pairs under RESP3."""
    if raw and isinstance(raw[0], (list, tuple)):
        return [(m, sc) for m, sc in raw]
    return [(raw[j], raw[j + 1]) for j in range(0, len(raw), 2)]


def _ends_after(bucket: str, bucket_ms: int, now: int) -> bool:
    b = _int_or_none(bucket)
    return b is not None and (b + 1) * bucket_ms > now


def _natural(s: str) -> tuple[int, int, str]:
    """Sort numbers as numbers, before anything else."""
    return (0, int(s), "") if s.isascii() and s.isdigit() else (1, 0, s)
