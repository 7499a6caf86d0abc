"""Reading without changing: peek and stats."""

from __future__ import annotations

from redis.exceptions import ResponseError

from ...core.replies import int_or as _int
from ...core.replies import text as _text
from ...core.results import Counts, Fields
from ...core.roundtrip import Command, Op, one
from .base import CommandBase, fields_list


class Inspect(CommandBase):
    def peek(self, source: str, count: int) -> Op[list[Fields]]:
        k = self.keys
        if count <= 0:
            yield from self._types(self.state_keys)
            return []
        if source in ("waiting", "dead"):
            key = k.queue if source == "waiting" else k.dead
            _, (ids,) = yield from self._open(self.state_keys, [("LRANGE", key, 0, count - 1)])
            ids = [_text(i) for i in ids]
            if source == "waiting" and ids:  # stale entries are not waiting messages
                flags = yield from one(("SMISMEMBER", k.items, *ids))
                ids = [i for i, w in zip(ids, flags) if w == 1]
        elif source == "processing":
            _, (ids,) = yield from self._open(self.state_keys, [("SORT", k.processing, "LIMIT", 0, count)])
            ids = [_text(i) for i in ids]
        elif source == "held":  # (written by scripted clients: this mode refuses groups)
            _, (groups,) = yield from self._open((*self.state_keys, k.groups), [("HKEYS", k.groups)])
            ids = []
            for g in sorted(_text(g) for g in groups):
                if len(ids) >= count:
                    break
                ids += [_text(i) for i in (yield from one(("LRANGE", k.group(g), 0, count - len(ids) - 1)))]
        else:
            ids = yield from self._delayed_ids(count)
        reads: list[Command] = [("HGETALL", k.item(i)) for i in ids]
        got = yield reads
        self._raise_errors(reads, got)
        return fields_list(ids, got)

    def _delayed_ids(self, count: int) -> Op[list[str]]:
        k = self.keys
        _, (buckets,) = yield from self._open(self.state_keys, [("ZRANGE", k.timers, 0, -1)])
        buckets = sorted(buckets, key=int)
        found: list[tuple[int, int, str]] = []
        for b in buckets:
            if len(found) >= count:
                break
            tk = k.timer(_text(b))
            yield from self._types([tk])
            members = yield from one(("SMEMBERS", tk))
            ids = [_text(i) for i in members]
            if not ids:
                continue
            got = yield [
                *(("HGET", k.item(i), "d") for i in ids),
                ("SMISMEMBER", k.processing, *ids),
                ("SMISMEMBER", k.items, *ids),
            ]
            for i, d, p, w in zip(ids, got[: len(ids)], got[-2], got[-1]):
                if d is not None and not isinstance(d, ResponseError) and p == 0 and w == 0:
                    found.append((int(d), int(i), i))
        return [i for _, _, i in sorted(set(found))[:count]]

    def stats(self) -> Op[Counts]:
        k = self.keys
        now, (waiting, processing, buckets, head, dead, held) = yield from self._open(
            (*self.state_keys, k.held),
            [
                ("SCARD", k.items),
                ("SCARD", k.processing),
                ("ZRANGE", k.timers, 0, -1),
                ("LINDEX", k.queue, 0),
                ("LLEN", k.dead),
                ("GET", k.held),
            ],
        )
        tks = [k.timer(_text(b)) for b in buckets]
        yield from self._types(tks)
        reads: list[Command] = [("SMEMBERS", tk) for tk in tks]
        if head is not None:
            reads.append(("HGET", k.item(_text(head)), "t"))
        got = yield reads
        self._raise_errors(reads, got)
        # Timer sets may hold stale entries here: count only ids that really are delayed.
        ids = sorted({_text(i) for members in got[: len(tks)] for i in members})
        delayed = 0
        if ids:
            flags = yield [
                *(("HEXISTS", k.item(i), "d") for i in ids),
                ("SMISMEMBER", k.processing, *ids),
                ("SMISMEMBER", k.items, *ids),
            ]
            delayed = sum(
                1 for has, p, w in zip(flags[: len(ids)], flags[-2], flags[-1]) if has == 1 and p == 0 and w == 0
            )
        oldest = got[-1] if head is not None else None
        n_held = max(_int(held), 0) if held is not None else 0
        return Counts(
            int(waiting) + n_held,
            int(processing),
            delayed,
            int(dead),
            None if oldest is None else _int(oldest),
            now,
            n_held,
        )
