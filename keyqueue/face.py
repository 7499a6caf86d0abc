"""What the blocking and the asyncio Queue share besides the core: building the core and
its backend, binding results to Message objects, and marking what a delivery's holder did.
No I/O here; each face only runs (or awaits) the core's operations."""

from __future__ import annotations

from typing import Any, Callable, Sequence, TypeVar

import redis

from .backends.commands import CommandOps
from .backends.scripted import ScriptOps
from .connection import TRANSIENT, connection_kwargs, resolve_client
from .core import multi
from .core.backend import Backend
from .core.queue_core import QueueCore
from .core.replication import Replication
from .core.results import Fields
from .core.roundtrip import Plan
from .core.shards import Core, ShardedCore, check_shards, settle_core
from .errors import ConfigurationError
from .keys import QueueKeys
from .message import BaseMessage, Message
from .settings import UNSET, QueueSettings, Unset, validate
from .transport.sync import is_cluster


def backend(
    client: Any, keys: QueueKeys, scripting: bool, clock: Callable[[], float] | None, replication: Replication
) -> Backend:
    """The operations of a mode; the script-free mode needs one server (WATCH/MULTI)."""
    if scripting:
        return ScriptOps(keys, clock, replication)
    if is_cluster(client):
        raise ConfigurationError(
            "the script-free mode needs a single Redis server "
            "(WATCH/MULTI on one connection); use the scripted mode on a cluster"
        )
    return CommandOps(keys, clock, replication)


def socket_timeout(client: Any) -> float | None:
    t = connection_kwargs(client).get("socket_timeout")
    return float(t) if isinstance(t, (int, float)) and t > 0 else None


Q = TypeVar("Q", bound="QueueFace")


def one_connection(clients: Sequence[Any]) -> bool:
    """Whether one BLPOP can watch all their signal lists (same client, no cluster)."""
    first = clients[0]
    if is_cluster(first):
        return len(clients) == 1
    return all(c is first for c in clients)


def claim_any_plan(
    queues: Sequence[Q], count: int, visibility_timeout: float | None, wait: float, poll_first: bool
) -> Plan[tuple[Q | None, list[Any]]]:
    """Claim from the first non-empty of ``queues`` (see ``keyqueue.queue.claim_any``), the
    messages bound to the queue they came from; each face's transport runs it. A sharded
    queue takes part as its shards, from a rotating one."""
    targets: list[tuple[Any, QueueCore]] = []
    owners: list[tuple[Q, int | None]] = []
    unsettled: list[Exception] = []
    for q in queues:
        if q._core.settings is None:
            try:
                q._core = yield q.client, settle_core(q._core, q._sharded)
            except TRANSIENT as exc:  # (out of reach: the others are served, it next time)
                if len(queues) == 1:
                    raise
                unsettled.append(exc)
                continue
        core = q._core
        if isinstance(core, ShardedCore):
            core.claimable()
            poll_first = True  # (the first target is another shard each time)
            for i in core.rotation():
                targets.append((q.client, core.cores[i]))
                owners.append((q, i))
        else:
            targets.append((q.client, core))
            owners.append((q, None))
    if not targets:
        raise unsettled[0]
    index, fields = yield from multi.claim_any(
        targets, count, visibility_timeout, wait, poll_first, one_connection([c for c, _ in targets])
    )
    switched = [q._noticed() for q in queues]  # (a queue sharded since: served as its shards)
    if index is None:
        if any(switched):
            return (yield from claim_any_plan(queues, count, visibility_timeout, 0.0, True))
        return None, []
    q, where = owners[index]
    if where is not None:
        assert isinstance(q._core, ShardedCore)
        fields = q._core.tagged(where, fields)
    return q, q._bind(fields)


def claim_shards_plan(q: QueueFace, count: int, visibility_timeout: float | None, wait: float) -> Plan[list[Any]]:
    """A sharded queue's claim: the first shard with messages, from a rotating one
    (long-polling every shard), then the shards after it while ``count`` is not reached."""
    core = q._core
    assert isinstance(core, ShardedCore)
    core.claimable()
    order = core.rotation()
    targets = [(q.client, core.cores[i]) for i in order]
    index, fields = yield from multi.claim_any(
        targets, count, visibility_timeout, wait, True, one_connection([q.client] * len(targets))
    )
    if index is None:
        return []
    got = core.tagged(order[index], fields)
    for i in order[index + 1 :]:
        if len(got) >= count:
            break
        try:
            more = yield q.client, core.cores[i].claim(count - len(got), visibility_timeout, 0.0)
        except TRANSIENT:
            break  # (what was claimed is returned: the shard out of reach is claimed next time)
        got += core.tagged(i, more)
    return q._bind(got)


class QueueFace:
    """The parts of a Queue that do not depend on how round trips are sent."""

    #: Whether its operations are awaited (keyqueue.aio.Queue): a worker serves one kind.
    awaited = False

    client: Any
    scripting: bool
    message_class: type[BaseMessage] = Message

    #: redis.Redis or redis.asyncio.Redis: the client a URL is turned into.
    client_class: Any = redis.Redis

    def __init__(
        self,
        name: str,
        *,
        client: Any = None,
        url: str | None = None,
        prefix: str = "kq",
        visibility_timeout: float | Unset = UNSET,
        max_receives: int | None | Unset = UNSET,
        bucket_seconds: float | Unset = UNSET,
        max_body_bytes: int | Unset = UNSET,
        dedup_window: float | Unset = UNSET,
        retention: float | None | Unset = UNSET,
        dead_retention: float | None | Unset = UNSET,
        rate_limit: str | tuple[int, float] | None | Unset = UNSET,
        max_in_flight: int | None | Unset = UNSET,
        group_concurrency: int | Unset = UNSET,
        scripting: bool = True,
        clock: Callable[[], float] | None = None,
        min_replicas: int = 0,
        replica_timeout: float = 1.0,
        shards: int | None = None,
    ) -> None:
        given = dict(
            visibility_timeout=visibility_timeout,
            max_receives=max_receives,
            bucket_seconds=bucket_seconds,
            max_body_bytes=max_body_bytes,
            dedup_window=dedup_window,
            retention=retention,
            dead_retention=dead_retention,
            rate_limit=rate_limit,
            max_in_flight=max_in_flight,
            group_concurrency=group_concurrency,
        )
        given = {k: v for k, v in given.items() if v is not UNSET}
        keys = QueueKeys.checked(prefix, name)  # the arguments are checked before the URL is read
        validate(QueueSettings(), given)
        count = check_shards(shards)
        replication = Replication.of(min_replicas, replica_timeout)
        self.scripting = scripting
        self._owns_client = client is None
        self.client = resolve_client(client, url, self.client_class)
        timeout = socket_timeout(self.client)

        def make(keys: QueueKeys) -> QueueCore:
            return QueueCore(keys, given, backend(self.client, keys, scripting, clock, replication), timeout)

        self._make_core = make
        self._core: Core
        if count is None or count == 1:
            self._core = make(keys)
            self._core.expect_shards = count
        else:
            self._core = self._sharded(count, keys)
        self._made()

    def _sharded(self, count: int, keys: QueueKeys | None = None) -> ShardedCore:
        """This queue's core once it is found sharded (``Queue(NAME)`` adopts the count)."""
        cluster = is_cluster(self.client)
        client = self.client

        def locate(key: str) -> str:
            return str(client.get_node_from_key(key).name)

        def primaries() -> list[str]:
            return [str(node.name) for node in client.get_primaries()]

        if not cluster:
            return ShardedCore(keys or self.keys, count, self._make_core)
        return ShardedCore(keys or self.keys, count, self._make_core, False, locate, primaries)

    def _noticed(self) -> bool:
        """Turn sharded if the last operation read a count stored since this Queue loaded
        (its settings load from the shards at its next operation). True when it did."""
        core = self._core
        if isinstance(core, QueueCore) and core.found_shards:
            self._core = self._sharded(core.found_shards)
            return True
        return False

    @property
    def shards(self) -> int:
        """The queue's shard count (1: unsharded), as far as known: a Queue given no count
        learns a stored one when its settings load."""
        return self._core.count if isinstance(self._core, ShardedCore) else 1

    def _made(self) -> None:
        """What a face does once built (the blocking Queue loads its settings; the asyncio
        one does no I/O until first use)."""

    @property
    def name(self) -> str:
        return self._core.name

    @property
    def min_replicas(self) -> int:
        return self._core.replication.replicas

    @property
    def replica_timeout(self) -> float:
        return self._core.replication.timeout_ms / 1000

    @property
    def prefix(self) -> str:
        return self._core.prefix

    @property
    def keys(self) -> QueueKeys:
        return self._core.keys

    @property
    def _ops(self) -> Any:
        return self._core.ops

    def _bind(self, fields: list[Fields], with_receipt: bool = True) -> list[Any]:
        return [self.message_class.of(f, self, with_receipt) for f in fields]

    def _own(self, message: BaseMessage) -> None:
        q = message.queue
        self._core.own(None if q is None or q is self else q.keys, message.id, getattr(q, "name", None))

    def _pairs(self, messages: Sequence[BaseMessage]) -> tuple[list[BaseMessage], list[tuple[str, str]]]:
        """The messages that carry a receipt (checked to be this queue's), with their pairs."""
        for m in messages:
            if m.queue is not self:  # (its own: nothing to check, on the hot path of every ack)
                self._own(m)
        owned = [m for m in messages if m.receipt is not None]
        return owned, [(m.id, m.receipt) for m in owned]  # type: ignore[misc]

    @staticmethod
    def _mark(messages: Sequence[BaseMessage], what: str) -> None:
        """Record what was done to these deliveries (a Worker takes a handler at its word)."""
        for m in messages:
            if m.receipt is not None:
                m.settled = what

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, prefix={self.prefix!r})"
