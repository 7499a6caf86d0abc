"""Claiming by the thread's protocol: the head, an intent in a timer set, SADD processing, SREM items, then one commit."""

from __future__ import annotations

import random
from typing import Sequence

from redis.exceptions import ResponseError

from ...core.replies import error_for, fields_of, item_fields, zscore_pair
from ...core.replies import int_or as _int
from ...core.replies import text as _text
from ...core.results import Claimed
from ...core.roundtrip import Command, Op, one
from ...errors import CorruptQueue
from .base import CLAIM_ATTEMPTS, CommandBase, _Claim, _signal, groups_reads, has_groups, refuse_groups
from .flow import Flow, counted


class Consume(CommandBase):
    def claim(
        self,
        count: int,
        visibility_ms: int,
        bucket_ms: int,
        max_receives: int | None,
        retention_ms: int | None = None,
        counted: bool = False,
    ) -> Op[Claimed]:
        """Up to ``count`` messages, in passes of at most watch_chunk. When every head entry
        it tried was held by another claimer, it looks again (a few times), so a claim does
        not come back empty while messages wait behind a contested head."""
        out = _Claim(counted)
        offset = 0
        wanted = count
        attempt = 0
        # A pass over a full chunk that met no other claimer cleared its entries from the
        # list: the next chunk spends no attempt. (Bounded all the same: a stale entry is
        # kept when its hash changes meanwhile.)
        free = 2 * -(-count // self.watch_chunk)
        while wanted and attempt < CLAIM_ATTEMPTS:
            chunk = min(wanted, self.watch_chunk)
            dead_before = out.dead + out.expired
            got, _, busy = yield from self._claim_once(
                chunk, visibility_ms, bucket_ms, max_receives, out, offset, retention_ms
            )
            wanted -= len(got)
            if out.limited_ms is not None:
                break
            if out.read == chunk and not busy and free:
                free -= 1
                continue
            if not (busy or out.dead + out.expired > dead_before):
                break
            attempt += 1
            # Dead letters do not count towards ``count`` (as in the script): go on.
            # Other claimers are taking some: look behind them, a little apart from
            # each other so that a crowd of claimers does not meet on one entry again.
            if busy:
                offset += busy + random.randrange(wanted * attempt)
        return Claimed(out.messages, out.dead, out.missing, out.next_timer, out.limited_ms)

    def _claim_once(
        self,
        count: int,
        visibility_ms: int,
        bucket_ms: int,
        max_receives: int | None,
        out: _Claim,
        offset: int = 0,
        retention_ms: int | None = None,
        limits: bool = True,
    ) -> Op[tuple[list[str], int, int]]:
        """One pass of the thread's protocol over the list from ``offset``. Adds the
        delivered messages and dead letters to ``out``; returns their ids, their deadline, and
        how many entries another claimer was in the middle of taking. ``limits=False`` (a
        purge's claim) neither reads nor counts the queue's flow control."""
        k = self.keys
        read: Command = ("LINDEX", k.queue, offset) if count == 1 else ("LRANGE", k.queue, offset, offset + count - 1)
        # An empty queue costs one round trip of three commands (an idle long-poll does this).
        last_key = self.last_rate_key
        flow_reads: list[Command] = [
            ("HMGET", k.config, "rate_limit", "max_in_flight"),
            ("GET", k.throttle),
            *(("SCARD", key) for key in counted(k, self.flow)),
            *([("GET", last_key)] if last_key else []),
        ]
        now, (heads, waiting_len, config, first, grouped, group_mark, *flow_got) = yield from self._open(
            (),
            [
                read,
                ("LLEN", k.queue),
                ("EXISTS", k.config),
                ("ZRANGE", k.timers, 0, 0, "WITHSCORES"),
                *groups_reads(k),
            ]
            + (flow_reads if limits else []),
        )
        refuse_groups(has_groups(grouped, group_mark), k.name)
        out.missing = config == 0
        score = zscore_pair(first)
        if score is not None:  # the earliest timer (ours, set below, is later than any due one)
            out.next_timer = int(score) - now
        if count == 1:
            heads = [] if heads is None else [heads]
        out.read = len(heads)
        read_limits, throttle, *held = flow_got or (None, None)
        used = held.pop() if last_key and flow_got else None
        flow = Flow(k, now, read_limits, throttle, sum(int(h) for h in held), self.flow)
        if limits:
            flow.full_window(last_key, used)
            self.last_rate_key = flow.rate_key
        heads = heads[: flow.cut(count)]
        ids = list(dict.fromkeys(_text(h) for h in heads))
        deadline = now + visibility_ms
        if not ids:
            if flow.limited_ms is not None and int(waiting_len):
                out.limited_ms = flow.limited_ms
                yield from self._refused(flow, int(waiting_len) > 0 and not out.counted)
            return [], deadline, 0
        tk, b = self._tk(deadline, bucket_ms)
        # Reads and type checks first: a wrong type fails here, before anything is written.
        typed = [*self.waking_keys[1:], k.counters, tk, *flow.keys]
        # WATCH the hashes: dropping a stale list entry is only safe while its message has
        # not become waiting again (every way back to waiting writes the hash). The rate
        # limit's window counter is reserved for every id here (the reservation is the
        # intent: one that is not used is given back at the commit, or lost with its window).
        # The server's time comes with the reservation: one made after its window ended
        # (this claim read the time a round trip before) counts for nothing, as the window's
        # counter may have expired and started again from zero.
        reserve = flow.reserve(len(ids))
        clock = self._time() if reserve else []
        got = (
            yield [
                ("WATCH", *(k.item(i) for i in ids)),
                *(("TYPE", key) for key in typed),
                *(("HGETALL", k.item(i)) for i in ids),
                *reserve,
                *clock,
            ]
        )[1:]
        self._check_kinds(typed, got)
        if flow.rate_key:
            reserved = got[len(typed) + len(ids)]
            if isinstance(reserved, ResponseError):
                yield from one(("UNWATCH",))
                raise CorruptQueue(flow.rate_key)
            allowed = flow.reserved(int(reserved), len(ids), self._now(got[len(got) - len(clock) :]))
            if allowed < len(ids):
                ids = ids[:allowed]
                out.limited_ms = flow.limited_ms
            if not ids:
                yield from self._refused(flow, int(waiting_len) > 0 and not out.counted, unwatch=True)
                return [], deadline, 0
        fields: dict[str, dict[bytes, bytes]] = {}
        for i, raw in zip(ids, got[len(typed) :]):
            if isinstance(raw, ResponseError):
                if not fields:
                    raise CorruptQueue(k.item(i))
                ids = ids[: len(fields)]  # claim what precedes it; the next claim reports it
                break
            fields[i] = item_fields(raw)
        # The intent (a timer entry at our deadline), then the ownership steps of the thread.
        # (Index first: a bucket must never hold an id the index does not point to.)
        # With max_in_flight, the count of processing after our SADDs: every claimer counts
        # itself with the others that added before it, so those that keep their ids never
        # exceed the cap (one over it gives back its last ids before taking them from items).
        got = yield [
            ("ZADD", k.timers, "LT", deadline, b),
            ("SADD", tk, *ids),
            *(("SADD", k.processing, i) for i in ids),
            *flow.count_held(),
        ]
        self._raise_errors([("ZADD", k.timers), ("SADD", tk)], got[:2])
        added = got[2 : 2 + len(ids)]
        won = [i for i, a in zip(ids, added) if a == 1]
        contested = [i for i, a in zip(ids, added) if a != 1]
        over = flow.over(got[2 + len(ids) :], len(won))
        if over:
            won, refused = won[: len(won) - over], won[len(won) - over :]
            out.limited_ms = flow.limited_ms
        else:
            refused = []
        # The time again, now that the messages are ours: a reaper may have put one back
        # since the first read, and its delivery must not start before the one it replaces
        # ended. (Within the rate limit's window this claim was counted in.)
        clock = self._time()
        got = yield [
            *clock,
            *(("SREM", k.items, i) for i in won),
            *(("SISMEMBER", k.items, i) for i in contested),
            *(cmd for i in refused for cmd in (("SREM", k.processing, i), ("SREM", tk, i))),
        ]
        now = flow.claim_time(self._now(got))
        got = got[len(clock) :]
        deadline = now + visibility_ms
        dk, db = self._tk(deadline, bucket_ms)
        if dk != tk:  # a bucket boundary passed: rare, and worth a round trip to type-check it
            yield from self._types([dk])
        owned = [i for i, x in zip(won, got) if x == 1 and fields[i]]
        # Not waiting (or no message behind it): the list entry was stale; give back our SADD.
        stale = [i for i, x in zip(won, got) if not (x == 1 and fields[i])]
        # Held by another claimer but not waiting: a live delivery's stale entry.
        stale += [i for i, x in zip(contested, got[len(won) : len(won) + len(contested)]) if x != 1]
        busy = len(contested)

        limit = max_receives
        now_s, deadline_s = str(now), str(deadline)
        tx: list[Command] = []
        delivered: list[str] = []
        dead = expired = 0
        cutoff = None if retention_ms is None else now - retention_ms
        for i in owned:
            f = fields[i]
            if cutoff is not None and b"t" in f and _int(f[b"t"]) <= cutoff:
                # Its age reached the retention: deleted as an ack would, by its owner.
                tx += [("DEL", k.item(i)), ("SREM", k.processing, i), ("SREM", tk, i), ("LREM", k.queue, 1, i)]
                expired += 1
                continue
            r = _int(f.get(b"r"))
            if limit is not None and r >= limit:
                error = () if b"e" in f else ("e", f"exceeded max_receives ({max_receives})")
                tx.append(("HSET", k.item(i), "x", now_s, *error))
                tx += [("RPUSH", k.dead, i), ("SREM", k.processing, i), ("SREM", tk, i), ("LREM", k.queue, 1, i)]
                dead += 1
                continue
            n = _int(f.get(b"n")) + 1
            f[b"r"], f[b"c"], f[b"d"] = str(r + 1).encode(), f"{n}-{now_s}".encode(), deadline_s.encode()
            first = () if b"f" in f else ("f", now_s)  # the first delivery's time, as claim.lua
            f.setdefault(b"f", now_s.encode())
            tx += [
                ("HSET", k.item(i), "r", r + 1, "n", n, "c", f[b"c"], "d", deadline_s, *first),
                ("LREM", k.queue, 1, i),
            ]
            delivered.append(i)
            out.messages.append(fields_of(i, f))
        if dead:
            tx.append(("HINCRBY", k.counters, "dead_lettered", dead))
        if expired:
            tx.append(("HINCRBY", k.counters, "expired", expired))
        if int(waiting_len) <= len(delivered):  # the limits held nothing back
            out.limited_ms = None
        tx += flow.settle(flow.reserved_count, len(delivered), out.limited_ms is not None and not out.counted)
        drops: list[Command] = []
        for i in stale:
            if i in won:
                tx.append(("SREM", k.processing, i))
            drops.append(("LREM", k.queue, 1, i))
        if delivered:
            # The timer at the deadline (the intent's bucket is earlier when time moved on),
            # re-asserted: a reaper may have dropped an older entry for the same id.
            if dk != tk:
                tx.append(("SREM", tk, *delivered))
            tx += [("SADD", dk, *delivered), ("ZADD", k.timers, "LT", deadline, db)]
            if int(waiting_len) > offset + len(heads):
                tx += _signal(k.signal)
            out.next_timer = visibility_ms if out.next_timer is None else min(out.next_timer, visibility_ms)
        # What we own needs no WATCH; if a stale id's message changed, keep its entry.
        if not (tx or drops):
            (yield from one(("UNWATCH",)))
        elif (yield from self._commit([*tx, *drops])) is None and tx:
            yield from self._commit(tx)
        out.dead += dead
        out.expired += expired
        return delivered, deadline, busy

    def _refused(self, flow: Flow, count: bool, unwatch: bool = False) -> Op[None]:
        """A claim the limits refused: its reservation given back, and counted when ``count``
        (messages wait, and its caller has not counted the claim's refusal)."""
        commands = [*flow.settle(flow.reserved_count, 0, count), *([("UNWATCH",)] if unwatch else [])]
        if commands:
            self._raise_errors(commands, (yield commands))

    def wait_then_claim(
        self,
        signals: Sequence[str],
        timeout: float,
        count: int,
        visibility_ms: int,
        bucket_ms: int,
        max_receives: int | None,
        retention_ms: int | None = None,
        counted: bool = False,
    ) -> Op[Claimed]:
        woken = yield from one(
            (
                "BLPOP",
                *signals,
                timeout,
            )
        )
        if isinstance(woken, ResponseError):
            raise error_for(woken, signals[0])
        return (yield from self.claim(count, visibility_ms, bucket_ms, max_receives, retention_ms, counted))
