"""Queue on asyncio: the same operations as ``keyqueue.Queue`` (the core's), awaited on a
``redis.asyncio`` client. Constructing does no I/O; settings load on first use."""

from __future__ import annotations

import time
from datetime import datetime
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Iterable, Sequence

import redis.asyncio

from ..connection import sentinels_of
from ..core.queue_core import list_queues_op
from ..core.results import GroupInfo, QueueStats, RateState, ReapResult
from ..core.roundtrip import Op, T
from ..core.schedules import Schedule
from ..core.shards import Core, ShardedCore, settle_core, shard_stats
from ..core.sources import PeekSource, PurgeSource, RequeueSource
from ..errors import InvalidArgument, ShardsFound
from ..face import QueueFace, claim_any_plan, claim_shards_plan
from ..settings import QueueSettings
from ..transport.aio import run, run_plan
from .message import Message

if TYPE_CHECKING:
    from ..fsck import CheckReport
    from ..worker.tasks import Worker


class Queue(QueueFace):
    """A keyqueue queue for asyncio code: ``await q.enqueue(...)``, ``await q.claim(wait=20)``.

    Args: as ``keyqueue.Queue``; ``client`` is a ``redis.asyncio.Redis`` (or RedisCluster).
    ``async with Queue(...) as q`` closes the client it made from ``url``.
    """

    message_class = Message
    client_class = redis.asyncio.Redis
    awaited = True

    async def _settle(self) -> Core:
        """The core with its settings loaded (the queue found sharded: the sharded core)."""
        if self._core.settings is None:
            self._core = await run(self.client, settle_core(self._core, self._sharded))
        return self._core

    async def _run(self, make: Callable[[], Op[T]]) -> T:
        if self._core.settings is None:
            await self._settle()
        try:
            out = await run(self.client, make())
        except ShardsFound as found:  # sharded since this Queue loaded, found before a write
            self._core = self._sharded(found.count)
            await self._settle()
            return await run(self.client, make())
        self._noticed()
        return out

    async def __aenter__(self) -> Queue:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the client this queue made from a URL (a client you gave stays open)."""
        if self._owns_client:
            await self.client.aclose()
            for sentinel in sentinels_of(self.client):  # a Sentinel URL's: closed with it
                await sentinel.aclose()

    # -- settings -------------------------------------------------------------------------

    @property
    def settings(self) -> QueueSettings:
        """The settings in force, once loaded (by any operation, or ``await q.load()``)."""
        if self._core.settings is None:
            raise InvalidArgument(
                f"the settings of queue {self.name!r} load on first use: await queue.load() (or any operation) first"
            )
        return self._core.settings

    async def load(self) -> QueueSettings:
        """Read the settings (and write the given ones) now rather than on first use."""
        await self._settle()
        return await self._run(lambda: self._core.ready())

    async def refresh_settings(self) -> QueueSettings:
        return await self._run(lambda: self._core.refresh_settings())

    # -- producing ------------------------------------------------------------------------

    async def enqueue(
        self,
        body: bytes | str,
        *,
        delay: float = 0.0,
        dedup_key: str | None = None,
        attributes: bytes | None = None,
        group: str | None = None,
        shard_key: str | None = None,
    ) -> str:
        return await self._run(lambda: self._core.enqueue(body, delay, dedup_key, attributes, group, shard_key))

    async def enqueue_many(
        self,
        bodies: Iterable[bytes | str],
        *,
        delay: float = 0.0,
        delays: Sequence[float] | None = None,
        dedup_keys: Sequence[str | None] | None = None,
        attributes: Sequence[bytes | None] | None = None,
        enqueued_at: Sequence[float | None] | None = None,
        group: str | None = None,
        shard_keys: Sequence[str | None] | None = None,
    ) -> list[str]:
        return await self._run(
            lambda: self._core.enqueue_many(
                bodies, delay, delays, dedup_keys, attributes, enqueued_at, group, shard_keys
            )
        )

    async def get(self, ids: Iterable[str]) -> list[Message]:
        return self._bind(await self._run(lambda: self._core.get(ids)), with_receipt=False)

    # -- consuming ------------------------------------------------------------------------

    async def claim(self, *, visibility_timeout: float | None = None, wait: float = 0.0) -> Message | None:
        got = await self.claim_many(1, visibility_timeout=visibility_timeout, wait=wait)
        return got[0] if got else None

    async def claim_many(
        self, count: int, *, visibility_timeout: float | None = None, wait: float = 0.0
    ) -> list[Message]:
        """A long-poll waits in Redis without blocking the loop. Cancelled while it waits, it
        takes nothing; cancelled as Redis hands messages over, they return at their deadline,
        as after any lost reply."""
        started = time.monotonic()
        core = await self._settle()
        if isinstance(core, ShardedCore):  # every shard, from a rotating one
            return await run_plan(claim_shards_plan(self, count, visibility_timeout, wait))
        got = self._bind(await self._run(lambda: core.claim(count, visibility_timeout, wait)))
        if got or self._core is core:
            return got
        # sharded meanwhile: the rest of the wait on the shards
        return await self.claim_many(
            count, visibility_timeout=visibility_timeout, wait=max(0.0, wait - (time.monotonic() - started))
        )

    async def reap_if_due(self) -> bool:
        return await self._run(lambda: self._core.reap_if_due())

    async def ack(self, message: Message) -> bool:
        return await self.ack_many([message]) == 1

    async def ack_many(self, messages: Sequence[Message]) -> int:
        owned, pairs = self._pairs(messages)
        n = await self._run(lambda: self._core.ack(pairs))
        self._mark(owned, "ack")
        return n

    async def extend(self, message: Message, seconds: float) -> bool:
        self._own(message)
        new = await self._run(lambda: self._core.extend(message.id, message.receipt, seconds))
        if new is not None:
            message.deadline = new / 1000.0
        return new is not None

    async def release(self, message: Message, *, delay: float = 0.0, error: str | None = None) -> bool:
        self._own(message)
        ok = await self._run(lambda: self._core.release(message.id, message.receipt, delay, error))
        self._mark([message], "release")
        return ok

    async def throttle(self, seconds: float) -> float:
        """No claim of this queue, by any consumer, succeeds for ``seconds`` (a longer throttle
        already set is kept): for a downstream API's 429. Returns the seconds left of it."""
        return await self._run(lambda: self._core.throttle(seconds))

    async def rate_state(self) -> RateState:
        """The queue's limits (as every claim reads them) and their current use."""
        return await self._run(lambda: self._core.rate_state())

    async def release_throttled(self, message: Message, seconds: float) -> bool:
        """What a handler's ``keyqueue.Throttle(seconds)`` does: throttle the queue, then give
        the message back at once without using up a receive."""
        self._own(message)
        ok = await self._run(lambda: self._core.throttled(message.id, message.receipt, seconds))
        self._mark([message], "release")
        return ok

    async def dead_letter(self, message: Message, reason: str = "") -> bool:
        self._own(message)
        ok = await self._run(lambda: self._core.dead_letter(message.id, message.receipt, reason))
        self._mark([message], "dead_letter")
        return ok

    # -- maintenance ----------------------------------------------------------------------

    async def reap(self) -> ReapResult:
        return await self._run(lambda: self._core.reap())

    async def requeue(
        self,
        ids: Iterable[str] | None = None,
        *,
        source: RequeueSource = "dead",
        progress: Callable[[int], None] | None = None,
    ) -> int:
        return await self._run(lambda: self._core.requeue(ids, source, progress))

    async def purge(
        self,
        *,
        source: PurgeSource = "waiting",
        progress: Callable[[int], None] | None = None,
        ids: Iterable[str] | None = None,
    ) -> int:
        return await self._run(lambda: self._core.purge(source, progress, ids))

    async def exists(self) -> bool:
        return await self._run(lambda: self._core.exists())

    async def metadata(self) -> dict[str, str]:
        return await self._run(lambda: self._core.metadata())

    async def set_metadata(self, values: dict[str, str], *, remove: Iterable[str] = ()) -> None:
        await self._run(lambda: self._core.set_metadata(values, remove))

    # -- schedules ------------------------------------------------------------------------

    async def schedule(
        self,
        id: str,
        *,
        cron: str | None = None,
        every: float | None = None,
        body: bytes | str = b"",
        tz: str = "UTC",
        start: float | datetime | None = None,
        end: float | datetime | None = None,
        jitter: float = 0.0,
        catch_up: str = "one",
        misfire_grace: float | None = None,
    ) -> Schedule:
        """Upsert a schedule (exactly one of ``cron`` and ``every``): an identical one changes
        nothing, a changed one takes effect at once. Reapers, Workers and claims fire it."""
        return await self._run(
            lambda: self._core.schedule(id, cron, every, body, tz, start, end, jitter, catch_up, misfire_grace)
        )

    async def unschedule(self, id: str) -> bool:
        return await self._run(lambda: self._core.unschedule(id))

    async def pause_schedule(self, id: str) -> bool:
        return await self._run(lambda: self._core.set_paused(id, True))

    async def resume_schedule(self, id: str) -> bool:
        return await self._run(lambda: self._core.set_paused(id, False))

    async def schedules(self) -> list[Schedule]:
        return await self._run(lambda: self._core.schedules())

    async def fire_schedule(self, id: str) -> str:
        """Enqueue one message of the schedule now (its id); the schedule stays as it is."""
        return await self._run(lambda: self._core.fire_schedule(id))

    async def destroy(self) -> None:
        await self._run(lambda: self._core.destroy())

    async def forget_dedup_keys(self) -> int:
        return await self._run(lambda: self._core.forget_dedup_keys())

    # -- reading --------------------------------------------------------------------------

    async def length(self) -> int:
        return await self._run(lambda: self._core.length())

    async def counters(self) -> dict[str, int]:
        """Totals since the queue was made: see ``keyqueue.Queue.counters``."""
        return await self._run(lambda: self._core.counters())

    async def stats(self) -> QueueStats:
        return await self._run(lambda: self._core.stats())

    async def shard_stats(self) -> list[QueueStats]:
        """The stats of each shard, in shard order (an unsharded queue: its own, alone)."""
        return await self._run(lambda: shard_stats(self._core))

    async def ids(self, source: PeekSource = "waiting") -> list[str]:
        return await self._run(lambda: self._core.ids(source))

    async def groups(self, count: int = 100, *, busiest: bool = False) -> list[GroupInfo]:
        return await self._run(lambda: self._core.groups(count, busiest))

    async def peek(self, count: int = 10, *, source: PeekSource = "waiting") -> list[Message]:
        return self._bind(await self._run(lambda: self._core.peek(count, source)), with_receipt=False)

    async def check(self, *, repair: bool = False, settle: float = 1.0) -> CheckReport:
        """fsck, as ``keyqueue.Queue.check``: the same operation, awaited (the second look
        ``settle`` seconds later waits without blocking the loop)."""
        from ..fsck import check_op

        return await self._run(lambda: check_op(self._core, repair=repair, settle=settle))

    def worker(self, handler: Callable[[Message], Awaitable[Any]] | None = None, **options: Any) -> Any:
        """Decorator: ``@queue.worker(concurrency=10)`` turns ``async def fn(message)`` into an
        ``aio.Worker``."""
        from ..worker.tasks import Worker

        def decorate(handler: Callable[[Message], Awaitable[Any]]) -> Worker:
            return Worker(self, handler, **options)

        return decorate if handler is None else decorate(handler)


async def list_queues(client: Any, prefix: str = "kq") -> list[str]:
    """Names of the queues registered under ``prefix``."""
    return await run(client, list_queues_op(prefix))


async def claim_any(
    queues: Sequence[Queue],
    count: int,
    *,
    visibility_timeout: float | None = None,
    wait: float = 0.0,
    poll_first: bool = True,
) -> tuple[Queue | None, list[Message]]:
    """Claim from the first non-empty of ``queues`` (priority order), long-polling all of
    them for up to ``wait`` seconds. Returns the queue the messages came from."""
    return await run_plan(claim_any_plan(queues, count, visibility_timeout, wait, poll_first))
