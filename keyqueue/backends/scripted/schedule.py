"""Schedules: a read, then a script that writes only if the schedule is still the version read."""

from __future__ import annotations

from typing import Any, Sequence

from ...core.backend import FireCall
from ...core.replies import error_for, hash_reply, text
from ...core.results import Fired, Looked
from ...core.roundtrip import Op
from ...core.schedules import LATE_MS
from .scripts import ScriptBase


class Schedules(ScriptBase):
    watched_fires = False

    def schedule_get_many(self, schedule_ids: Sequence[str]) -> Op[list[dict[bytes, bytes]]]:
        keys = [self.keys.schedule(i) for i in schedule_ids]
        replies = yield [("HGETALL", key) for key in keys]
        out = []
        for key, raw in zip(keys, replies):
            if isinstance(raw, Exception):
                raise error_for(raw, key)
            out.append(hash_reply(raw))
        return out

    def schedule_fire_many(self, fires: Sequence[FireCall], bucket_ms: int) -> Op[tuple[list[bool], bool]]:
        if not fires:
            return [], False
        k = self.keys
        keys = [k.schedules, k.seq, k.queue, k.items, k.timers, k.signal, k.config, k.counters]
        args: list[Any] = [bucket_ms, self.field_bytes]
        for sid, version, read_next, dump, anchor, nxt, score, missed, messages, _ in fires:
            keys.append(k.schedule(sid))
            args += (version, "" if read_next is None else read_next, dump, anchor)
            args += ("" if nxt is None else nxt, score, missed, len(messages))
            for pair in messages:
                args += pair
        missing, *firsts = yield from self.call("schedule_fire_many", keys, args)
        return [first != 0 for first in firsts], missing == 1

    def schedule_fire_due(self, limit: int) -> Op[Looked | None]:
        k = self.keys
        keys = [k.schedules, k.seq, k.queue, k.items, k.signal, k.config, k.counters]
        missing, now, fired, soonest, looked, *left = yield from self.call(
            "schedule_fire_due", keys, [self.field_bytes, LATE_MS, limit]
        )
        pairs = [(text(left[i]), float(left[i + 1])) for i in range(0, len(left), 2)]
        return Looked(int(now), int(fired), int(soonest) if soonest else None, int(looked), pairs, missing == 1)

    def _fire_call(
        self,
        schedule_id: str,
        read: dict[bytes, bytes],
        next_ms: int | None,
        score: str,
        missed: int,
        messages: Sequence[tuple[int, int]],
        bucket_ms: int,
    ) -> tuple[Sequence[str], list[Any]]:
        k = self.keys
        keys = (k.schedule(schedule_id), k.schedules, k.seq, k.queue, k.items, k.timers, k.signal, k.config, k.counters)
        args: list[Any] = [text(read[b"v"]), "" if next_ms is None else next_ms, score, missed, bucket_ms]
        args += [self.field_bytes, *(x for pair in messages for x in pair)]
        return keys, args

    @staticmethod
    def _fired(reply: Any) -> Fired:
        done, first, n, missing = reply
        if done != 1:
            return Fired(False, [])
        start = int(first)
        return Fired(True, [str(start + i) for i in range(int(n))], missing == 1)

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
        keys, args = self._fire_call(schedule_id, read, next_ms, score, missed, messages, bucket_ms)
        return self._fired((yield from self.call("schedule_fire", keys, args)))
