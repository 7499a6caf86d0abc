"""Producing: enqueue one, many, or each with its own delay and dedup key."""

from __future__ import annotations

from typing import Sequence

from ...core.backend import Attributes, per_message
from ...core.replies import text
from ...core.results import Enqueued
from ...core.roundtrip import Op
from .scripts import CHUNK, ScriptBase


def _values(
    bodies: Sequence[bytes], attributes: Attributes, since: Sequence[int | None] | None = None
) -> tuple[str, list[bytes | str]]:
    """enqueue.lua's ARGV[7] and the bodies after it: each followed by its attributes when
    any message has them, and by its enqueue time when one is given."""
    if since is not None:
        a_ = per_message(attributes, len(bodies))
        return "2", [x for body, a, t in zip(bodies, a_, since) for x in (body, a or b"", "" if t is None else str(t))]
    if attributes is None:
        return "", list(bodies)
    return "1", [x for body, a in zip(bodies, attributes) for x in (body, a or b"")]


class Produce(ScriptBase):
    groups = True
    watched_enqueues = False

    def enqueue_group(
        self,
        bodies: Sequence[bytes],
        delay_ms: int,
        bucket_ms: int,
        dedup_key: str | None,
        dedup_ms: int,
        group: str,
        attributes: Attributes = None,
    ) -> Op[Enqueued]:
        keys = self.enqueue_keys if dedup_key is None else (*self.enqueue_keys, self.keys.dedup(dedup_key))
        if len(bodies) == 1 and attributes is None:  # one message: one call, as enqueue_one makes it
            args = (delay_ms, bucket_ms, dedup_ms, self.field_bytes, group, "", bodies[0])
            first, _, missing = yield from self.call("enqueue_group", keys, args)
            return Enqueued([text(first)], missing == 1)
        calls = []
        for i in range(0, len(bodies), CHUNK):
            paired, values = _values(bodies[i : i + CHUNK], None if attributes is None else attributes[i : i + CHUNK])
            calls.append((keys, [delay_ms, bucket_ms, dedup_ms, self.field_bytes, group, paired, *values]))
        replies = yield from self.call_many("enqueue_group", calls)
        ids: list[str] = []
        for first, n, _ in replies:
            ids.extend([text(first)] if n == 0 else [str(int(first) + j) for j in range(n)])
        return Enqueued(ids, replies[-1][2] == 1)

    def enqueue_one(
        self,
        body: bytes,
        delay_ms: int,
        bucket_ms: int,
        dedup_key: str | None,
        dedup_ms: int,
        attributes: bytes | None = None,
    ) -> Op[Enqueued]:
        keys = self.enqueue_keys if dedup_key is None else (*self.enqueue_keys, self.keys.dedup(dedup_key))
        paired, values = _values([body], None if attributes is None else [attributes])
        reply = yield from self.call(
            "enqueue", keys, (delay_ms, bucket_ms, dedup_ms, self.field_bytes, paired, *values)
        )
        return Enqueued([text(reply[0])], reply[2] == 1)

    def enqueue(
        self, bodies: Sequence[bytes], delay_ms: int, bucket_ms: int, attributes: Attributes = None
    ) -> Op[Enqueued]:
        calls = []
        for i in range(0, len(bodies), CHUNK):
            paired, values = _values(bodies[i : i + CHUNK], None if attributes is None else attributes[i : i + CHUNK])
            calls.append((self.enqueue_keys, [delay_ms, bucket_ms, 0, self.field_bytes, paired, *values]))
        replies = yield from self.call_many("enqueue", calls)
        ids: list[str] = []
        for first, n, _ in replies:
            ids.extend(str(int(first) + j) for j in range(n))
        return Enqueued(ids, replies[-1][2] == 1)

    def enqueue_each(
        self,
        bodies: Sequence[bytes],
        delays_ms: Sequence[int],
        dedup_keys: Sequence[str | None],
        bucket_ms: int,
        dedup_ms: int,
        attributes: Attributes = None,
        enqueued_ms: Sequence[int | None] | None = None,
    ) -> Op[Enqueued]:
        """One script call per message (each its own delay and dedup key), all pipelined."""
        base = self.enqueue_keys
        calls = []
        since = enqueued_ms or [None] * len(bodies)
        for body, delay, key, a, t in zip(bodies, delays_ms, dedup_keys, per_message(attributes, len(bodies)), since):
            paired, values = _values([body], None if a is None else [a], None if enqueued_ms is None else [t])
            calls.append(
                (
                    base if key is None else (*base, self.keys.dedup(key)),
                    (delay, bucket_ms, dedup_ms, self.field_bytes, paired, *values),
                )
            )
        ids: list[str] = []
        missing = False
        for i in range(0, len(calls), CHUNK):
            replies = yield from self.call_many("enqueue", calls[i : i + CHUNK])
            ids += [text(reply[0]) for reply in replies]
            missing = replies[-1][2] == 1
        return Enqueued(ids, missing)
