"""Schedules: a WATCHed read, then one MULTI/EXEC (nothing applied when a schedule changed:
their keys are shared by the queue's schedules, so a change to any of them undoes it)."""

from __future__ import annotations

from typing import Sequence

from redis.exceptions import ResponseError

from ...core.backend import FireCall
from ...core.replies import body_fields
from ...core.results import Fired, Looked
from ...core.roundtrip import Command, Op, one
from ...core.schedules import fired_state, schedule_raws, schedule_reads
from ...errors import CorruptQueue
from .base import CommandBase, _signal


class Schedules(CommandBase):
    #: A fire holds only if its schedule is still as read: the read WATCHes it.
    watched_fires = True

    def _watched(self) -> list[str]:
        k = self.keys
        return [k.schedules, k.schedule_state, k.schedule_defs, k.schedule_bodies]

    def schedule_get_many(self, schedule_ids: Sequence[str]) -> Op[list[dict[bytes, bytes]]]:
        keys = self._watched()
        _, replies = yield from self._open(keys, schedule_reads(self.keys, schedule_ids), watch=keys)
        return schedule_raws(replies)

    def schedule_fire_due(self, limit: int) -> Op[Looked | None]:
        """None: every fire reads its schedule under WATCH first (the core's look, fire_many)."""
        return None
        yield

    def schedule_fire_many(self, fires: Sequence[FireCall], bucket_ms: int) -> Op[tuple[list[bool], bool]]:
        """One MULTI for them all: a schedule changed since the read (its WATCH) undoes all."""
        if not fires:
            yield from self.schedule_done()
            return [], False
        done, missing = yield from self._fire(fires, bucket_ms)
        return [done is not None] * len(fires), missing

    def schedule_get(self, schedule_id: str) -> Op[tuple[int, dict[bytes, bytes]]]:
        keys = self._watched()
        now, replies = yield from self._open(keys, schedule_reads(self.keys, [schedule_id]), watch=keys)
        return now, schedule_raws(replies)[0]

    def schedule_done(self) -> Op[None]:
        yield from one(("UNWATCH",))

    def schedule_put(
        self,
        schedule_id: str,
        version: str,
        read_score: bytes,
        score: str,
        state: bytes,
        made: tuple[bytes, bytes] | None,
    ) -> Op[bool]:
        """(The WATCH of the read covers the index score read.)"""
        k = self.keys
        tx: list[Command] = [("HSET", k.schedule_state, schedule_id, state)]
        if made is not None:
            tx += [("HSET", k.schedule_defs, schedule_id, made[0]), ("HSET", k.schedule_bodies, schedule_id, made[1])]
        tx.append(("ZADD", k.schedules, score, schedule_id))
        return (yield from self._commit(tx)) is not None

    def schedule_fire(self, call: FireCall, bucket_ms: int) -> Op[Fired]:
        ids, missing = yield from self._fire([call], bucket_ms)
        return Fired(False, []) if ids is None else Fired(True, ids, missing)

    def _fire(self, fires: Sequence[FireCall], bucket_ms: int) -> Op[tuple[list[str] | None, bool]]:
        """The fires in one MULTI/EXEC after the WATCH of their reads: the ids enqueued (None:
        a schedule changed, nothing done), and whether the config hash is gone."""
        k = self.keys
        now, (exists,) = yield from self._open(
            [k.seq, k.queue, k.items, k.timers, k.signal, k.counters], [("EXISTS", k.config)]
        )
        total = sum(len(f.messages) for f in fires)
        ids: list[str] = []
        if total:
            last = yield from one(("INCRBY", k.seq, total))
            if isinstance(last, ResponseError):
                raise CorruptQueue(k.seq)
            ids = [str(int(last) - total + 1 + i) for i in range(total)]
        tx: list[Command] = []
        waiting: list[str] = []
        states: list[str | bytes] = []
        at = 0
        for f in fires:
            body = f.read.get(b"b", b"")
            mine = ids[at : at + len(f.messages)]
            at += len(f.messages)
            for mid, (fire, due) in zip(mine, f.messages):
                head: list[str | int] = ["t", now, "s", fire, "n", 0]
                if due > now:
                    tk, b = self._tk(due, bucket_ms)
                    yield from self._types([tk])
                    tx += [
                        ("HSET", k.item(mid), *head, "d", due, *body_fields(body, self.field_bytes)),
                        ("SADD", tk, mid),
                        ("ZADD", k.timers, "LT", due, b),
                    ]
                else:
                    tx.append(("HSET", k.item(mid), *head, *body_fields(body, self.field_bytes)))
                    waiting.append(mid)
            last = f.messages[-1][0] if f.messages else None
            states += [f.schedule_id, fired_state(f.read, len(mine), last, f.missed, f.next_ms)]
            tx.append(("ZADD", k.schedules, f.score, f.schedule_id))
        if states:
            tx.append(("HSET", k.schedule_state, *states))
        if waiting:
            tx += [("RPUSH", k.queue, *waiting), ("SADD", k.items, *waiting), *_signal(k.signal)]
        if ids:
            tx += [("HINCRBY", k.counters, "enqueued", len(ids)), ("HINCRBY", k.counters, "scheduled", len(ids))]
        if (yield from self._commit(tx)) is None:
            return None, False
        return ids, exists == 0
