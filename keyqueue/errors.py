"""One exception tree: catch ``KeyQueueError`` to catch everything keyqueue raises."""

from __future__ import annotations

import redis.exceptions


class KeyQueueError(Exception):
    """Base of every keyqueue error."""


class InvalidQueueName(KeyQueueError, ValueError):
    """A queue name outside ``[A-Za-z0-9._-]{1,200}``."""


class MessageTooLarge(KeyQueueError, ValueError):
    """A body over the queue's ``max_body_bytes``."""


class InvalidArgument(KeyQueueError, ValueError):
    """A setting or argument with a value keyqueue cannot use (negative delay, bad source, ...)."""


class MessageNotJSON(KeyQueueError, ValueError):
    """``Message.json()`` on a body that is not UTF-8 text."""


class ConfigurationError(KeyQueueError, ValueError):
    """The connection was asked for in a way that cannot work (bad URL, client and url both given)."""


class HandlerTimeout(KeyQueueError, TimeoutError):
    """What a worker fails a delivery with when its handler is still running ``timeout``
    seconds after it started: ``last_error`` then starts with ``HandlerTimeout``."""


class Throttle(KeyQueueError):
    """Raised by a handler when a downstream service refuses for now (an HTTP 429): the
    worker gives the message back at once without using up a receive, and throttles its
    queue for ``seconds`` (no claim of it succeeds meanwhile, by any consumer)."""

    def __init__(self, seconds: float, message: str = "") -> None:
        ok = isinstance(seconds, (int, float)) and not isinstance(seconds, bool) and 0 < seconds <= 1e9
        if not ok:  # (NaN fails the comparison too)
            raise InvalidArgument(f"Throttle takes a number of seconds > 0 (at most 1e9), not {seconds!r}")
        self.seconds = float(seconds)
        super().__init__(message or f"throttled for {self.seconds:g}s")


class CorruptQueue(KeyQueueError):
    """A queue key holds the wrong Redis type: someone wrote over it. Nothing was changed."""

    def __init__(self, key: str, problem: str = "holds the wrong type") -> None:
        self.key = key
        super().__init__(f"key {key!r} {problem}; the operation changed nothing")


class MissingDependency(KeyQueueError, ImportError):
    """An optional part of keyqueue was used without its extra installed."""


class NotReplicated(KeyQueueError):
    """A write was done on the primary, but fewer replicas than ``min_replicas`` acknowledged
    it within ``replica_timeout``: it may be lost if the primary fails over now. Workers and
    reapers treat it as transient."""

    def __init__(self, acknowledged: int, wanted: int, timeout_ms: int) -> None:
        self.acknowledged, self.wanted = acknowledged, wanted
        super().__init__(
            f"done on the primary, but {acknowledged} of {wanted} replicas acknowledged it "
            f"within {timeout_ms} ms: it may be lost on a failover"
        )


class PoolExhausted(KeyQueueError, redis.exceptions.ConnectionError):
    """Every connection of a pool keyqueue made from a URL stayed busy for ``pool_timeout``.
    A redis ``ConnectionError``, so workers and reapers back off and retry as for an outage."""

    def __init__(self, max_connections: int, timeout: float) -> None:
        self.max_connections, self.timeout = max_connections, timeout
        super().__init__(
            f"no free Redis connection for {timeout:g} s (all {max_connections} in use): raise "
            f"max_connections= or pool_timeout= in the Redis URL, or run fewer operations at once"
        )


class InvalidSchedule(KeyQueueError, ValueError):
    """A schedule (or a fire-time question) keyqueue cannot use: both or neither of cron and
    every, an unparsable cron or zone, every < 1, end <= start, a bad id or catch_up."""


class UnknownSchedule(KeyQueueError, LookupError):
    """``fire_schedule`` of an id the queue has no schedule for."""


class ShardsFound(KeyQueueError):
    """Internal: a Queue made without ``shards=`` found the queue sharded; it adopts the count."""

    def __init__(self, count: int) -> None:
        super().__init__(f"the queue has {count} shards")
        self.count = count
