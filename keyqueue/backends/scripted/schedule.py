"""Schedules: a read, then a script that writes only if the schedule is still the version read."""

from __future__ import annotations

from typing import Any, Sequence

from ...core.backend import FireCall
from ...core.replies import error_for, text
from ...core.results import Fired, Looked
from ...core.roundtrip import Op
from ...core.schedules import LATE_MS, schedule_raws, schedule_reads
from .scripts import ScriptBase


class Schedules(ScriptBase):
    watched_fires = False

    def schedule_get_many(self, schedule_ids: Sequence[str]) -> Op[list[dict[bytes, bytes]]]:
        reads = schedule_reads(self.keys, schedule_ids)
        replies = yield reads
        self._read_errors(replies)
        return schedule_raws(replies)

    def _read_errors(self, replies: Sequence[Any]) -> None:
        for cmd, raw in zip(schedule_reads(self.keys, ["x"]), replies):
            if isinstance(raw, Exception):
                raise error_for(raw, cmd[1])

    def _fire_many(self, fires: Sequence[FireCall], bucket_ms: int) -> Op[tuple[list[Any], bool]]:
        """schedule_fire_many.lua: the first id of each fire (0: not done), and whether the
        config hash is gone."""
        k = self.keys
        keys = [k.schedules, k.seq, k.queue, k.items, k.timers, k.signal, k.config, k.counters]
        keys += [k.schedule_state, k.schedule_defs, k.schedule_bodies]
        args: list[Any] = [self.field_bytes, bucket_ms]
        for f in fires:
            nxt, every = ("" if v is None else v for v in (f.next_ms, f.every_ms))
            args += (f.schedule_id, f.version, f.read_score, f.definition, f.anchor_ms)
            args += (nxt, f.score, f.missed, every, len(f.messages))
            for pair in f.messages:
                args += pair
        missing, *firsts = yield from self.call("schedule_fire_many", keys, args)
        return firsts, missing == 1

    def schedule_fire_many(self, fires: Sequence[FireCall], bucket_ms: int) -> Op[tuple[list[bool], bool]]:
        if not fires:
            return [], False
        firsts, missing = yield from self._fire_many(fires, bucket_ms)
        return [first != 0 for first in firsts], missing

    def schedule_fire_due(self, limit: int) -> Op[Looked | None]:
        k = self.keys
        keys = [k.schedules, k.seq, k.queue, k.items, k.signal, k.config, k.counters]
        keys += [k.schedule_state, k.schedule_defs, k.schedule_bodies]
        missing, now, fired, soonest, looked, *left = yield from self.call(
            "schedule_fire_due", keys, [self.field_bytes, LATE_MS, limit]
        )
        pairs = [(text(left[i]), float(left[i + 1])) for i in range(0, len(left), 2)]
        return Looked(int(now), int(fired), int(soonest) if soonest else None, int(looked), pairs, missing == 1)

    def schedule_get(self, schedule_id: str) -> Op[tuple[int, dict[bytes, bytes]]]:
        reads = schedule_reads(self.keys, [schedule_id])
        if self.clock is not None:
            replies = yield reads
            now = round(self.clock() * 1000)
        else:
            (sec, usec), *replies = yield [("TIME",), *reads]
            now = int(sec) * 1000 + int(usec) // 1000
        self._read_errors(replies)
        return now, schedule_raws(replies)[0]

    def schedule_done(self) -> Op[None]:
        return
        yield

    def schedule_put(
        self,
        schedule_id: str,
        version: str,
        read_score: bytes,
        score: str,
        state: bytes,
        made: tuple[bytes, bytes] | None,
    ) -> Op[bool]:
        k = self.keys
        keys = (k.schedule_state, k.schedules, k.schedule_defs, k.schedule_bodies)
        tail: tuple[Any, ...] = ("1", *made) if made is not None else ("0",)
        reply = yield from self.call("schedule_put", keys, (schedule_id, version, score, state, read_score, *tail))
        return int(reply) == 1

    def schedule_fire(self, call: FireCall, bucket_ms: int) -> Op[Fired]:
        """One fire of schedule_fire_many.lua, a compare-and-set on what was read."""
        (first,), missing = yield from self._fire_many([call], bucket_ms)
        if first == 0:
            return Fired(False, [])
        start = int(first)
        return Fired(True, [str(start + i) for i in range(len(call.messages))], missing)
