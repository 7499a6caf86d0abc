"""Repairing confirmed findings. Each repair is a small WATCH/MULTI/EXEC transaction that
re-reads its id (or entry, or bucket) and acts only if what it finds is what was confirmed:
a message is never lost or owned twice because of a repair."""

from __future__ import annotations

from collections import defaultdict
from typing import Callable, Sequence

from redis.exceptions import ResponseError

from ..core.replies import int_or, ok, text
from ..core.roundtrip import Command, Op, Sleep, T, one, transaction
from ..core.schedules import on_grid, schedule_raws, schedule_reads
from ..errors import InvalidArgument
from ..keys import QueueKeys
from ..settings import parse_rate, to_ms
from .analyse import (
    BAD_FLOW,
    EMPTY_INDEX,
    GROUP_COUNT,
    GROUP_ENTRY,
    GROUP_MARK,
    HELD_COUNT,
    ID_KINDS,
    SCHEDULE_INDEX,
    SCHEDULE_STRAY,
    STALE_LIST,
    STALE_TIMER,
    TIMER_INDEX,
    Finding,
    flow_ok,
    keeps_timer,
    plan,
    schedule_score,
)
from .scan import Snapshot, batched, read_sets, read_view

ATTEMPTS = 8  # tries of one repair when a watched key keeps changing


class Repairer:
    """Applies the fixes of confirmed findings, each in its own watched transaction."""

    def __init__(self, keys: QueueKeys, bucket_ms: int, snap: Snapshot | None = None, group_limit: int = 1) -> None:
        self.k, self.bucket_ms = keys, bucket_ms
        #: The last look (its grouped ids and seq bound a group's messages) and group_concurrency.
        self.snap, self.group_limit = snap or Snapshot({}), group_limit

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
            TIMER_INDEX: self.reindex,
            STALE_TIMER: self.drop_timer_entry,
            STALE_LIST: self.drop_list_entries,
            EMPTY_INDEX: self.drop_index_entry,
            SCHEDULE_INDEX: self.reindex_schedule,
            SCHEDULE_STRAY: self.drop_schedule_parts,
            BAD_FLOW: self.fix_flow_key,
            GROUP_ENTRY: self.drop_group_entry,
            GROUP_COUNT: self.recount_group,
            HELD_COUNT: self.recount_held,
            GROUP_MARK: self.mark_groups,
        }
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
            (ids,) = yield from read_sets([tk])
            got = yield from batched([("HGET", self.k.item(i), "d") for i in sorted(ids)])
            timers = [
                t for t in (int_or(x, None) for x in got) if t is not None and str(t // self.bucket_ms) == f.subject
            ]
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
            replies = yield [("SISMEMBER", tk, f.subject), ("SCARD", tk), ("ZSCORE", self.k.timers, f.bucket)]
            member, size, score = map(ok, replies)
            if not member:
                return []
            cmds: list[Command] = [("SREM", tk, f.subject)]
            if size == 1 and score is not None:  # its last entry: the bucket leaves the index
                cmds.append(("ZREM", self.k.timers, f.bucket))
            return cmds

        return (yield from _transact([self.k.item(f.subject), self.k.items, self.k.processing, tk], decide))

    def drop_list_entries(self, f: Finding) -> Op[bool]:
        """Remove the queue list entries of an id that is not waiting."""

        def decide() -> Op[list[Command] | None]:
            (member,) = yield [("SISMEMBER", self.k.items, f.subject)]
            return [] if ok(member) else [("LREM", self.k.queue, 0, f.subject)]

        return (yield from _transact([self.k.items, self.k.item(f.subject)], decide))

    def drop_index_entry(self, f: Finding) -> Op[bool]:
        """Remove an index entry whose timer set does not exist."""
        tk = self.k.timer(f.subject)

        def decide() -> Op[list[Command] | None]:
            (exists,) = yield [("EXISTS", tk)]
            return [] if ok(exists) else [("ZREM", self.k.timers, f.subject)]

        return (yield from _transact([tk], decide))

    def reindex_schedule(self, f: Finding) -> Op[bool]:
        """Score a schedule's index entry as its state says (or drop the entry of a schedule
        that is gone); the WATCH on the state keeps a fire or upsert meanwhile whole. An
        ``every`` schedule scored past its state's next fire but off its grid is scored at
        the next fire time of its grid from there instead (what fired before that score
        stays fired)."""
        k, sid = self.k, f.subject

        def decide() -> Op[list[Command] | None]:
            parts = yield schedule_reads(k, [sid])
            (raw,) = schedule_raws([ok(part) for part in parts])
            if not raw:
                return [("ZREM", k.schedules, sid)]
            want = schedule_score(raw)
            if want is not None and raw[b"i"]:
                want = on_grid(raw, float(raw[b"i"])) or want
            return None if want is None else [("ZADD", k.schedules, str(want), sid)]

        return (yield from _transact([k.schedule_state, k.schedule_defs, k.schedules], decide))

    def drop_schedule_parts(self, f: Finding) -> Op[bool]:
        """Delete the definition and body of an id that has no schedule (no state)."""
        k, sid = self.k, f.subject

        def decide() -> Op[list[Command] | None]:
            (there,) = yield [("HEXISTS", k.schedule_state, sid)]
            return [] if ok(there) else [("HDEL", k.schedule_defs, sid), ("HDEL", k.schedule_bodies, sid)]

        return (yield from _transact([k.schedule_state], decide))

    def fix_flow_key(self, f: Finding) -> Op[bool]:
        """A throttle expires at the time it holds; a window counter at its window's end (by
        the rate limit in force; without one, or unreadable, it is deleted: it only ever
        lowers what one window allows)."""
        key = f.subject

        def decide() -> Op[list[Command] | None]:
            value, ttl, limit = yield [("GET", key), ("PTTL", key), ("HGET", self.k.config, "rate_limit")]
            value, ttl = ok(value), int(ok(ttl))
            if value is None or flow_ok(value, ttl):
                return []
            if not value.lstrip(b"-").isdigit():
                return [("DEL", key)]
            if key == self.k.throttle:
                return [("PEXPIREAT", key, int(value))]
            try:
                window = to_ms(parse_rate(text(ok(limit)))[1])
                return [("PEXPIREAT", key, (int(key.rsplit(":", 1)[1]) + 1) * window)]
            except (ValueError, InvalidArgument):
                return [("DEL", key)]

        return (yield from _transact([key], decide))

    def drop_group_entry(self, f: Finding) -> Op[bool]:
        """Remove the entries of an id from a group list it is not held in (all but the first
        when it is held there), counting them out of ``held``."""
        gk, i = self.k.group(f.bucket), f.subject

        def decide() -> Op[list[Command] | None]:
            v = yield from read_view(self.k, self.bucket_ms, i, lists=False)
            if v is None:
                return None
            (entries,) = yield [("LPOS", gk, i, "COUNT", 0)]
            n = len(ok(entries))
            keep = v.group == f.bucket and plan(v, self.k, self.bucket_ms).state == "held"
            if n <= int(keep):
                return []
            if keep:  # the later entries go (LREM from the tail)
                return [("LREM", gk, 1 - n, i), ("DECRBY", self.k.held, n - 1)]
            return [("LREM", gk, 0, i), ("DECRBY", self.k.held, n)]

        return (yield from _transact([self.k.item(i), gk, self.k.held], decide))

    def recount_group(self, f: Finding) -> Op[bool]:
        """Set a group's count to its released messages (every id of the group is one the last
        look saw, or newer than its seq), and release held ones while it has room."""
        g, k = f.subject, self.k
        gk = k.group(g)

        def decide() -> Op[list[Command] | None]:
            (seq,) = yield [("GET", k.seq)]
            newer = range(self.snap.seq + 1, int_or(ok(seq), 0) + 1)
            ids = [i for i, (group, _) in self.snap.grouped.items() if group == g] + [str(n) for n in newer]
            got = yield from batched([("HMGET", k.item(i), "g", "j") for i in ids])
            live: list[list[int]] = (
                [ok(m) for m in (yield [("SMISMEMBER", k.items, *ids), ("SMISMEMBER", k.processing, *ids)])]
                if ids
                else [[], []]
            )
            released = sum(  # (waiting or in flight; delayed, with j)
                1
                for x, w, p in zip(got, *live)
                if not isinstance(x, Exception) and x[0] == g.encode() and (w == 1 or p == 1 or x[1] is not None)
            )
            room = self.group_limit - released
            head = ok((yield [("LRANGE", gk, 0, room - 1)])[0]) if room > 0 else []
            out: list[Command] = []
            for raw in head:
                i = text(raw)
                out += [("RPUSH", k.queue, i), ("SADD", k.items, i)]
            n = len(head)
            if n:
                out += [
                    ("LTRIM", gk, n, -1),
                    ("DECRBY", k.held, n),
                    *[("RPUSH", k.signal, 1), ("LTRIM", k.signal, 0, 0)],
                ]
            count = released + n
            out.append(("HSET", k.groups, g, count) if count else ("HDEL", k.groups, g))
            return out

        return (yield from _transact([k.groups, k.held, gk, k.seq], decide))

    def mark_groups(self, f: Finding) -> Op[bool]:
        """Mark the queue as one with message groups (a mark only: it is never removed)."""
        yield [("HSET", self.k.counters, "grouped", "1")]
        return True

    def recount_held(self, f: Finding) -> Op[bool]:
        """Set the held counter to the entries of the group lists (every change to a list
        changes the counter too, so the WATCH on it covers them)."""
        k = self.k

        def decide() -> Op[list[Command] | None]:
            names: list[str] = []
            cursor = "0"
            while True:
                (reply,) = yield [("SCAN", cursor, "MATCH", k.group("*"), "COUNT", 1000)]
                cursor = text(ok(reply)[0])
                names += [text(n) for n in reply[1]]
                if cursor == "0":
                    break
            lengths = yield from batched([("LLEN", n) for n in dict.fromkeys(names)])
            total = sum(int(ok(n)) for n in lengths)
            return [("SET", k.held, total)] if total else [("DEL", k.held)]

        return (yield from _transact([k.held], decide))


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
