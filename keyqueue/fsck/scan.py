"""Reading a queue for the fsck, with plain commands only (no Lua, so it works where the
server denies EVAL): every key in one pass (``read_snapshot``), or one id afresh
(``read_view``). The reads are not atomic and the queue may be live; what they show is
judged in ``analyse``."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Sequence

from ..core.first_delivery import implied
from ..core.replies import hash_reply, int_or, name, ok, scored, text
from ..core.roundtrip import Command, Op
from ..core.schedules import unpack
from ..keys import QueueKeys

#: Keys whose wrong type makes every other check meaningless.
CORE = ("queue", "items", "processing", "timers", "dead")

BATCH = 1000  # commands per round trip, elements per LRANGE/SSCAN step


@dataclass(frozen=True)
class IdView:
    """What one look showed of one id."""

    id: str
    exists: bool  # its item hash exists
    receipt: bool  # c is set
    timer: int | None  # d in ms (None: absent or not a number)
    waiting: bool  # in items
    processing: bool  # in processing
    listed: int | None  # entries in the queue list (None: not looked up)
    dead: int  # entries in the dead list
    timed: bool  # in the timer set of its own bucket
    intent: bool = False  # in a timer set whose bucket has not passed (a claim's intent)
    lettered: bool = False  # x is set: when it was dead-lettered (only a dead letter has it)
    group: str | None = None  # g: its message group
    released: bool = False  # j is set: delayed after a delivery, it counts among its group's released messages
    held: bool = False  # listed in its group's list of held messages
    #: a lean first delivery's implied fields (first_delivery.implied), flattened: written out
    #: before a repair deletes its receipt
    first: tuple[bytes, ...] = ()


@dataclass
class Snapshot:
    """Every key of the queue as one pass of plain reads saw it (not atomically)."""

    types: dict[str, str]
    listed: Counter[str] = field(default_factory=Counter)
    waiting: set[str] = field(default_factory=set)
    processing: set[str] = field(default_factory=set)
    dead: Counter[str] = field(default_factory=Counter)
    index: dict[str, float] = field(default_factory=dict)
    timers: dict[str, set[str]] = field(default_factory=dict)  # bucket -> ids
    #: id -> (c?, d, x?, a lean first delivery's implied fields)
    hashes: dict[str, tuple[bool, int | None, bool, tuple[bytes, ...]]] = field(default_factory=dict)
    broken: set[str] = field(default_factory=set)  # keys of the wrong type
    now: int = 0  # server time, ms
    schedule_index: dict[str, float] = field(default_factory=dict)  # id -> score
    #: id -> the schedule's fields (schedules.unpack), and ids with a
    #: definition or body but no state (no schedule).
    schedules: dict[str, dict[bytes, bytes]] = field(default_factory=dict)
    schedule_strays: set[str] = field(default_factory=set)
    #: Flow-control keys (rate-limit window counters, the throttle): name -> (value, PTTL ms)
    flow: dict[str, tuple[bytes | None, int]] = field(default_factory=dict)
    #: Message groups: id -> (g, j set?) of each grouped item, the groups hash, each group's
    #: list of held ids, the held counter, the counters hash's mark of a queue with groups
    #: (mark_groups in _lib.lua), and seq (ids above it were made after this look).
    grouped: dict[str, tuple[str, bool]] = field(default_factory=dict)
    group_counts: dict[str, bytes] = field(default_factory=dict)
    group_lists: dict[str, list[str]] = field(default_factory=dict)
    held_count: bytes | None = None
    group_mark: bytes | None = None
    seq: int = 0

    def broken_ids(self, k: QueueKeys) -> set[str]:
        """Ids whose item key has the wrong type: left alone, reported as that key."""
        base = k.item("")
        return {n[len(base) :] for n in self.broken if n.startswith(base)}

    def complete(self, k: QueueKeys) -> bool:
        """Whether no core key has the wrong type (else the ids were not read, nor checked)."""
        return not any(getattr(k, n) in self.broken for n in CORE)


def read_snapshot(k: QueueKeys) -> Op[Snapshot]:
    """One pass of plain reads over every key of the queue, in round trips of up to BATCH
    commands (the lists, and the sets, are paged side by side)."""
    names: dict[str, None] = {}  # SCAN may return a key twice: one TYPE each
    cursor = "0"
    while True:
        (reply,) = yield [("SCAN", cursor, "MATCH", k.pattern, "COUNT", BATCH)]
        cursor = text(ok(reply)[0])
        names.update((name(n), None) for n in reply[1])
        if cursor == "0":
            break
    *kinds, now = yield from batched([*(("TYPE", n) for n in names), ("TIME",)])
    types = {n: text(t) for n, t in zip(names, kinds) if text(t) != "none"}
    sec, usec = ok(now)
    s = Snapshot(
        types, broken={n for n, t in types.items() if k.kind(n) not in ("", t)}, now=int(sec) * 1000 + int(usec) // 1000
    )
    if not s.complete(k):
        return s
    queue, dead = yield from _read_lists([k.queue, k.dead])
    s.listed.update(queue)
    s.dead.update(dead)
    (index,) = yield [("ZRANGE", k.timers, 0, -1, "WITHSCORES")]
    s.index = {name(b): sc for b, sc in scored(ok(index))}
    timer_base = k.base + "timer:"
    timer_keys = [n for n in types if n.startswith(timer_base) and n not in s.broken]
    sets = yield from read_sets([k.items, k.processing, *timer_keys])
    s.waiting, s.processing = sets[0], sets[1]
    s.timers = {n[len(timer_base) :]: members for n, members in zip(timer_keys, sets[2:])}
    if k.schedules not in s.broken:
        (index,) = yield [("ZRANGE", k.schedules, 0, -1, "WITHSCORES")]
        s.schedule_index = {name(m): sc for m, sc in scored(ok(index))}
    parts = [k.schedule_state, k.schedule_defs, k.schedule_bodies]
    if not any(key in s.broken for key in parts):
        states, dumps, bodies = (hash_reply(ok(raw)) for raw in (yield [("HGETALL", key) for key in parts]))
        index = s.schedule_index
        s.schedules = {name(i): unpack(st, dumps.get(i), bodies.get(i), index.get(name(i))) for i, st in states.items()}
        s.schedule_strays = {name(i) for i in (dumps.keys() | bodies.keys()) - states.keys()}
    flow = [n for n in types if (n == k.throttle or n.startswith(k.rate(0)[:-1])) and n not in s.broken]
    got = yield from batched([cmd for n in flow for cmd in (("GET", n), ("PTTL", n))])
    for j, n in enumerate(flow):
        value, ttl = got[2 * j], got[2 * j + 1]
        if not isinstance(value, Exception) and not isinstance(ttl, Exception) and int(ttl) != -2:
            s.flow[n] = (value, int(ttl))
    yield from _read_groups(k, s)
    item_base = k.base + "item:"
    ids = {n[len(item_base) :] for n in types if n.startswith(item_base) and n not in s.broken}
    ids |= set(s.listed) | s.waiting | s.processing | set(s.dead)
    ids = ids.union(*s.timers.values(), *s.group_lists.values())
    looked = sorted(ids - s.broken_ids(k))
    out = yield from batched(
        [cmd for i in looked for cmd in (("EXISTS", k.item(i)), ("HMGET", k.item(i), "c", "d", "x", "g", "j", "r"))]
    )
    for j, i in enumerate(looked):
        exists, fields = out[2 * j], out[2 * j + 1]
        if isinstance(fields, Exception):  # became something else since the SCAN
            s.broken.add(k.item(i))
        elif exists:
            s.hashes[i] = (fields[0] is not None, int_or(fields[1], None), fields[2] is not None, _first(fields))
            if fields[3] is not None:
                s.grouped[i] = (text(fields[3]), fields[4] is not None)
    return s


def _first(fields: Sequence[Any]) -> tuple[bytes, ...]:
    """From an HMGET of c, d, x, g, j, r: the fields a lean first delivery leaves out."""
    return tuple(x for pair in implied(fields[5], fields[0]).items() for x in pair)


def _read_groups(k: QueueKeys, s: Snapshot) -> Op[None]:
    """The message-group keys into ``s``: the groups hash, every group's list, the held
    counter and seq (read first: an id above it was made after the lists were read)."""
    seq, held, mark = yield [("GET", k.seq), ("GET", k.held), ("HGET", k.counters, "grouped")]
    s.seq = 0 if isinstance(seq, Exception) else int_or(seq, 0) or 0
    s.held_count = None if isinstance(held, Exception) else held
    s.group_mark = b"" if isinstance(mark, Exception) else mark  # (a wrong type is reported as that)
    if k.groups in s.types and k.groups not in s.broken:
        (raw,) = yield [("HGETALL", k.groups)]
        s.group_counts = {name(g): v for g, v in hash_reply(ok(raw)).items()}
    group_base = k.group("")
    names = sorted(n for n in s.types if n.startswith(group_base) and n not in s.broken)
    lists = yield from _read_lists(names)
    s.group_lists = {n[len(group_base) :]: ids for n, ids in zip(names, lists)}


def read_view(k: QueueKeys, bucket_ms: int, i: str, *, lists: bool = True) -> Op[IdView | None]:
    """A fresh look at one id (None: one of its keys has the wrong type). ``lists=False``
    skips counting its queue list entries (a scan of the list)."""
    ik = k.item(i)
    reads: list[Command] = [
        ("TYPE", ik),
        ("HMGET", ik, "c", "d", "x", "g", "j", "r"),
        ("SISMEMBER", k.items, i),
        ("SISMEMBER", k.processing, i),
        ("LPOS", k.dead, i, "COUNT", 0),
    ]
    if lists:
        reads.append(("LPOS", k.queue, i, "COUNT", 0))
    out = yield reads
    if any(isinstance(x, Exception) for x in out) or text(out[0]) not in ("hash", "none"):
        return None
    timer = int_or(out[1][1], None)
    group = None if out[1][3] is None else text(out[1][3])
    held = False
    if group is not None:
        (entries,) = yield [("LPOS", k.group(group), i, "COUNT", 0)]
        if isinstance(entries, Exception):
            return None
        held = bool(entries)
    timed = False
    if timer is not None:
        (member,) = yield [("SISMEMBER", k.timer(timer // bucket_ms), i)]
        if isinstance(member, Exception):
            return None
        timed = bool(member)
    return IdView(
        i,
        text(out[0]) == "hash",
        out[1][0] is not None,
        timer,
        bool(out[2]),
        bool(out[3]),
        len(out[5]) if lists else None,
        len(out[4]),
        timed,
        lettered=out[1][2] is not None,
        first=_first(out[1]),
        group=group,
        released=out[1][4] is not None,
        held=held,
    )


def read_sets(keys: Sequence[str]) -> Op[list[set[str]]]:
    """The members of each set (SSCAN), up to BATCH sets a round trip."""
    out: list[set[str]] = [set() for _ in keys]
    cursors = {j: "0" for j in range(len(keys))}
    while cursors:
        step = list(cursors)[:BATCH]
        replies = yield [("SSCAN", keys[j], cursors[j], "COUNT", BATCH) for j in step]
        for j, reply in zip(step, replies):
            cursor = text(ok(reply)[0])
            out[j].update(name(m) for m in reply[1])
            if cursor == "0":
                del cursors[j]
            else:
                cursors[j] = cursor
    return out


def batched(commands: Sequence[Command]) -> Op[list[Any]]:
    """The replies of ``commands`` (errors in place), sent BATCH commands a round trip."""
    out: list[Any] = []
    for start in range(0, len(commands), BATCH):
        out += yield list(commands[start : start + BATCH])
    return out


def _read_lists(keys: Sequence[str]) -> Op[list[list[str]]]:
    """The whole of each list, BATCH elements a step, the lists side by side."""
    out: list[list[str]] = [[] for _ in keys]
    pending = list(range(len(keys)))
    while pending:
        parts = yield [("LRANGE", keys[j], len(out[j]), len(out[j]) + BATCH - 1) for j in pending]
        for j, part in zip(pending, parts):
            out[j] += [name(x) for x in ok(part)]
        pending = [j for j, part in zip(pending, parts) if len(part) == BATCH]
    return out
