"""An fsck for one queue: find messages that are not in exactly one state, and repair them.

It uses plain commands only (no Lua), so it works where the server denies EVAL. Its reads
are not atomic and the queue may be live, so a finding counts only when a second look
``settle`` seconds later sees it too, and every repair is a small WATCH/MULTI/EXEC
transaction that re-reads its id and acts only if what it finds is what was confirmed:
a message is never lost or owned twice because of a repair.

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

import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence, Union

import redis

from .keys import QueueKeys
from .settings import check_seconds

if TYPE_CHECKING:
    from .queue import Queue

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

#: The type of each fixed key, by its name after the key base, and of each family of keys.
FIXED_TYPES = {"seq": "string", "queue": "list", "items": "set", "processing": "set",
               "timers": "zset", "dead": "list", "signal": "list", "config": "hash"}
FAMILY_TYPES = {"item:": "hash", "timer:": "set", "dedup:": "string", "stream:": "hash"}
#: Keys whose wrong type makes every other check meaningless.
CORE = ("queue", "items", "processing", "timers", "dead")

ATTEMPTS = 8   # tries of one repair when a watched key keeps changing
BATCH = 1000   # commands per pipeline, elements per LRANGE/SSCAN step
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
    """What ``check_queue`` found; ``consistent`` is False while a problem is unrepaired."""

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
    if v.processing and not v.receipt and v.intent:
        return Plan("processing", [CLAIMING])
    timer_del: Command = ()  # leave the id's own timer set
    timer_add: list[Command] = []
    if v.timer is not None:
        bucket = v.timer // bucket_ms
        timer_del = ("SREM", k.timer(bucket), i)
        timer_add = [("SADD", k.timer(bucket), i), ("ZADD", k.timers, "LT", v.timer, bucket)]

    if v.processing and v.waiting:  # a claim that died between its two steps: still waiting
        p = Plan("waiting")
        p.add(OWNED_AND_WAITING, ("SREM", k.processing, i))
    elif v.processing and v.receipt and v.timer is not None:
        p = Plan("processing")
        if not v.timed:
            p.add(UNTIMED, *timer_add)
    elif v.processing:  # an abandoned claim: back to where it came from
        p = Plan("dead" if v.dead else "delayed" if v.timer is not None else "waiting")
        p.add(UNTIMED, ("SREM", k.processing, i))
    elif v.waiting:
        p = Plan("waiting")
    elif v.dead and not (v.timer is not None and v.timed):
        p = Plan("dead")
    elif v.timer is not None:
        p = Plan("delayed")
        if not v.timed:
            p.add(ORPHAN)
    else:
        p = Plan("waiting")
        p.add(ORPHAN)

    # Complete the state. Fixes that are part of a move found above are not reported again.
    stray = None if p.kinds else STRAY_FIELDS
    if p.state == "waiting":
        if not v.waiting:
            p.add(None, ("SADD", k.items, i))
        if v.listed == 0:
            p.add(UNLISTED if v.waiting else None, ("RPUSH", k.queue, i))
        if not v.waiting or v.listed == 0:
            # a write to the hash: a script-free claimer that found an entry of this id
            # stale WATCHes it, and so keeps the entry added here (see commands.py)
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


def read_snapshot(client: redis.Redis, k: QueueKeys) -> Snapshot:
    names = [_text(n) for n in client.scan_iter(match=k.pattern, count=BATCH)]
    types: dict[str, str] = {}
    for chunk in _chunks(names):
        pipe = client.pipeline(transaction=False)
        for n in chunk:
            pipe.type(n)
        types.update((n, _text(t)) for n, t in zip(chunk, pipe.execute()) if _text(t) != "none")
    sec, usec = client.time()
    s = Snapshot(types, broken={n for n, t in types.items() if expected_type(k, n) not in ("", t)},
                 now=sec * 1000 + usec // 1000)
    if any(getattr(k, name) in s.broken for name in CORE):
        return s
    s.listed.update(_read_list(client, k.queue))
    s.dead.update(_read_list(client, k.dead))
    s.waiting = {_text(m) for m in client.sscan_iter(k.items, count=BATCH)}
    s.processing = {_text(m) for m in client.sscan_iter(k.processing, count=BATCH)}
    index: Any = client.zrange(k.timers, 0, -1, withscores=True)  # [(bucket, score), ...]
    s.index = {_text(b): float(sc) for b, sc in index}
    timer_base = k.base + "timer:"
    for n, t in types.items():
        if n.startswith(timer_base) and n not in s.broken:
            s.timers[n[len(timer_base):]] = {_text(m) for m in client.sscan_iter(n, count=BATCH)}
    item_base = k.base + "item:"
    ids = {n[len(item_base):] for n in types if n.startswith(item_base) and n not in s.broken}
    ids |= set(s.listed) | s.waiting | s.processing | set(s.dead)
    ids = ids.union(*s.timers.values())
    for chunk in _chunks(sorted(ids - s.broken_ids(k))):
        pipe = client.pipeline(transaction=False)
        for i in chunk:
            pipe.exists(k.item(i))
            pipe.hmget(k.item(i), "c", "d")
        out = pipe.execute(raise_on_error=False)
        for j, i in enumerate(chunk):
            exists, fields = out[2 * j], out[2 * j + 1]
            if isinstance(fields, Exception):  # became something else since the SCAN
                s.broken.add(k.item(i))
            elif exists:
                s.hashes[i] = (fields[0] is not None, _int(fields[1]))
    return s


def expected_type(k: QueueKeys, key: str) -> str:
    """The Redis type a key of the queue must have ('' for a name keyqueue does not use)."""
    name = key[len(k.base):]
    for prefix, kind in FAMILY_TYPES.items():
        if name.startswith(prefix):
            return kind
    return FIXED_TYPES.get(name, "")


def _read_list(client: redis.Redis, key: str) -> list[str]:
    out: list[str] = []
    while True:
        part = client.lrange(key, len(out), len(out) + BATCH - 1)
        out.extend(_text(x) for x in part)
        if len(part) < BATCH:
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

def _transact(client: redis.Redis, watch: Sequence[str],
              decide: Callable[[], list[Command] | None]) -> bool:
    """WATCH ``watch``, let ``decide`` re-read the state and name the commands that fix it,
    and run them in MULTI/EXEC, again from the start when a watched key changed meanwhile.
    ``decide`` returns None to leave the state alone (not what was confirmed), [] when
    there is nothing left to fix. True when the state is now fixed."""
    for attempt in range(ATTEMPTS):
        with client.pipeline(transaction=True) as pipe:
            try:
                pipe.watch(*watch)
                cmds = decide()
                if not cmds:
                    return cmds is not None
                pipe.multi()
                for cmd in cmds:
                    pipe.execute_command(*cmd)
                pipe.execute()
                return True
            except redis.WatchError:
                time.sleep(0.002 * (attempt + 1))
            except redis.ResponseError:  # a key turned into the wrong type: leave it
                return False
    return False


def read_view(client: redis.Redis, k: QueueKeys, bucket_ms: int, i: str,
              *, lists: bool = True) -> IdView | None:
    """A fresh look at one id (None: one of its keys has the wrong type). ``lists=False``
    skips counting its queue list entries (a scan of the list)."""
    ik = k.item(i)
    pipe = client.pipeline(transaction=False)
    pipe.type(ik)
    pipe.hmget(ik, "c", "d")
    pipe.sismember(k.items, i)
    pipe.sismember(k.processing, i)
    pipe.lpos(k.dead, i, count=0)
    if lists:
        pipe.lpos(k.queue, i, count=0)
    out = pipe.execute(raise_on_error=False)
    if any(isinstance(x, Exception) for x in out) or _text(out[0]) not in ("hash", "none"):
        return None
    timer = _int(out[1][1])
    timed = False
    if timer is not None:
        try:
            timed = bool(client.sismember(k.timer(timer // bucket_ms), i))
        except redis.ResponseError:
            return None
    return IdView(i, _text(out[0]) == "hash", out[1][0] is not None, timer, bool(out[2]),
                  bool(out[3]), len(out[5]) if lists else None, len(out[4]), timed)


class Repairer:
    """Applies the fixes of confirmed findings, each in its own watched transaction."""

    def __init__(self, client: redis.Redis, keys: QueueKeys, bucket_ms: int) -> None:
        self.client, self.k, self.bucket_ms = client, keys, bucket_ms

    def run(self, findings: Sequence[Finding]) -> set[Finding]:
        """The findings now repaired. Ids first: their fixes may add timers and index entries."""
        done: set[Finding] = set()
        by_id: dict[str, list[Finding]] = defaultdict(list)
        for f in findings:
            if f.kind in ID_KINDS:
                by_id[f.subject].append(f)
        for i, found in by_id.items():
            if self.fix_id(i, {f.kind for f in found}):
                done.update(found)
        entry_fixes: dict[str, Callable[[Finding], bool]] = {
            TIMER_INDEX: self.reindex, STALE_TIMER: self.drop_timer_entry,
            STALE_LIST: self.drop_list_entries, EMPTY_INDEX: self.drop_index_entry}
        for kind, fix in entry_fixes.items():
            done.update(f for f in findings if f.kind == kind and fix(f))
        return done

    def fix_id(self, i: str, confirmed: set[str]) -> bool:
        """Put an id in one state, if what is wrong with it now is what was confirmed."""
        def decide() -> list[Command] | None:
            v = read_view(self.client, self.k, self.bucket_ms, i)
            if v is None:
                return None
            p = plan(v, self.k, self.bucket_ms)
            return p.ops if set(p.kinds) <= confirmed else None

        return _transact(self.client, [self.k.item(i), self.k.items, self.k.processing], decide)

    def reindex(self, f: Finding) -> bool:
        """Index a bucket no later than its earliest timer (ZADD LT only lowers: always safe)."""
        tk = self.k.timer(f.subject)

        def decide() -> list[Command] | None:
            ids = [_text(m) for m in self.client.sscan_iter(tk, count=BATCH)]
            timers: list[int] = []
            for chunk in _chunks(ids):
                pipe = self.client.pipeline(transaction=False)
                for i in chunk:
                    pipe.hget(self.k.item(i), "d")
                timers += [t for t in map(_int, pipe.execute(raise_on_error=False))
                           if t is not None and str(t // self.bucket_ms) == f.subject]
            return [("ZADD", self.k.timers, "LT", min(timers), f.subject)] if timers else []

        return _transact(self.client, [tk], decide)

    def drop_timer_entry(self, f: Finding) -> bool:
        """Remove a timer entry the id does not need, only when the id is otherwise sound."""
        tk = self.k.timer(f.bucket)

        def decide() -> list[Command] | None:
            v = read_view(self.client, self.k, self.bucket_ms, f.subject, lists=False)
            if v is None:
                return None
            p = plan(v, self.k, self.bucket_ms)
            if keeps_timer(v, p, f.bucket, self.bucket_ms):
                return []
            if p.kinds:
                return None
            pipe = self.client.pipeline(transaction=False)
            pipe.sismember(tk, f.subject)
            pipe.scard(tk)
            pipe.zscore(self.k.timers, f.bucket)
            member, size, score = pipe.execute()
            if not member:
                return []
            cmds: list[Command] = [("SREM", tk, f.subject)]
            if size == 1 and score is not None:  # its last entry: the bucket leaves the index
                cmds.append(("ZREM", self.k.timers, f.bucket))
            return cmds

        return _transact(self.client, [self.k.item(f.subject), self.k.items, self.k.processing, tk],
                         decide)

    def drop_list_entries(self, f: Finding) -> bool:
        """Remove the queue list entries of an id that is not waiting."""
        def decide() -> list[Command] | None:
            if self.client.sismember(self.k.items, f.subject):
                return []
            return [("LREM", self.k.queue, 0, f.subject)]

        return _transact(self.client, [self.k.items, self.k.item(f.subject)], decide)

    def drop_index_entry(self, f: Finding) -> bool:
        """Remove an index entry whose timer set does not exist."""
        tk = self.k.timer(f.subject)

        def decide() -> list[Command] | None:
            return [] if self.client.exists(tk) else [("ZREM", self.k.timers, f.subject)]

        return _transact(self.client, [tk], decide)


# -- the entry point ------------------------------------------------------------------------

def check_queue(queue: Queue, *, repair: bool = False, settle: float = 1.0) -> CheckReport:
    """Check every message of ``queue`` is in exactly one state; with ``repair``, fix what
    is not. Only findings still there after ``settle`` seconds count: a live operation
    passes through some of these states for a round trip or two."""
    check_seconds("settle", settle)
    client, k, bucket_ms = queue.client, queue.keys, queue.settings.bucket_ms
    snap = read_snapshot(client, k)
    found, states = analyze(snap, k, bucket_ms)
    if found and settle > 0:
        time.sleep(settle)
        first = set(found)
        snap = read_snapshot(client, k)
        again, states = analyze(snap, k, bucket_ms)
        found = [f for f in again if f in first]
    repaired = Repairer(client, k, bucket_ms).run(found) if repair else set()
    report = CheckReport(queue.name, waiting=states["waiting"], processing=states["processing"],
                         delayed=states["delayed"], dead=states["dead"], keys=len(snap.types),
                         complete=not any(getattr(k, n) in snap.broken for n in CORE))
    for kind, detail in KINDS.items():
        for flag in (False, True):
            ids = [f.subject for f in found if f.kind == kind and (f in repaired) == flag]
            if ids:
                (report.notes if kind in NOTE_KINDS else report.problems).append(
                    Problem(kind, ids, detail, flag))
    return report


# -- small helpers ----------------------------------------------------------------------------

def _text(v: Any) -> str:
    return v.decode("utf-8", "backslashreplace") if isinstance(v, bytes) else str(v)


def _int(v: Any) -> int | None:
    try:
        return int(v)
    except (TypeError, ValueError):
        return None


def _ends_after(bucket: str, bucket_ms: int, now: int) -> bool:
    b = _int(bucket)
    return b is not None and (b + 1) * bucket_ms > now


def _natural(s: str) -> tuple[int, int, str]:
    """Sort numbers as numbers, before anything else."""
    return (0, int(s), "") if s.isascii() and s.isdigit() else (1, 0, s)


def _chunks(xs: Sequence[str]) -> Iterable[Sequence[str]]:
    for start in range(0, len(xs), BATCH):
        yield xs[start : start + BATCH]
