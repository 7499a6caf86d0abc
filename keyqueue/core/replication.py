"""Replicated writes: ``WAIT n timeout`` after the writes of an operation, in the same round
trip, so an operation that returned was stored on ``n`` replicas too (as SQS stores every
message redundantly before it answers)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import InvalidArgument, NotReplicated
from .roundtrip import Command


@dataclass(frozen=True)
class Replication:
    replicas: int = 0
    timeout_ms: int = 1000

    @classmethod
    def of(cls, min_replicas: object, replica_timeout: object) -> Replication:
        """Checked options: ``min_replicas`` a whole number >= 0, ``replica_timeout`` seconds > 0."""
        if isinstance(min_replicas, bool) or not isinstance(min_replicas, int) or min_replicas < 0:
            raise InvalidArgument(f"min_replicas must be a whole number >= 0, not {min_replicas!r}")
        if (
            isinstance(replica_timeout, bool)
            or not isinstance(replica_timeout, (int, float))
            or not 0 < replica_timeout <= 3600
        ):
            raise InvalidArgument(f"replica_timeout must be seconds in (0, 3600], not {replica_timeout!r}")
        return cls(min_replicas, max(1, round(replica_timeout * 1000)))

    def tail(self) -> list[Command]:
        """What follows an operation's writes in their round trip: nothing, or one WAIT."""
        return [("WAIT", self.replicas, self.timeout_ms)] if self.replicas else []

    def check(self, reply: Any) -> None:
        """Raise NotReplicated when WAIT's reply counts fewer replicas than wanted."""
        if isinstance(reply, Exception):
            raise reply
        if int(reply) < self.replicas:
            raise NotReplicated(int(reply), self.replicas, self.timeout_ms)
