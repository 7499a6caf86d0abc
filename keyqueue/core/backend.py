"""The interface between the queue core and its two backends (``backends/scripted`` and
``backends/commands``): the same methods, each returning an operation with a typed value."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, Protocol, Sequence

from ..keys import QueueKeys
from .replication import Replication
from .replies import text
from .results import (
    Claimed,
    Counts,
    Enqueued,
    ExpirePosition,
    ExpireStep,
    Fields,
    Fired,
    Looked,
    Purged,
    ReapPosition,
    ReapStep,
    Requeued,
)
from .roundtrip import Op
from .schedules import Definition

#: Per-message attributes (item field a) of a batch, or None for a batch without any.
Attributes = Sequence[bytes | None] | None


class FireCall(NamedTuple):
    """One fire of ``schedule_fire_many``: done only if the schedule still has the version,
    index score, definition and anchor read."""

    schedule_id: str
    version: str
    read_score: str
    definition: bytes
    anchor_ms: int
    next_ms: int | None
    score: str
    missed: int
    every_ms: int | None
    messages: Sequence[tuple[int, int]]
    #: The schedule as read (a backend with ``watched_fires``: its body and state; a script
    #: reads them itself).
    read: dict[bytes, bytes] = {}

    @classmethod
    def of_read(
        cls,
        schedule_id: str,
        read: dict[bytes, bytes],
        next_ms: int | None,
        score: str,
        missed: int,
        messages: Sequence[tuple[int, int]],
    ) -> FireCall:
        """A fire of a schedule as read (schedules.unpack's fields)."""
        try:
            every = Definition.load(read[b"d"]).every_ms
        except (ValueError, TypeError):  # (unreadable: the script compares it as text, counts none in)
            every = None
        version, read_score = text(read[b"v"]), text(read.get(b"i", b""))
        return cls(
            schedule_id, version, read_score, read[b"d"], int(read[b"a"]), next_ms, score, missed, every, messages, read
        )


@dataclass(frozen=True)
class FlowScope:
    """How a shard's claims count against the queue's flow control, which holds for the whole
    logical queue. On one server: the window counters of ``keys`` (the logical queue's own,
    shared by every shard), and the in-flight count of ``processing`` (every shard's). On a
    cluster, where the shards live on other nodes and share no key, this shard's part
    (``share``: index, count): of the window's ``limit`` claims numbered ``w * limit`` on, and
    of the ``max_in_flight`` slots numbered 0 on, those whose number is ``index`` modulo
    ``count``. The parts sum to the limit, and a rate limit below the shard count reaches each
    shard in turn (an in-flight cap below it is refused: ``cap_parts_ok``)."""

    keys: QueueKeys
    share: tuple[int, int] | None = None
    processing: tuple[str, ...] = ()

    def limit(self, limit: int, window: int) -> int:
        """The claims this scope may start in window number ``window``."""
        if self.share is None:
            return limit
        index, count = self.share
        start, end = window * limit, (window + 1) * limit
        return (end - 1 - index) // count - (start - 1 - index) // count

    def cap(self, cap: int) -> int:
        """The deliveries this scope may own at once (of its processing keys together)."""
        return cap if self.share is None else self.limit(cap, 0)

    def args(self) -> tuple[str, ...]:
        """claim.lua's optional arguments: the counters' key base, and the share."""
        return (self.keys.base,) if self.share is None else (self.keys.base, *map(str, self.share))


def cap_parts_ok(cap: int | None, shards: int) -> bool:
    """Whether every one of ``shards`` parts of an in-flight cap is a slot at least."""
    return cap is None or cap >= shards


def per_message(attributes: Attributes, n: int) -> Sequence[bytes | None]:
    """The attributes of each of ``n`` messages (None for each when the batch has none)."""
    return [None] * n if attributes is None else attributes


class Backend(Protocol):
    #: Bytes per body field in the item hash (the server's hash-max-listpack-value).
    field_bytes: int
    #: The WAIT that follows every write (min_replicas).
    replication: Replication
    #: Whether the mode supports message groups (``enqueue_group``).
    groups: bool
    #: Whether its enqueues WATCH across round trips (then the enqueues of several queues
    #: cannot share round trips on one connection: ``roundtrip.together``).
    watched_enqueues: bool
    #: A shard's flow-control scope (None: its own counters and processing, the whole limits).
    flow: FlowScope | None

    def enqueue_one(
        self,
        body: bytes,
        delay_ms: int,
        bucket_ms: int,
        dedup_key: str | None,
        dedup_ms: int,
        attributes: bytes | None = None,
    ) -> Op[Enqueued]: ...

    def enqueue(
        self, bodies: Sequence[bytes], delay_ms: int, bucket_ms: int, attributes: Attributes = None
    ) -> Op[Enqueued]: ...

    def enqueue_group(
        self,
        bodies: Sequence[bytes],
        delay_ms: int,
        bucket_ms: int,
        dedup_key: str | None,
        dedup_ms: int,
        group: str,
        attributes: Attributes = None,
    ) -> Op[Enqueued]: ...

    def enqueue_each(
        self,
        bodies: Sequence[bytes],
        delays_ms: Sequence[int],
        dedup_keys: Sequence[str | None],
        bucket_ms: int,
        dedup_ms: int,
        attributes: Attributes = None,
        enqueued_ms: Sequence[int | None] | None = None,
    ) -> Op[Enqueued]: ...

    def claim(
        self,
        count: int,
        visibility_ms: int,
        bucket_ms: int,
        max_receives: int | None,
        retention_ms: int | None = None,
        counted: bool = False,
    ) -> Op[Claimed]:
        """``counted``: the caller has counted this claim's refusal (a retry of a long-poll held
        back), so a refusal now is not counted again."""

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
    ) -> Op[Claimed]: ...

    def ack(self, pairs: Sequence[tuple[str, str]], bucket_ms: int) -> Op[int]: ...

    def extend(self, msg_id: str, receipt: str, ms: int, bucket_ms: int) -> Op[int | None]: ...

    def release(
        self, msg_id: str, receipt: str, delay_ms: int, bucket_ms: int, error: str | None, unreceive: bool = False
    ) -> Op[bool]: ...

    def dead_letter(self, msg_id: str, receipt: str, reason: str, bucket_ms: int) -> Op[bool]: ...

    def reap_step(
        self,
        bucket_ms: int,
        max_receives: int | None,
        limit: int,
        position: ReapPosition,
        retention_ms: int | None = None,
    ) -> Op[ReapStep]: ...

    def expire_step(
        self,
        retention_ms: int | None,
        dead_retention_ms: int | None,
        bucket_ms: int,
        limit: int,
        position: ExpirePosition,
    ) -> Op[ExpireStep]: ...

    def group_refill(self, groups: Sequence[str]) -> Op[int]:
        """Release the held messages of ``groups`` that group_concurrency has room for now."""
        ...

    def requeue(
        self, source: str, ids: Sequence[str], limit: int, bucket_ms: int, cursor: str = "0"
    ) -> Op[Requeued]: ...

    def purge_step(self, source: str, limit: int, position: tuple[int, str], bucket_ms: int) -> Op[Purged]: ...

    def purge_dead(self, ids: Sequence[str]) -> Op[int]: ...

    def peek(self, source: str, count: int) -> Op[list[Fields]]: ...

    def stats(self) -> Op[Counts]: ...

    # -- schedules: read, then a compare-and-set on the version read ------------------------

    def schedule_get(self, schedule_id: str) -> Op[tuple[int, dict[bytes, bytes]]]:
        """The server time (ms) and the schedule's fields (schedules.unpack; {} when absent);
        the script-free mode WATCHes its keys until the put or fire that follows, or
        ``schedule_done``."""
        ...

    def schedule_done(self) -> Op[None]:
        """Nothing more after a ``schedule_get``."""
        ...

    def schedule_put(
        self,
        schedule_id: str,
        version: str,
        read_score: bytes,
        score: str,
        state: bytes,
        made: tuple[bytes, bytes] | None,
    ) -> Op[bool]:
        """Write a schedule's state, index score and (``made``) definition and body, if its
        version is still ``version`` ('' = no schedule) and its index score still
        ``read_score`` (b'' = none)."""
        ...

    #: Whether the fires of ``schedule_fire_many`` hold only if their schedules were read by
    #: the ``schedule_get_many`` just before (which WATCHes them): then every fire reads first.
    watched_fires: bool

    def schedule_get_many(self, schedule_ids: Sequence[str]) -> Op[list[dict[bytes, bytes]]]:
        """The schedules' fields ({} for one absent), in one round trip."""
        ...

    def schedule_fire_many(self, fires: Sequence[FireCall], bucket_ms: int) -> Op[tuple[list[bool], bool]]:
        """Many fires in one call, each a compare-and-set of its own schedule (the script-free
        mode: of them all at once): which were done (each enqueued its messages), and whether
        the config hash is gone."""
        ...

    def schedule_fire_due(self, limit: int) -> Op[Looked | None]:
        """Look at the first ``limit`` entries of the schedule index and fire, in the same
        call, the due schedules whose fire needs no planning (one fire time of an ``every``
        schedule without jitter: schedule_fire_due.lua); the rest are left to
        ``schedule_fire_many``. None, without I/O, from a backend that fires nothing without
        reading first (the script-free mode): the core looks at the index itself."""
        ...

    def schedule_fire(self, call: FireCall, bucket_ms: int) -> Op[Fired]:
        """One fire of a schedule as read (``FireCall.of_read``), a compare-and-set on that read."""
        ...
