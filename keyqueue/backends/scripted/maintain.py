"""The reaper, requeue and purge: bounded steps the queue core loops over."""

from __future__ import annotations

from typing import Sequence

from ...core.replies import text
from ...core.results import ExpirePosition, ExpireStep, Purged, ReapPosition, ReapResult, ReapStep, Requeued
from ...core.roundtrip import Op
from .scripts import ScriptBase, _max_receives


class Maintain(ScriptBase):
    def group_refill(self, groups: Sequence[str]) -> Op[int]:
        k = self.keys
        return int((yield from self.call("group_refill", (k.queue, k.items, k.signal), groups)))

    def reap_step(
        self,
        bucket_ms: int,
        max_receives: int | None,
        limit: int,
        position: ReapPosition,
        retention_ms: int | None = None,
    ) -> Op[ReapStep]:
        r = yield from self.call(
            "reap",
            self.claim_keys,
            [bucket_ms, _max_receives(max_receives), limit, *position[:3], _max_receives(retention_ms), position[3]],
        )
        return ReapStep(
            ReapResult(int(r[0]), int(r[1]), int(r[2]), int(r[8])),
            (text(r[3]), text(r[4]), int(r[5]), text(r[9])),
            bool(int(r[6])),
            r[7] == 1,
            [text(key) for key in r[10:]],
        )

    def expire_step(
        self,
        retention_ms: int | None,
        dead_retention_ms: int | None,
        bucket_ms: int,
        limit: int,
        position: ExpirePosition,
    ) -> Op[ExpireStep]:
        n, phase, cursor, rank, done = yield from self.call(
            "expire",
            self.claim_keys,
            [_max_receives(retention_ms), _max_receives(dead_retention_ms), bucket_ms, limit, *position],
        )
        return ExpireStep(int(n), (text(phase), text(cursor), int(rank)), bool(done))

    def requeue(self, source: str, ids: Sequence[str], limit: int, bucket_ms: int, cursor: str = "0") -> Op[Requeued]:
        requeued, examined, cursor = yield from self.call(
            "requeue", self.waking_keys, [bucket_ms, source, limit, cursor, *ids]
        )
        return Requeued(int(requeued), int(examined), text(cursor))

    def purge_step(self, source: str, limit: int, position: tuple[int, str], bucket_ms: int) -> Op[Purged]:
        n, offset, cursor, done = yield from self.call("purge", self.state_keys, [bucket_ms, source, limit, *position])
        return Purged(int(n), (int(offset), text(cursor)), bool(done))

    def purge_dead(self, ids: Sequence[str]) -> Op[int]:
        n, *_ = yield from self.call("purge", self.state_keys, [0, "dead", len(ids), 0, "0", *ids])
        return int(n)
