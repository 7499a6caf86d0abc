"""Producing: a WATCHed dedup read, INCRBY for the ids, one MULTI/EXEC."""

from __future__ import annotations

from typing import Sequence

from redis.exceptions import ResponseError

from ...core.backend import Attributes, per_message
from ...core.replies import body_fields
from ...core.replies import text as _text
from ...core.results import Enqueued
from ...core.roundtrip import Command, Op, one
from ...errors import ConfigurationError, CorruptQueue
from .base import CommandBase, _signal


class Produce(CommandBase):
    #: Message groups are refused here: ending a group's current message and releasing its
    #: next must be one atomic step, which this mode's operations that end a message (and its
    #: reaper's recoveries) do not take yet.
    groups = False
    #: An enqueue WATCHes its dedup keys and id counter before its MULTI.
    watched_enqueues = True

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
        raise ConfigurationError("message groups need the scripted mode")
        yield  # (an operation: a generator)

    def enqueue_one(
        self,
        body: bytes,
        delay_ms: int,
        bucket_ms: int,
        dedup_key: str | None,
        dedup_ms: int,
        attributes: bytes | None = None,
    ) -> Op[Enqueued]:
        return (
            yield from self._enqueue(
                [body], delay_ms, bucket_ms, dedup_key, dedup_ms, None if attributes is None else [attributes]
            )
        )

    def enqueue(
        self, bodies: Sequence[bytes], delay_ms: int, bucket_ms: int, attributes: Attributes = None
    ) -> Op[Enqueued]:
        return (yield from self._enqueue(bodies, delay_ms, bucket_ms, None, 0, attributes))

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
        """Messages with their own delay and dedup key: one enqueue each."""
        ids: list[str] = []
        missing = False
        since = enqueued_ms or [None] * len(bodies)
        for body, delay, key, a, t in zip(bodies, delays_ms, dedup_keys, per_message(attributes, len(bodies)), since):
            one_ = yield from self._enqueue([body], delay, bucket_ms, key, dedup_ms, [a], t)
            ids += one_.ids
            missing = one_.config_missing
        return Enqueued(ids, missing)

    def _enqueue(
        self,
        bodies: Sequence[bytes],
        delay_ms: int,
        bucket_ms: int,
        dedup_key: str | None,
        dedup_ms: int,
        attributes: Attributes = None,
        since: int | None = None,
    ) -> Op[Enqueued]:
        """``since``: the enqueue time to record (a moved message's first), at most now."""
        k = self.keys
        typed = [k.seq, k.queue, k.items, k.signal, k.counters, *([k.timers] if delay_ms else [])]
        dedup = None if dedup_key is None else k.dedup(dedup_key)
        # WATCH the dedup key before reading it: a second producer with the same key
        # between our read and our EXEC makes the EXEC fail, and we return its id.
        reads: list[Command] = [("EXISTS", k.config)]
        if dedup is not None:
            reads.append(("GET", dedup))
        now, got = yield from self._open(typed, reads, watch=[dedup] if dedup else [])
        missing = got[0] == 0
        if dedup is not None and got[1] is not None:
            (yield from one(("UNWATCH",)))
            return Enqueued([_text(got[1])], missing)
        at = now + delay_ms
        tk, b = self._tk(at, bucket_ms)
        if delay_ms:
            yield from self._types([tk])
        last = yield from one(
            (
                "INCRBY",
                k.seq,
                len(bodies),
            )
        )
        if isinstance(last, ResponseError):
            raise CorruptQueue(k.seq)
        first = int(last) - len(bodies) + 1
        ids = [str(first + i) for i in range(len(bodies))]
        now_s = str(now if since is None else min(since, now))
        tx: list[Command] = []
        if dedup is not None:
            tx.append(("SET", dedup, ids[0], "PX", dedup_ms))
        for mid, body, a in zip(ids, bodies, per_message(attributes, len(bodies))):
            extra: list[str | bytes] = ["d", str(at)] if delay_ms else []
            if a:  # (with n = 0, as enqueue.lua writes it: see mark_format in _lib.lua)
                extra += ["a", a, "n", "0"]
            tx.append(("HSET", k.item(mid), "t", now_s, *extra, *body_fields(body, self.field_bytes)))
        if delay_ms:
            tx += [("SADD", tk, *ids), ("ZADD", k.timers, "LT", at, b)]
        else:
            tx += [("RPUSH", k.queue, *ids), ("SADD", k.items, *ids), *_signal(k.signal)]
        tx.append(("HINCRBY", k.counters, "enqueued", len(ids)))
        if (yield from self._commit(tx)) is None:  # the dedup key was set meanwhile
            return Enqueued(
                [
                    _text(
                        (
                            yield from one(
                                (
                                    "GET",
                                    dedup,
                                )
                            )
                        )
                    )
                ],
                missing,
            )
        return Enqueued(ids, missing)
