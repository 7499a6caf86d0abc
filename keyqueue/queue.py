"""Queue: the blocking face of one queue. Every operation is the core's
(``core/queue_core.py``), run on a blocking redis-py client by ``transport/sync.py``; this
module only binds results to Message objects."""

from __future__ import annotations

import logging
import time
from datetime import datetime
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence

import redis

from .connection import TRANSIENT
from .core.queue_core import BATCH, REAP_INTERVAL, REQUEUE_BATCH, WAIT_SLICE, list_queues_op
from .core.results import GroupInfo, QueueStats, RateState, ReapResult
from .core.roundtrip import Op, T
from .core.schedules import Schedule
from .core.shards import Core, ShardedCore, settle_core, shard_stats
from .core.sources import PeekSource, PurgeSource, RequeueSource
from .errors import ShardsFound
from .face import QueueFace, claim_any_plan, claim_shards_plan
from .message import Message
from .settings import QueueSettings
from .transport.sync import run, run_plan

if TYPE_CHECKING:
    from .fsck import CheckReport

__all__ = ["Queue", "list_queues", "claim_any", "BATCH", "REQUEUE_BATCH", "WAIT_SLICE", "REAP_INTERVAL"]

log = logging.getLogger("keyqueue.queue")


class Queue(QueueFace):
    """A reliable FIFO work queue in Redis with SQS-style visibility timeouts.

    Args:
        name: queue name, ``[A-Za-z0-9._-]{1,200}``.
        client / url: a redis-py client, or a URL (default ``KEYQUEUE_URL``, else
            ``redis://localhost:6379/0``).
        prefix: key prefix; every key is ``prefix:{name}:...``.
        visibility_timeout, max_receives, bucket_seconds, max_body_bytes, dedup_window:
            settings. Given ones are written to the queue's config hash; the others are
            read from it, so every process applies the same values.
        retention, dead_retention: seconds a message is kept from its first enqueue (or its
            requeue), and a dead letter from its dead-lettering; None keeps them until handled.
            Settings too.
        rate_limit, max_in_flight: flow control for the whole queue, read by every claim of
            every consumer: at most N claims per S seconds ("N/S" or (N, S); windows aligned
            on the server's clock), and at most this many messages owned at once. Settings
            too; None: no limit.
        group_concurrency: at most this many messages of one message group (``group=``)
            released at once; 1 (the default) delivers a group in order, one at a time. A setting.
        scripting: False selects the script-free mode (servers without EVAL).
        shards: store the queue as this many shards (``{name#i}``) that a cluster spreads
            over its nodes; fixed when the queue is first made, None adopts the stored count
            (one stored after this Queue loaded too, found by its next write, reap or claim).
        clock: tests only: a function returning epoch seconds that replaces Redis TIME.
    """

    def _made(self) -> None:
        """Load the settings (read those not given, write the given ones) at construction, unless Redis
        is unreachable: then on first use, so a module-level Queue always imports."""
        try:
            self._settle()
        except TRANSIENT as exc:  # e.g. a module-level Queue while Redis restarts
            log.debug("queue %s: Redis unreachable (%s); settings load on first use", self.name, exc)

    def _settle(self) -> Core:
        """The core with its settings loaded (the queue found sharded: the sharded core)."""
        if self._core.settings is None:
            self._core = run(self.client, settle_core(self._core, self._sharded))
        return self._core

    def _run(self, make: Callable[[], Op[T]]) -> T:
        if self._core.settings is None:
            self._settle()
        try:
            out = run(self.client, make())
        except ShardsFound as found:  # sharded since this Queue loaded, found before a write
            self._core = self._sharded(found.count)
            self._settle()
            return run(self.client, make())
        self._noticed()
        return out

    # -- settings -------------------------------------------------------------------------

    @property
    def settings(self) -> QueueSettings:
        """The settings in force: loaded when the Queue was made, or on first use if Redis
        was unreachable then."""
        loaded = self._core.settings  # (read per message by Workers: no operation once loaded)
        return loaded if loaded is not None else self._run(lambda: self._core.ready())

    def refresh_settings(self) -> QueueSettings:
        """Re-read the config hash (the reaper does this every pass)."""
        return self._run(lambda: self._core.refresh_settings())

    # -- producing ------------------------------------------------------------------------

    def enqueue(
        self,
        body: bytes | str,
        *,
        delay: float = 0.0,
        dedup_key: str | None = None,
        attributes: bytes | None = None,
        group: str | None = None,
        shard_key: str | None = None,
    ) -> str:
        """Add a message; with ``dedup_key``, a repeat within dedup_window returns the first id.
        ``attributes``: opaque bytes kept with it and returned as ``Message.attributes``.
        ``group``: its message group, whose messages are delivered in order (at most
        group_concurrency of them released at once). ``shard_key`` (a sharded queue): the
        messages of one key go to one shard (a group's go by their group)."""
        return self._run(lambda: self._core.enqueue(body, delay, dedup_key, attributes, group, shard_key))

    def enqueue_many(
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
        """Add many messages in one round trip; ids are returned in order.

        ``delays``, ``dedup_keys`` and ``attributes`` (one per body, None = none) give each
        message its own; a repeated dedup key returns the first message's id, as ``enqueue`` does.
        ``enqueued_at`` (epoch seconds, one per body; None or a time to come: now) is the
        time each message's age counts from, so one moved from another queue keeps its first
        enqueue time and its retention. ``group``: every message joins that message group, in order.
        ``shard_keys`` (a sharded queue, one per body): as ``enqueue``'s ``shard_key``."""
        return self._run(
            lambda: self._core.enqueue_many(
                bodies, delay, delays, dedup_keys, attributes, enqueued_at, group, shard_keys
            )
        )

    def get(self, ids: Iterable[str]) -> list[Message]:
        """The messages with these ids, in order, without claiming them (no receipt); ids
        with no message are skipped. One round trip."""
        return self._bind(self._run(lambda: self._core.get(ids)), with_receipt=False)

    # -- consuming ------------------------------------------------------------------------

    def claim(self, *, visibility_timeout: float | None = None, wait: float = 0.0) -> Message | None:
        """The next message, invisible to others until its deadline; ``wait`` long-polls."""
        got = self.claim_many(1, visibility_timeout=visibility_timeout, wait=wait)
        return got[0] if got else None

    def claim_many(self, count: int, *, visibility_timeout: float | None = None, wait: float = 0.0) -> list[Message]:
        started = time.monotonic()
        core = self._settle()
        if isinstance(core, ShardedCore):  # every shard, from a rotating one
            return run_plan(claim_shards_plan(self, count, visibility_timeout, wait))
        got = self._bind(self._run(lambda: core.claim(count, visibility_timeout, wait)))
        if got or self._core is core:
            return got
        # sharded meanwhile: the rest of the wait on the shards
        return self.claim_many(
            count, visibility_timeout=visibility_timeout, wait=max(0.0, wait - (time.monotonic() - started))
        )

    def reap_if_due(self) -> bool:
        """A bounded reap step when a timer of the queue may have fallen due and this Queue
        has not reaped for a second (claims do this themselves)."""
        return self._run(lambda: self._core.reap_if_due())

    def ack(self, message: Message) -> bool:
        """Delete a message; True only if this delivery was still current."""
        return self.ack_many([message]) == 1

    def ack_many(self, messages: Sequence[Message]) -> int:
        owned, pairs = self._pairs(messages)
        n = self._run(lambda: self._core.ack(pairs))
        self._mark(owned, "ack")
        return n

    def extend(self, message: Message, seconds: float) -> bool:
        """Heartbeat: new deadline = now + seconds, if this delivery is current."""
        self._own(message)
        new = self._run(lambda: self._core.extend(message.id, message.receipt, seconds))
        if new is not None:
            message.deadline = new / 1000.0
        return new is not None

    def release(self, message: Message, *, delay: float = 0.0, error: str | None = None) -> bool:
        """Give a message back (to the tail, or after ``delay``); ``error`` becomes last_error
        (its first 4,096 bytes, UTF-8, ending with "…" when cut)."""
        self._own(message)
        ok = self._run(lambda: self._core.release(message.id, message.receipt, delay, error))
        self._mark([message], "release")
        return ok

    def throttle(self, seconds: float) -> float:
        """No claim of this queue, by any consumer, succeeds for ``seconds`` (a longer throttle
        already set is kept): for a downstream API's 429. Returns the seconds left of it."""
        return self._run(lambda: self._core.throttle(seconds))

    def rate_state(self) -> RateState:
        """The queue's limits (as every claim reads them) and their current use."""
        return self._run(lambda: self._core.rate_state())

    def release_throttled(self, message: Message, seconds: float) -> bool:
        """What a handler's ``keyqueue.Throttle(seconds)`` does: throttle the queue, then give
        the message back at once without using up a receive."""
        self._own(message)
        ok = self._run(lambda: self._core.throttled(message.id, message.receipt, seconds))
        self._mark([message], "release")
        return ok

    def dead_letter(self, message: Message, reason: str = "") -> bool:
        """Move a current delivery to dead letters; ``reason`` becomes last_error
        (its first 4,096 bytes, UTF-8, ending with "…" when cut)."""
        self._own(message)
        ok = self._run(lambda: self._core.dead_letter(message.id, message.receipt, reason))
        self._mark([message], "dead_letter")
        return ok

    # -- maintenance ----------------------------------------------------------------------

    def reap(self) -> ReapResult:
        """Redeliver expired messages and release due delayed ones, in bounded batches; with
        retention or dead_retention set, also delete what outlived them."""
        return self._run(lambda: self._core.reap())

    def requeue(
        self,
        ids: Iterable[str] | None = None,
        *,
        source: RequeueSource = "dead",
        progress: Callable[[int], None] | None = None,
    ) -> int:
        """Put dead (or in-flight) messages back at the tail with receives reset to 0."""
        return self._run(lambda: self._core.requeue(ids, source, progress))

    def purge(
        self,
        *,
        source: PurgeSource = "waiting",
        progress: Callable[[int], None] | None = None,
        ids: Iterable[str] | None = None,
    ) -> int:
        """Delete every message of a source (``all``: every message); seq, config and dedup keys stay.
        ``ids`` (with source="dead"): only these dead letters; returns how many were dead."""
        return self._run(lambda: self._core.purge(source, progress, ids))

    def exists(self) -> bool:
        """Whether the queue is registered (``keyqueue ls`` lists it)."""
        return self._run(lambda: self._core.exists())

    def metadata(self) -> dict[str, str]:
        """The queue's metadata hash (a surface's own data, e.g. the SQS API's attributes)."""
        return self._run(lambda: self._core.metadata())

    def set_metadata(self, values: dict[str, str], *, remove: Iterable[str] = ()) -> None:
        """Write ``values`` and delete the fields ``remove`` of the metadata hash, atomically."""
        self._run(lambda: self._core.set_metadata(values, remove))

    # -- schedules ------------------------------------------------------------------------

    def schedule(
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
        return self._run(
            lambda: self._core.schedule(id, cron, every, body, tz, start, end, jitter, catch_up, misfire_grace)
        )

    def unschedule(self, id: str) -> bool:
        return self._run(lambda: self._core.unschedule(id))

    def pause_schedule(self, id: str) -> bool:
        return self._run(lambda: self._core.set_paused(id, True))

    def resume_schedule(self, id: str) -> bool:
        return self._run(lambda: self._core.set_paused(id, False))

    def schedules(self) -> list[Schedule]:
        return self._run(lambda: self._core.schedules())

    def fire_schedule(self, id: str) -> str:
        """Enqueue one message of the schedule now (its id); the schedule stays as it is."""
        return self._run(lambda: self._core.fire_schedule(id))

    def destroy(self) -> None:
        """Delete every key of the queue and forget its name."""
        self._run(lambda: self._core.destroy())

    def forget_dedup_keys(self) -> int:
        """Forget every dedup key (``dedup_key``, ``dedup_keys``) still in its window, so that
        it enqueues anew (what SQS's PurgeQueue does to a FIFO queue's deduplication); the
        messages stay. Returns how many records went."""
        return self._run(lambda: self._core.forget_dedup_keys())

    # -- reading --------------------------------------------------------------------------

    def length(self) -> int:
        """Messages waiting to be claimed (not delayed, not in flight)."""
        return self._run(lambda: self._core.length())

    def counters(self) -> dict[str, int]:
        """Totals since the queue was made, exact across every producer and worker:
        ``enqueued``, ``acked``, ``redelivered`` (visibility timeouts), ``dead_lettered``."""
        return self._run(lambda: self._core.counters())

    def __len__(self) -> int:
        return self.length()

    def stats(self) -> QueueStats:
        """The logical queue's: a sharded queue's are the sums of its shards'."""
        return self._run(lambda: self._core.stats())

    def shard_stats(self) -> list[QueueStats]:
        """The stats of each shard, in shard order (an unsharded queue: its own, alone)."""
        return self._run(lambda: shard_stats(self._core))

    def groups(self, count: int = 100, *, busiest: bool = False) -> list[GroupInfo]:
        """Message groups with released or held messages, by id (a drained group is absent);
        ``busiest``: those with the most messages first (among the first 10,000 by id)."""
        return self._run(lambda: self._core.groups(count, busiest))

    def peek(self, count: int = 10, *, source: PeekSource = "waiting") -> list[Message]:
        """Read messages without claiming them; they carry no receipt."""
        return self._bind(self._run(lambda: self._core.peek(count, source)), with_receipt=False)

    def ids(self, source: PeekSource = "waiting") -> list[str]:
        """Every id in one state, in peek order, without the messages (snapshots use it)."""
        return self._run(lambda: self._core.ids(source))

    def check(self, *, repair: bool = False, settle: float = 1.0) -> CheckReport:
        """fsck: verify every message is in exactly one state; with ``repair``, fix what can
        be fixed without losing a message. Findings must hold for ``settle`` seconds, so a
        live operation caught between two commands is not mistaken for damage."""
        from .fsck import check_op

        return self._run(lambda: check_op(self._core, repair=repair, settle=settle))

    def worker(self, handler: Callable[[Message], Any] | None = None, **options: Any) -> Any:
        """Decorator: ``@queue.worker(concurrency=4)`` (or bare ``@queue.worker``) turns
        ``fn(message)`` into a Worker."""
        from .worker.threads import Worker

        def decorate(handler: Callable[[Message], Any]) -> Worker:
            return Worker(self, handler, **options)

        return decorate if handler is None else decorate(handler)


def list_queues(client: redis.Redis, prefix: str = "kq") -> list[str]:
    """Names of the queues registered under ``prefix`` (those that were ever written to)."""
    return run(client, list_queues_op(prefix))


def claim_any(
    queues: Sequence[Queue],
    count: int,
    *,
    visibility_timeout: float | None = None,
    wait: float = 0.0,
    poll_first: bool = True,
) -> tuple[Queue | None, list[Message]]:
    """Claim from the first non-empty of ``queues`` (priority order), long-polling all of
    them for up to ``wait`` seconds. Returns the queue the messages came from."""
    return run_plan(claim_any_plan(queues, count, visibility_timeout, wait, poll_first))
