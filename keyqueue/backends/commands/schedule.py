"""Schedules: a WATCHed read, then one MULTI/EXEC (nothing applied when the schedule changed)."""

from __future__ import annotations

from typing import Sequence

from redis.exceptions import ResponseError

from ...core.backend import FireCall
from ...core.replies import body_fields, hash_reply, text
from ...core.results import Fired
from ...core.roundtrip import Command, Op, one
from ...errors import CorruptQueue
from .base import CommandBase, _signal


class Schedules(CommandBase):
    #: One schedule at a time: each compare-and-set is a WATCH of its own schedule.
    batched_fires = False

    def schedule_get_many(self, schedule_ids: Sequence[str]) -> Op[list[dict[bytes, bytes]]]:
        raise NotImplementedError("the script-free mode fires one schedule at a time (schedule_get)")
        yield

    def schedule_fire_many(self, fires: Sequence[FireCall], bucket_ms: int) -> Op[tuple[list[bool], bool]]:
        raise NotImplementedError("the script-free mode fires one schedule at a time (schedule_fire)")
        yield

    def schedule_get(self, schedule_id: str) -> Op[tuple[int, dict[bytes, bytes]]]:
        key = self.keys.schedule(schedule_id)
        now, (raw,) = yield from self._open([self.keys.schedules, key], [("HGETALL", key)], watch=[key])
        return now, hash_reply(raw)

    def schedule_done(self) -> Op[None]:
        yield from one(("UNWATCH",))

    def schedule_put(
        self, schedule_id: str, version: str, score: str, drop: Sequence[str], fields: Sequence[str | bytes]
    ) -> Op[bool]:
        key = self.keys.schedule(schedule_id)
        tx: list[Command] = [("HDEL", key, *drop)] if drop else []
        tx += [("HSET", key, *fields), ("ZADD", self.keys.schedules, score, schedule_id)]
        return (yield from self._commit(tx)) is not None

    def schedule_fire(
        self,
        schedule_id: str,
        read: dict[bytes, bytes],
        next_ms: int | None,
        score: str,
        missed: int,
        messages: Sequence[tuple[int, int]],
        bucket_ms: int,
    ) -> Op[Fired]:
        k = self.keys
        key = k.schedule(schedule_id)
        now, (exists,) = yield from self._open(
            [k.seq, k.queue, k.items, k.timers, k.signal, k.counters], [("EXISTS", k.config)]
        )
        ids: list[str] = []
        if messages:
            last = yield from one(("INCRBY", k.seq, len(messages)))
            if isinstance(last, ResponseError):
                raise CorruptQueue(k.seq)
            ids = [str(int(last) - len(messages) + 1 + i) for i in range(len(messages))]
        body = read.get(b"b", b"")
        tx: list[Command] = []
        waiting: list[str] = []
        for mid, (fire, due) in zip(ids, messages):
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
        if waiting:
            tx += [("RPUSH", k.queue, *waiting), ("SADD", k.items, *waiting), *_signal(k.signal)]
        if ids:
            tx += [
                ("HINCRBY", k.counters, "enqueued", len(ids)),
                ("HINCRBY", k.counters, "scheduled", len(ids)),
                ("HINCRBY", key, "f", len(ids)),
                ("HSET", key, "l", messages[-1][0]),
            ]
        if missed:
            tx.append(("HINCRBY", key, "m", missed))
        tx.append(("HDEL", key, "n") if next_ms is None else ("HSET", key, "n", next_ms))
        tx += [("HSET", key, "v", int(text(read[b"v"])) + 1), ("ZADD", k.schedules, score, schedule_id)]
        if (yield from self._commit(tx)) is None:
            return Fired(False, [])
        return Fired(True, ids, exists == 0)
