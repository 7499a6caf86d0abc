"""Schedules: a read, then a script that writes only if the schedule is still the version read."""

from __future__ import annotations

from typing import Sequence

from ...core.replies import error_for, hash_reply, text
from ...core.results import Fired
from ...core.roundtrip import Op
from .scripts import ScriptBase


class Schedules(ScriptBase):
    def schedule_get(self, schedule_id: str) -> Op[tuple[int, dict[bytes, bytes]]]:
        key = self.keys.schedule(schedule_id)
        if self.clock is not None:
            (raw,) = yield [("HGETALL", key)]
            now = round(self.clock() * 1000)
        else:
            (sec, usec), raw = yield [("TIME",), ("HGETALL", key)]
            now = int(sec) * 1000 + int(usec) // 1000
        if isinstance(raw, Exception):
            raise error_for(raw, key)
        return now, hash_reply(raw)

    def schedule_done(self) -> Op[None]:
        return
        yield

    def schedule_put(
        self, schedule_id: str, version: str, score: str, drop: Sequence[str], fields: Sequence[str | bytes]
    ) -> Op[bool]:
        keys = (self.keys.schedule(schedule_id), self.keys.schedules)
        reply = yield from self.call("schedule_put", keys, (version, score, len(drop), *drop, *fields))
        return int(reply) == 1

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
        keys = (k.schedule(schedule_id), k.schedules, k.seq, k.queue, k.items, k.timers, k.signal, k.config, k.counters)
        args = [text(read[b"v"]), "" if next_ms is None else next_ms, score, missed, bucket_ms, self.field_bytes]
        args += [x for pair in messages for x in pair]
        done, first, n, missing = yield from self.call("schedule_fire", keys, args)
        if done != 1:
            return Fired(False, [])
        start = int(first)
        return Fired(True, [str(start + i) for i in range(int(n))], missing == 1)
