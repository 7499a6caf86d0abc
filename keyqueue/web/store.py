"""What the dashboard reads and changes in Redis, through ``keyqueue.aio`` only: the
queue names under the prefix, each queue's stats and counters, messages, and the actions
(requeue, purge). It owns the client it made from a URL, never one it was given."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field, replace
from typing import Any, Awaitable, Callable, Mapping, TypeVar

import redis
import redis.asyncio

from ..aio.message import Message
from ..aio.queue import Queue, list_queues
from ..connection import connection_kwargs, default_url, redact, resolve_client, sentinels_of
from ..core.results import GroupInfo, QueueStats, RateState
from ..core.schedules import Schedule
from ..core.shards import summed
from ..core.sources import PeekSource
from ..errors import CorruptQueue, InvalidQueueName
from ..keys import validate_prefix
from .rates import RATE_COUNTERS, RateHistory

T = TypeVar("T")

#: Seconds a read may take before the page says Redis does not answer (a blackholed
#: host would otherwise hold the request for the kernel's connect timeout). The time
#: counts the read's wait for the one event loop too: hundreds of requests at once on a
#: busy 2-core host kept reads waiting past 10 s while Redis answered at once.
READ_TIMEOUT = 30.0
#: Seconds /healthz waits for PING.
HEALTH_TIMEOUT = 2.0
#: Queues read at once for the overview and /metrics (each read pins a connection).
PARALLEL_READS = 8
#: Seconds a Queue made for a name serves before it is made again: a Queue reads its settings
#: (its shard count among them) once, so one destroyed and made again otherwise (sharded,
#: say) would go on showing the old keys' figures.
REMAKE_AFTER = 30.0


class UnknownQueue(LookupError):
    """A name that is not registered under the prefix: a 404 on every route."""


@dataclass(frozen=True)
class QueueView:
    """One queue as the dashboard shows it: stats, counters and rates."""

    name: str
    stats: QueueStats
    counters: Mapping[str, int]
    rates: Mapping[str, float | None] = field(default_factory=dict)
    series: Mapping[str, list[float]] = field(default_factory=dict)
    #: Why the queue could not be read (a key of the wrong type); its numbers are then zeros.
    error: str | None = None
    #: Its limits and their current use (read for a queue's own page only).
    flow: RateState | None = None
    #: A sharded queue's stats per shard, in shard order (``stats`` are their sums); empty
    #: for an unsharded queue.
    shards: tuple[QueueStats, ...] = ()

    def api(self) -> dict[str, Any]:
        """The object of ``GET /api/queues`` (name, the four counts, oldest_age; a sharded
        queue's also ``shards``, the same counts per shard); for a queue that could not be
        read, null numbers and the ``error``."""
        if self.error is not None:
            return {
                "name": self.name,
                **dict.fromkeys(("waiting", "processing", "delayed", "dead", "oldest_age")),
                "error": self.error,
            }
        out = {"name": self.name, **figures(self.stats)}
        if self.shards:
            out["shards"] = [{"shard": i, **figures(s)} for i, s in enumerate(self.shards)]
        return out


def figures(s: QueueStats) -> dict[str, Any]:
    """The four counts and the oldest age, as the API gives them."""
    return {
        "waiting": s.waiting,
        "processing": s.processing,
        "delayed": s.delayed,
        "dead": s.dead,
        "oldest_age": s.oldest_age,
    }


async def bounded(aw: Awaitable[T], seconds: float = READ_TIMEOUT) -> T:
    """``aw``, or redis' TimeoutError after ``seconds`` (a cancelled keyqueue operation
    drops its connection and changes nothing more)."""
    try:
        return await asyncio.wait_for(aw, seconds)
    except asyncio.TimeoutError:
        raise redis.TimeoutError(f"Redis did not answer within {seconds:g}s") from None


async def read(make: Callable[[], Awaitable[T]], seconds: float = READ_TIMEOUT) -> T:
    """A read, bounded in time and tried twice on a connection error: after Redis restarts
    or fails over, each pooled connection fails once before a new one is made, and a read
    is safe to repeat (actions, which write, are not repeated)."""
    try:
        return await bounded(make(), seconds)
    except redis.ConnectionError:
        return await bounded(make(), seconds)


def where(url: str | None, client: Any) -> str:
    """Where the client connects, for the page's header: never a password."""
    if url is not None:
        return redact(url)
    kw = connection_kwargs(client)
    if sentinels_of(client):
        return f"sentinel service {getattr(client.connection_pool, 'service_name', '?')}"
    if kw.get("path"):
        return f"unix://{kw['path']}"
    return f"redis://{kw.get('host', 'localhost')}:{kw.get('port', 6379)}/{kw.get('db', 0)}"


class Store:
    """The app's Redis side. ``queue_options`` go to every ``keyqueue.aio.Queue`` it builds
    (``scripting``, ``min_replicas``, ``replica_timeout``)."""

    def __init__(
        self, url: str | None, client: Any, prefix: str, queue_options: Mapping[str, Any] | None = None
    ) -> None:
        self.prefix = validate_prefix(prefix)
        self.owns_client = client is None
        if client is None and url is None:
            url = default_url()
        self.client = resolve_client(client, url, redis.asyncio.Redis)  # no I/O yet
        self.shown_url = where(url, self.client)
        self.queue_options = dict(queue_options or {})
        self.rates = RateHistory()
        self._queues: dict[str, tuple[Queue, float]] = {}  # with when it was made (monotonic)

    async def aclose(self) -> None:
        """Close the client made from the URL (a client passed in is the caller's)."""
        if self.owns_client:
            await self.client.aclose()
            for sentinel in sentinels_of(self.client):
                await sentinel.aclose()

    async def ping(self) -> str:
        """``ok``, or what is wrong: ``refused credentials`` (Redis answers, the URL's
        password is not right) or ``unreachable``."""
        try:
            # tried twice as every read: a stale pooled connection is no outage
            return "ok" if await read(self.client.ping, HEALTH_TIMEOUT) else "unreachable"
        except redis.AuthenticationError:
            return "refused credentials"
        except (redis.RedisError, OSError):
            return "unreachable"

    def _make(self, name: str) -> Queue:
        return Queue(name, client=self.client, prefix=self.prefix, **self.queue_options)

    def _cached(self, name: str) -> Queue | None:
        got = self._queues.get(name)
        return got[0] if got is not None and time.monotonic() - got[1] < REMAKE_AFTER else None

    def queue(self, name: str) -> Queue:
        q = self._cached(name)
        if q is None:
            q = self._make(name)
            self._queues[name] = (q, time.monotonic())
        return q

    async def names(self) -> list[str]:
        return sorted(await read(lambda: list_queues(self.client, self.prefix)))

    async def existing(self, name: str) -> Queue:
        """The queue, when it is registered under the prefix (one SISMEMBER, whatever the
        number of queues); UnknownQueue otherwise, also for a name no queue can have."""
        q = self._cached(name)
        made = q is None
        if q is None:
            try:
                q = self._make(name)
            except InvalidQueueName:
                raise UnknownQueue(name) from None
        if not await read(q.exists):
            raise UnknownQueue(name)
        if made:
            self._queues[name] = (q, time.monotonic())
        return q

    async def _view(self, name: str) -> QueueView:
        q = self.queue(name)
        # (a sharded queue's totals are the sums of the per-shard stats read with them, so
        # the page's table of shards always adds up to its totals)
        each, counters = await read(lambda: asyncio.gather(q.shard_stats(), q.counters()))
        self.rates.record(name, counters)
        return QueueView(
            name,
            each[0] if len(each) == 1 else summed(each),
            counters,
            {c: self.rates.rate(name, c) for c in RATE_COUNTERS},
            {c: self.rates.series(name, c) for c in RATE_COUNTERS},
            shards=tuple(each) if len(each) > 1 else (),
        )

    async def overview(self) -> list[QueueView]:
        """Every queue under the prefix, by name; one with a corrupt key is a view with its
        ``error`` (the others, and /metrics, stay readable)."""
        names = await self.names()
        for gone in set(self._queues) - set(names):
            del self._queues[gone]
        self.rates.keep_only(set(names))
        limit = asyncio.Semaphore(PARALLEL_READS)

        async def one(name: str) -> QueueView:
            async with limit:
                try:
                    return await self._view(name)
                except CorruptQueue as exc:
                    return QueueView(name, QueueStats(0, 0, 0, 0, None), {}, error=str(exc))

        return list(await asyncio.gather(*(one(n) for n in names)))

    async def view(self, name: str) -> QueueView:
        q = await self.existing(name)
        view = await self._view(name)
        return replace(view, flow=await read(q.rate_state))

    async def peek(self, name: str, count: int, source: PeekSource) -> list[Message]:
        q = self.queue(name)
        return await read(lambda: q.peek(count, source=source))

    async def groups(self, name: str, count: int) -> list[GroupInfo]:
        """The queue's ``count`` busiest message groups."""
        q = await self.existing(name)
        return await read(lambda: q.groups(count, busiest=True))

    async def schedules(self, name: str) -> list[Schedule]:
        q = await self.existing(name)
        return await read(q.schedules)
