"""Producing: enqueue one, many, or each with its own delay and dedup key."""

from __future__ import annotations

from typing import Sequence


from ...core.replies import text
from ...core.results import Enqueued
from ...core.roundtrip import Op
from .scripts import ScriptBase, CHUNK


class Produce(ScriptBase):
    def enqueue_one(self, body: bytes, delay_ms: int, bucket_ms: int,
                    dedup_key: str | None, dedup_ms: int) -> Op[Enqueued]:
        keys = self.enqueue_keys if dedup_key is None else (*self.enqueue_keys, self.keys.dedup(dedup_key))
        reply = yield from self.call("enqueue", keys, (delay_ms, bucket_ms, dedup_ms, self.field_bytes, body))
        return Enqueued([text(reply[0])], reply[2] == 1)

    def enqueue(self, bodies: Sequence[bytes], delay_ms: int, bucket_ms: int) -> Op[Enqueued]:
        calls = [(self.enqueue_keys, [delay_ms, bucket_ms, 0, self.field_bytes, *bodies[i : i + CHUNK]])
                 for i in range(0, len(bodies), CHUNK)]
        replies = yield from self.call_many("enqueue", calls)
        ids: list[str] = []
        for first, n, _ in replies:
            ids.extend(str(int(first) + j) for j in range(n))
        return Enqueued(ids, replies[-1][2] == 1)

    def enqueue_each(self, bodies: Sequence[bytes], delays_ms: Sequence[int],
                     dedup_keys: Sequence[str | None], bucket_ms: int, dedup_ms: int) -> Op[Enqueued]:
        """One script call per message (each its own delay and dedup key), all pipelined."""
        base = self.enqueue_keys
        calls = [(base if key is None else (*base, self.keys.dedup(key)),
                  (delay, bucket_ms, dedup_ms, self.field_bytes, body))
                 for body, delay, key in zip(bodies, delays_ms, dedup_keys)]
        ids: list[str] = []
        missing = False
        for i in range(0, len(calls), CHUNK):
            replies = yield from self.call_many("enqueue", calls[i : i + CHUNK])
            ids += [text(reply[0]) for reply in replies]
            missing = replies[-1][2] == 1
        return Enqueued(ids, missing)
