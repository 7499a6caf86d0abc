"""The reaper (by the rules of core/states.py), requeue and purge, in bounded steps."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Sequence

from redis.exceptions import ResponseError

from ...core.first_delivery import implied, written_out
from ...core.replies import int_or as _int
from ...core.replies import text as _text
from ...core.results import Purged, ReapPosition, ReapResult, ReapStep, Requeued
from ...core.roundtrip import Command, Op, one
from ...core.states import Act, Decision, Seen, decide
from .base import ATTEMPTS, PURGE_VISIBILITY_MS, _Claim, _signal, groups_reads, has_groups, refuse_groups
from .consume import Consume


class Maintain(Consume):
    def reap_step(
        self,
        bucket_ms: int,
        max_receives: int | None,
        limit: int,
        position: ReapPosition,
        retention_ms: int | None = None,
    ) -> Op[ReapStep]:
        """One due bucket (or one chunk of a large one), by the rules of core/states.py."""
        k = self.keys
        bucket, cursor, skip, _ = position  # (nothing deferred: this mode serves no groups)
        res = [0, 0, 0, 0]
        broken: list[str] = []
        now, (config, grouped, group_mark) = yield from self._open(
            (*self.waking_keys, k.counters), [("EXISTS", k.config), *groups_reads(k)]
        )
        refuse_groups(has_groups(grouped, group_mark), k.name)
        missing = config == 0
        if bucket == "":
            due = yield from one(
                (
                    "ZRANGEBYSCORE",
                    k.timers,
                    "-inf",
                    now,
                    "LIMIT",
                    skip,
                    1,
                )
            )
            if not due:
                return ReapStep(ReapResult(*res), ("", "0", skip, ""), True, missing)
            bucket, cursor = _text(due[0]), "0"
        tk = k.timer(bucket)
        kind, card, scan = yield [("TYPE", tk), ("SCARD", tk), ("SSCAN", tk, cursor, "COUNT", limit)]
        if _text(kind) not in ("none", "set"):
            return ReapStep(ReapResult(*res), ("", "0", skip + 1, ""), False, missing, [tk])
        whole = cursor == "0" and int(card) <= limit
        if whole:
            members = yield from one(("SMEMBERS", tk))
            ids = [_text(x) for x in members]
            cursor = "0"
        else:
            cursor, ids = _text(scan[0]), [_text(x) for x in scan[1]]
        end = (int(bucket) + 1) * bucket_ms
        # watch_chunk ids a transaction; kept is -1 when some kept changing under us.
        earliest: int | None = None
        kept = 0
        for i in range(0, len(ids), self.watch_chunk):
            part = ids[i : i + self.watch_chunk]
            e, n = yield from self._settle(tk, part, now, end, bucket_ms, max_receives, res, broken, retention_ms)
            earliest = min((t for t in (earliest, e) if t is not None), default=None)
            kept = -1 if n < 0 or kept < 0 else kept + n
        if whole or cursor == "0":
            # Rescore a bucket examined whole; a large one stays due until it shrinks.
            if not (yield from self._rescore(tk, bucket, earliest if whole else None, kept if whole else -1, now)):
                skip += 1  # still due: the next step looks past it
            bucket, cursor = "", "0"
        return ReapStep(ReapResult(*res), (bucket, cursor, skip, ""), False, missing, broken)

    def _settle(
        self,
        tk: str,
        ids: list[str],
        now: int,
        end: int,
        bucket_ms: int,
        max_receives: int | None,
        res: list[int],
        broken: list[str],
        retention_ms: int | None = None,
    ) -> Op[tuple[int | None, int]]:
        """Decide and apply each id's rule in one WATCHed transaction. Returns the earliest
        time to look at this bucket again (None when nothing stays) and how many ids stay."""
        k = self.keys
        if not ids:
            return None, 0
        limit = max_receives
        start = len(broken)
        for _ in range(ATTEMPTS):
            del broken[start:]
            item_keys = [k.item(i) for i in ids]
            got = yield [
                ("WATCH", *item_keys),
                *(("HMGET", key, "c", "d", "r", "e", "t") for key in item_keys),
                ("SMISMEMBER", k.processing, *ids),
                ("SMISMEMBER", k.items, *ids),
                *(("EXISTS", key) for key in item_keys),
            ]
            n = len(ids)
            hashes, held, waiting, exists = got[1 : n + 1], got[n + 1], got[n + 2], got[n + 3 :]
            plan: dict[str, tuple[Decision, Seen, list[Any]]] = {}
            for i, h, p, w, e in zip(ids, hashes, held, waiting, exists):
                if isinstance(h, ResponseError):
                    broken.append(k.item(i))
                    continue
                timer = None if h[1] is None else int(h[1])
                seen = Seen(
                    exists=e == 1,
                    receipt=h[0] is not None,
                    timer=timer,
                    processing=p == 1,
                    waiting=w == 1,
                    timed=timer is not None and k.timer(timer // bucket_ms) == tk,
                )
                plan[i] = (decide(seen, now, end), seen, h)
            asks = [i for i, (dec, _, _) in plan.items() if dec.act is Act.ASK_DEAD]
            if asks:
                positions = yield [("LPOS", k.dead, i) for i in asks]
                for i, pos in zip(asks, positions):
                    seen = replace(plan[i][1], dead=pos is not None)
                    plan[i] = (decide(seen, now, end), seen, plan[i][2])
            tx: list[Command] = []
            counts = [0, 0, 0, 0]
            cutoff = None if retention_ms is None else now - retention_ms
            earliest: int | None = None
            kept = len(ids) - len(plan)  # broken items stay
            moved = False
            for i, (dec, seen, h) in plan.items():
                ik = k.item(i)
                if dec.unclaim:
                    tx.append(("SREM", k.processing, i))
                if dec.act is Act.KEEP:
                    assert dec.timer is not None
                    earliest = dec.timer if earliest is None else min(earliest, dec.timer)
                    kept += 1
                    continue
                tx.append(("SREM", tk, i))
                if seen.timer is not None and self.keys.timer(seen.timer // bucket_ms) != tk:
                    tx.append(("SREM", self.keys.timer(seen.timer // bucket_ms), i))
                if dec.act is Act.FORGET:
                    tx += [("SREM", k.processing, i), ("SREM", k.items, i)]
                elif (
                    cutoff is not None
                    and h[4] is not None
                    and int(h[4]) <= cutoff
                    and (dec.act is Act.EXPIRE or dec.act is Act.RELEASE and seen.timer is not None and not dec.unclaim)
                ):
                    # Past its retention at its deadline (or at the end of its delay): deleted.
                    tx += [("SREM", k.processing, i), ("DEL", ik)]
                    counts[3] += 1
                elif dec.act is Act.EXPIRE:
                    tx += [("SREM", k.processing, i), *written_out(ik, h[2], h[0]), ("HDEL", ik, "c", "d")]
                    r = _int(h[2] or implied(h[2], h[0]).get(b"r"))
                    if limit is not None and r >= limit:
                        error = (
                            () if h[3] is not None else ("e", f"visibility timeout expired on receive {r} of {limit}")
                        )
                        tx += [("HSET", ik, "x", now, *error), ("RPUSH", k.dead, i)]
                        counts[1] += 1
                    else:
                        tx += [("RPUSH", k.queue, i), ("SADD", k.items, i)]
                        counts[0] += 1
                        moved = True
                elif dec.act is Act.RELEASE:
                    tx += [
                        *written_out(ik, h[2], h[0]),
                        ("HDEL", ik, "c", "d"),
                        ("RPUSH", k.queue, i),
                        ("SADD", k.items, i),
                    ]
                    if not seen.receipt and seen.timer is None:
                        tx.append(("HINCRBY", ik, "n", 0))  # a write, so a claimer's WATCH sees it
                    counts[2 if seen.timer is not None and not dec.unclaim else 0] += 1
                    moved = True
                elif dec.act is Act.DROP and seen.waiting and (seen.receipt or seen.timer is not None):
                    tx += [*written_out(ik, h[2], h[0]), ("HDEL", ik, "c", "d")]
            if moved:
                tx += _signal(k.signal)
            tx += [
                ("HINCRBY", k.counters, field, n)
                for field, n in (("redelivered", counts[0]), ("dead_lettered", counts[1]), ("expired", counts[3]))
                if n
            ]
            if broken and earliest is None:
                earliest = now  # a corrupt item stays due, like reap.lua
            if not tx:
                (yield from one(("UNWATCH",)))
                return earliest, kept
            if (yield from self._commit(tx)) is not None:
                for j in range(4):
                    res[j] += counts[j]
                return earliest, kept
        return now, -1  # kept changing under us: look again on the next pass

    def group_refill(self, groups: Sequence[str]) -> Op[int]:
        """Nothing: this mode serves no grouped queue (its claims and reaps refuse one), so a
        raise it writes applies at each group's next end by a scripted client, or at
        ``check --repair``."""
        return 0
        yield  # (an Op)

    # -- requeue and purge ----------------------------------------------------------------------

    def requeue(self, source: str, ids: Sequence[str], limit: int, bucket_ms: int, cursor: str = "0") -> Op[Requeued]:
        """At most watch_chunk ids a transaction: given ids (each requeued on its own terms)
        in chunks, the dead list's head at most watch_chunk at a time."""
        if len(ids) <= self.watch_chunk:
            return (yield from self._requeue(source, ids, min(limit, self.watch_chunk), bucket_ms, cursor))
        unique = list(dict.fromkeys(ids))
        moved = examined = 0
        for i in range(0, len(unique), self.watch_chunk):
            r = yield from self._requeue(source, unique[i : i + self.watch_chunk], limit, bucket_ms, "0")
            moved, examined = moved + r.requeued, examined + r.examined
        return Requeued(moved, examined, "0")

    def _requeue(self, source: str, ids: Sequence[str], limit: int, bucket_ms: int, cursor: str) -> Op[Requeued]:
        k = self.keys
        for _ in range(ATTEMPTS):
            watch = [k.dead] if source == "dead" else []
            reads: list[Command] = []
            if not ids:
                reads.append(
                    ("LRANGE", k.dead, 0, limit - 1)
                    if source == "dead"
                    else ("SSCAN", k.processing, cursor, "COUNT", limit)
                )
            now, (grouped, group_mark, *got) = yield from self._open(
                self.waking_keys, [*groups_reads(k), *reads], watch=watch
            )
            if has_groups(grouped, group_mark):
                (yield from one(("UNWATCH",)))
                refuse_groups(True, k.name)
            next_cursor = "0"
            if ids:
                todo = list(dict.fromkeys(ids))
            elif source == "dead":
                todo = [_text(x) for x in got[0]]
            else:
                next_cursor, todo = _text(got[0][0]), [_text(x) for x in got[0][1]]
                if len(todo) > self.watch_chunk:  # SSCAN returns a small set whole, whatever COUNT says
                    r = yield from self.requeue(source, todo, limit, bucket_ms)
                    return Requeued(r.requeued, r.examined, next_cursor)
            if not todo:
                (yield from one(("UNWATCH",)))
                return Requeued(0, 0, next_cursor)
            item_keys = [k.item(i) for i in todo]
            check: list[Command] = [("WATCH", *item_keys), *(("HMGET", key, "t", "d", "r", "c") for key in item_keys)]
            if source == "dead" and ids:
                check += [("LPOS", k.dead, i) for i in todo]
            elif source == "processing":
                check.append(("SMISMEMBER", k.processing, *todo))
            got = yield check
            self._raise_errors(check, got)
            fields = got[1 : len(todo) + 1]
            if source == "dead":
                present = [p is not None for p in got[len(todo) + 1 :]] if ids else [True] * len(todo)
            else:
                present = [p == 1 for p in got[-1]]
            tx: list[Command] = []
            moved: list[str] = []
            for i, f, p in zip(todo, fields, present):
                if not p:
                    continue
                if source == "dead" and ids:
                    tx.append(("LREM", k.dead, 1, i))
                if source == "processing":
                    tx.append(("SREM", k.processing, i))
                    tx += self._drop_timer(i, _int(f[1]), bucket_ms)
                if f[0] is not None and i not in moved:
                    moved.append(i)
                    # receives reset and the age restarted: retention counts from the requeue
                    tx += [
                        *written_out(k.item(i), f[2], f[3]),  # (n and f: r is reset)
                        ("HDEL", k.item(i), "r", "c", "d", "x"),
                        ("HSET", k.item(i), "t", now),
                    ]
            if source == "dead" and not ids:
                tx.insert(0, ("LTRIM", k.dead, len(todo), -1))
            if moved:
                tx += [("RPUSH", k.queue, *moved), ("SADD", k.items, *moved), *_signal(k.signal)]
            if not tx:
                (yield from one(("UNWATCH",)))
                return Requeued(0, len(todo), next_cursor)
            if (yield from self._commit(tx)) is not None:
                return Requeued(len(moved), len(todo), next_cursor)
        return Requeued(0, 0, cursor)

    def purge_step(self, source: str, limit: int, position: tuple[int, str], bucket_ms: int) -> Op[Purged]:
        for _ in range(ATTEMPTS):
            result = yield from self._purge_once(source, limit, position, bucket_ms)
            if result is not None:
                return result
        return Purged(0, position, False)

    def purge_dead(self, ids: Sequence[str]) -> Op[int]:
        """Delete the dead letters among ``ids``: the hashes WATCHed (watch_chunk at a time),
        so one requeued meanwhile (requeue writes its hash) makes the EXEC fail and the look
        is made again."""
        deleted = 0
        for i in range(0, len(ids), self.watch_chunk):
            deleted += yield from self._purge_dead(ids[i : i + self.watch_chunk])
        return deleted

    def _purge_dead(self, ids: Sequence[str]) -> Op[int]:
        k = self.keys
        for _ in range(ATTEMPTS):
            _, found = yield from self._open(
                self.state_keys, [("LPOS", k.dead, i) for i in ids], watch=[k.item(i) for i in ids]
            )
            gone = [i for i, pos in zip(ids, found) if pos is not None]
            if not gone:
                (yield from one(("UNWATCH",)))
                return 0
            done = yield from self._commit(
                [*(("LREM", k.dead, 0, i) for i in gone), ("DEL", *(k.item(i) for i in gone))]
            )
            if done is not None:
                return sum(1 for n in done[: len(gone)] if int(n) > 0)
        return 0

    def _purge_once(self, source: str, limit: int, position: tuple[int, str], bucket_ms: int) -> Op[Purged | None]:
        k = self.keys
        if source in ("delayed", "processing"):
            # (a message delayed after a delivery, or in flight, can be its group's current
            # one: deleting it must release the group's next, which this mode does not do;
            # waiting is refused by the claim it purges with)
            grouped, group_mark = yield groups_reads(k)
            refuse_groups(has_groups(grouped, group_mark), k.name)
        if source == "waiting":
            # Take the ids as a claim does (so no claimer gets a message being deleted), then
            # delete what we own; a purge that dies midway leaves them in flight, not lost.
            purged = 0
            while purged < limit:
                size = min(limit - purged, self.watch_chunk)
                got, deadline, _ = yield from self._claim_once(
                    size, PURGE_VISIBILITY_MS, bucket_ms, None, _Claim(), limits=False
                )
                if got:
                    yield from self._commit(
                        [
                            ("SREM", k.processing, *got),
                            ("SREM", k.timer(deadline // bucket_ms), *got),
                            ("DEL", *(k.item(i) for i in got)),
                        ]
                    )
                purged += len(got)
                if len(got) < size:
                    break
            done = not purged or (purged < limit and int((yield from one(("SCARD", k.items)))) == 0)
            return Purged(purged, (0, "0"), done)
        if source == "dead":
            _, (ids,) = yield from self._open(self.state_keys, [("LRANGE", k.dead, 0, limit - 1)], watch=[k.dead])
            if not ids:
                (yield from one(("UNWATCH",)))
                return Purged(0, (0, "0"), True)
            tx: list[Command] = [("LTRIM", k.dead, len(ids), -1), ("DEL", *(k.item(_text(i)) for i in ids))]
            if (yield from self._commit(tx)) is None:
                return None
            return Purged(len(ids), (0, "0"), len(ids) < limit)
        if source == "processing":
            _, (ids,) = yield from self._open(self.state_keys, [("SRANDMEMBER", k.processing, limit)])
            todo = [_text(i) for i in ids]
            if not todo:
                return Purged(0, (0, "0"), True)
            purged = 0
            for start in range(0, len(todo), self.watch_chunk):
                part = todo[start : start + self.watch_chunk]
                item_keys = [k.item(i) for i in part]
                got = yield [("WATCH", *item_keys), *(("HGET", key, "d") for key in item_keys)]
                tx = [("SREM", k.processing, *part), ("DEL", *item_keys)]
                for i, d in zip(part, got[1:]):
                    tx += self._drop_timer(i, _int(d), bucket_ms)
                if (yield from self._commit(tx)) is None:
                    return Purged(purged, (0, "0"), False) if purged else None
                purged += len(part)
            return Purged(purged, (0, "0"), len(todo) < limit)
        # delayed: ids in timer sets that are neither owned nor waiting, bucket by bucket
        offset, cursor = position
        _, (z,) = yield from self._open(self.state_keys, [("ZRANGE", k.timers, offset, offset)])
        if not z:
            return Purged(0, (offset, "0"), True)
        tk = k.timer(_text(z[0]))
        yield from self._types([tk])
        cur, members = yield from one(
            (
                "SSCAN",
                tk,
                cursor,
                "COUNT",
                min(limit, 1000),
            )
        )
        todo = [_text(i) for i in members]
        n = 0
        # SSCAN returns a small set whole, whatever COUNT says: watch_chunk ids a transaction.
        for start in range(0, len(todo), self.watch_chunk):
            part = todo[start : start + self.watch_chunk]
            item_keys = [k.item(i) for i in part]
            rep = yield [
                ("WATCH", *item_keys),
                *(("HEXISTS", key, "d") for key in item_keys),
                ("SMISMEMBER", k.processing, *part),
                ("SMISMEMBER", k.items, *part),
            ]
            has_d, held, waiting = rep[1 : len(part) + 1], rep[-2], rep[-1]
            gone = [mid for mid, flags in zip(part, zip(has_d, held, waiting)) if flags == (1, 0, 0)]
            if not gone:
                (yield from one(("UNWATCH",)))
            elif (yield from self._commit([("SREM", tk, *gone), ("DEL", *(k.item(i) for i in gone))])) is not None:
                n += len(gone)
            elif not n:
                return None
            else:  # what is done counts; the next step scans from the same cursor again
                return Purged(n, (offset, cursor), False)
        cursor = _text(cur)
        if cursor == "0" and not (yield from self._rescore(tk, _text(z[0]), None, -1, 0)):
            offset += 1  # the bucket still holds timers of messages in flight
        return Purged(n, (offset, cursor), False)
