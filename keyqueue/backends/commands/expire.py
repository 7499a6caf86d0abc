"""The expiry sweep by the thread's protocol (``keyqueue/lua/expire.lua`` is its script):
waiting messages are taken as a claim takes them (an intent in a timer set, SADD processing,
SREM items) before they are deleted, so a claimer never gets one being deleted and a client
that dies midway leaves an abandoned claim that the reaper puts back; delayed messages and
dead letters, which no claimer takes, are deleted in a transaction WATCHing their hashes."""

from __future__ import annotations

from typing import Any

from ...core.replies import int_or as _int
from ...core.replies import text as _text
from ...core.results import ExpirePosition, ExpireStep
from ...core.roundtrip import Command, Op, one
from .base import ATTEMPTS, PURGE_VISIBILITY_MS
from .maintain import Maintain

#: How far down the list an expired message's entry is looked for (LPOS MAXLEN) and removed.
NEAR_HEAD = 1000


def _number(raw: Any) -> int | None:
    return None if raw is None or isinstance(raw, Exception) else _int(raw)


def _lapsed(raw: Any, cutoff: int) -> bool:
    """Whether an enqueue time (a reply) is at or before ``cutoff``: the age reached the retention."""
    t = _number(raw)
    return t is not None and t <= cutoff


class Expire(Maintain):
    def expire_step(
        self,
        retention_ms: int | None,
        dead_retention_ms: int | None,
        bucket_ms: int,
        limit: int,
        position: ExpirePosition,
    ) -> Op[ExpireStep]:
        phase, cursor, rank = position
        if phase == "head":
            if retention_ms is None:
                return ExpireStep(0, ("dead", "0", 0), False)
            n, whole = yield from self._expire_head(retention_ms, bucket_ms, limit)
            return ExpireStep(n, ("head", "0", 0) if whole else ("waiting", "0", 0), False)
        if phase == "waiting":
            if retention_ms is None:
                return ExpireStep(0, ("dead", "0", 0), False)
            n, cursor = yield from self._expire_waiting(retention_ms, bucket_ms, limit, cursor)
            return ExpireStep(n, ("waiting", cursor, 0) if cursor != "0" else ("delayed", "0", 0), False)
        if phase == "delayed":
            if retention_ms is None:
                return ExpireStep(0, ("dead", "0", 0), False)
            return (yield from self._expire_delayed(retention_ms, bucket_ms, limit, cursor, rank))
        if dead_retention_ms is None:
            return ExpireStep(0, ("head", "0", 0), True)
        for _ in range(ATTEMPTS):
            done = yield from self._expire_dead(dead_retention_ms, limit)
            if done is not None:
                n, more = done
                return ExpireStep(n, ("dead", "0", 0) if more else ("head", "0", 0), not more)
        return ExpireStep(0, ("head", "0", 0), True)

    def _expire_head(self, retention_ms: int, bucket_ms: int, limit: int) -> Op[tuple[int, bool]]:
        """The head of the FIFO, where the oldest wait: how many expired, and whether the
        whole window had (then more may follow)."""
        k = self.keys
        now, (window,) = yield from self._open((*self.state_keys, k.counters), [("LRANGE", k.queue, 0, limit - 1)])
        ids = list(dict.fromkeys(_text(i) for i in window))
        n = (yield from self._expire_ids(ids, now, retention_ms, bucket_ms)) if ids else 0
        return n, len(window) == limit and n == len(ids)

    def _expire_waiting(self, retention_ms: int, bucket_ms: int, limit: int, cursor: str) -> Op[tuple[int, str]]:
        k = self.keys
        now, (scan,) = yield from self._open(
            (*self.state_keys, k.counters), [("SSCAN", k.items, cursor, "COUNT", limit)]
        )
        ids = list(dict.fromkeys(_text(i) for i in scan[1]))
        cursor = _text(scan[0])
        if not ids:
            return 0, cursor
        return (yield from self._expire_ids(ids, now, retention_ms, bucket_ms)), cursor

    def _expire_ids(self, ids: list[str], now: int, retention_ms: int, bucket_ms: int) -> Op[int]:
        """Delete those of ``ids`` that are waiting and expired, taken as a claim takes them."""
        k = self.keys
        cutoff = now - retention_ms
        times = yield [("HGET", k.item(i), "t") for i in ids]
        ids = [i for i, raw in zip(ids, times) if _lapsed(raw, cutoff)]
        if not ids:
            return 0
        # Taken as a claim takes them: an intent, then the ownership steps of the thread.
        deadline = now + PURGE_VISIBILITY_MS
        tk, b = self._tk(deadline, bucket_ms)
        yield from self._types([tk])
        got = yield [
            ("ZADD", k.timers, "LT", deadline, b),
            ("SADD", tk, *ids),
            *(("SADD", k.processing, i) for i in ids),
        ]
        self._raise_errors([("ZADD", k.timers), ("SADD", tk)], got[:2])
        won = [i for i, a in zip(ids, got[2:]) if a == 1]
        if not won:
            return 0
        got = yield [
            *(("SREM", k.items, i) for i in won),
            *(("HGET", k.item(i), "t") for i in won),
            *(("LPOS", k.queue, i, "MAXLEN", NEAR_HEAD) for i in won),
        ]
        n = len(won)
        owned = [i for i, x in zip(won, got) if x == 1]
        now_t = dict(zip(won, got[n : 2 * n]))
        near = {i for i, pos in zip(won, got[2 * n :]) if pos is not None}
        # Still expired once ours (a requeue in between restarts the age): deleted; else given back.
        gone = [i for i in owned if _lapsed(now_t[i], cutoff)]
        back = [i for i in owned if i not in gone]
        # Ours to give back: the intent and the processing entry (those another claimer won stay its).
        tx: list[Command] = [("SREM", tk, *won), ("SREM", k.processing, *won)]
        for i in back:  # waiting again, listed once (a claimer may have dropped the entry meanwhile)
            tx += [("LREM", k.queue, 0, i), ("RPUSH", k.queue, i), ("SADD", k.items, i)]
        if gone:
            # (a list entry further down stays, as a stale entry the claimers drop: an LREM
            # there would cost a walk of the list each)
            tx += [
                *(("LREM", k.queue, 1, i) for i in gone if i in near),
                ("DEL", *(k.item(i) for i in gone)),
                ("HINCRBY", k.counters, "expired", len(gone)),
            ]
        yield from self._commit(tx)
        return len(gone)

    def _expire_delayed(self, retention_ms: int, bucket_ms: int, limit: int, cursor: str, rank: int) -> Op[ExpireStep]:
        k = self.keys
        now, (z,) = yield from self._open((*self.state_keys, k.counters), [("ZRANGE", k.timers, rank, rank)])
        if not z:
            return ExpireStep(0, ("dead", "0", 0), False)
        bucket = _text(z[0])
        tk = k.timer(bucket)
        kind, scan = yield [("TYPE", tk), ("SSCAN", tk, cursor, "COUNT", limit)]
        if _text(kind) not in ("none", "set"):
            return ExpireStep(0, ("delayed", "0", rank + 1), False)  # left to the reaper to report
        cursor = _text(scan[0])
        ids = list(dict.fromkeys(_text(i) for i in scan[1]))
        cutoff = now - retention_ms
        n = 0
        for _ in range(ATTEMPTS if ids else 0):
            item_keys = [k.item(i) for i in ids]
            rep = yield [
                ("WATCH", *item_keys),
                *(("HMGET", key, "t", "d") for key in item_keys),
                ("SMISMEMBER", k.processing, *ids),
                ("SMISMEMBER", k.items, *ids),
            ]
            fields, held, waiting = rep[1 : len(ids) + 1], rep[-2], rep[-1]
            tx: list[Command] = []
            gone = []
            for i, f, h, w in zip(ids, fields, held, waiting):
                if isinstance(f, Exception) or h or w:
                    continue
                t, d = _number(f[0]), _number(f[1])
                if t is not None and d is not None and t <= cutoff:  # delayed (a dead letter has no d)
                    gone.append(i)
                    tx.append(("SREM", tk, i))
                    if k.timer(d // bucket_ms) != tk:
                        tx.append(("SREM", k.timer(d // bucket_ms), i))
            if not gone:
                (yield from one(("UNWATCH",)))
                break
            tx += [("DEL", *(k.item(i) for i in gone)), ("HINCRBY", k.counters, "expired", len(gone))]
            if (yield from self._commit(tx)) is not None:
                n = len(gone)
                break
        if cursor == "0":
            if not (yield from self._rescore(tk, bucket, None, -1, 0)):
                rank += 1  # the bucket still holds timers
            return ExpireStep(n, ("delayed", "0", rank), False)
        return ExpireStep(n, ("delayed", cursor, rank), False)

    def _expire_dead(self, dead_retention_ms: int, limit: int) -> Op[tuple[int, bool] | None]:
        """From the head of the dead list (in the order of dead-lettering): the expired count
        and whether more may follow; None when a watched key changed."""
        k = self.keys
        now, (ids,) = yield from self._open(
            (*self.state_keys, k.counters), [("LRANGE", k.dead, 0, limit - 1)], watch=[k.dead]
        )
        ids = [_text(i) for i in ids]
        if not ids:
            (yield from one(("UNWATCH",)))
            return 0, False
        cutoff = now - dead_retention_ms
        item_keys = [k.item(i) for i in ids]
        rep = yield [("WATCH", *item_keys), *(("HMGET", key, "x", "t") for key in item_keys)]
        head, keys = 0, []
        adopt: list[Command] = []
        for key, f in zip(item_keys, rep[1:]):
            if isinstance(f, Exception):
                break  # left to the reaper to report
            x = _number(f[0])
            if x is None and f[1] is None:  # no message behind the entry
                head += 1
            elif x is None:  # dead-lettered before x was recorded: its dead_retention starts now
                adopt.append(("HSET", key, "x", now))
                break
            elif x <= cutoff:
                head += 1
                keys.append(key)
            else:
                break
        tx: list[Command] = [*adopt]
        if head:
            tx.append(("LTRIM", k.dead, head, -1))
        if keys:
            tx += [("DEL", *keys), ("HINCRBY", k.counters, "expired", len(keys))]
        if not tx:
            (yield from one(("UNWATCH",)))
            return 0, False
        if (yield from self._commit(tx)) is None:
            return None
        return len(keys), head == limit
