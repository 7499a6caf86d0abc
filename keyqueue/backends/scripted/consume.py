"""Claiming, with or without a long-poll wait."""

from __future__ import annotations

from typing import Any, Sequence

from redis.exceptions import ResponseError

from ...core.replies import error_for
from ...core.results import Claimed
from ...core.roundtrip import Op
from .scripts import ScriptBase, _max_receives, claimed


class Consume(ScriptBase):
    def _claim_keys(self) -> tuple[str, ...]:
        """A shard's on one server add every other shard's processing (the in-flight cap)."""
        return self.consume_keys if self.flow is None else (*self.consume_keys, *self.flow.processing)

    def _claim_args(
        self,
        count: int,
        visibility_ms: int,
        bucket_ms: int,
        max_receives: int | None,
        retention_ms: int | None,
        counted: bool,
    ) -> tuple[Any, ...]:
        base = (count, visibility_ms, bucket_ms, _max_receives(max_receives), _max_receives(retention_ms))
        rate = () if self.flow is None else self.flow.args()
        if not counted:
            return (*base, *rate)
        return (*base, *rate, *[""] * (3 - len(rate)), "1")  # (ARGV[11], after the optional three)

    def claim(
        self,
        count: int,
        visibility_ms: int,
        bucket_ms: int,
        max_receives: int | None,
        retention_ms: int | None = None,
        counted: bool = False,
    ) -> Op[Claimed]:
        reply = yield from self.call(
            "claim",
            self._claim_keys(),
            self._claim_args(count, visibility_ms, bucket_ms, max_receives, retention_ms, counted),
        )
        return claimed(reply)

    def wait_then_claim(
        self,
        signals: Sequence[str],
        timeout: float,
        count: int,
        visibility_ms: int,
        bucket_ms: int,
        max_receives: int | None,
        retention_ms: int | None = None,
        counted: bool = False,
    ) -> Op[Claimed]:
        """BLPOP on ``signals``, then claim, in one round trip: Redis runs a connection's
        commands in order, so the claim runs the moment the BLPOP wakes (or times out)."""
        claim = self._evalsha(
            "claim",
            self._claim_keys(),
            self._claim_args(count, visibility_ms, bucket_ms, max_receives, retention_ms, counted),
        )
        tail = self.replication.tail()
        woken, *replies = yield [("BLPOP", *signals, timeout), claim, *tail]
        if isinstance(woken, ResponseError):
            raise error_for(woken, signals[0])
        (reply,) = yield from self.loaded("claim", [claim], replies, tail)
        return claimed(reply)
