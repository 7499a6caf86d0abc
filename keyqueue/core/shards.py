"""Sharded queues: one logical queue stored as N queues (hash tags ``{NAME#0}`` ...
``{NAME#N-1}``), each with the usual layout, so a cluster spreads one queue over its nodes.
Sharding is routing only: every operation here runs the per-shard operations of QueueCore
(so their scripts and their script-free protocol) and combines what they return. A
message's id names its shard: ``"<shard>#<id in the shard>"``."""

from __future__ import annotations

import logging
import random
import zlib
from typing import Any, Callable, Iterable, Sequence, Union

from ..errors import ConfigurationError, CorruptQueue, InvalidArgument, KeyQueueError, ShardsFound
from ..keys import QueueKeys
from ..settings import QueueSettings
from .backend import FlowScope, cap_parts_ok
from .queue_core import MAKE_ATTEMPTS, QueueCore, batch_args, enqueue_args, not_one
from .replies import error_for, raise_errors, text
from .results import Fields, GroupInfo, QueueStats, RateState, ReapResult
from .roundtrip import Command, Op, together
from .schedules import Schedule
from .sources import peek_source, purge_source, requeue_source

log = logging.getLogger("keyqueue.queue")

#: Separates a sharded message id's shard from its id in the shard (never in a queue name).
SEP = "#"
#: Most shards a queue may have.
MAX_SHARDS = 1024


def check_shards(shards: object) -> int | None:
    """A ``shards=`` argument: None (adopt the stored count) or a whole number >= 1."""
    if shards is None:
        return None
    if isinstance(shards, bool) or not isinstance(shards, int) or not 1 <= shards <= MAX_SHARDS:
        raise InvalidArgument(f"shards must be a whole number from 1 to {MAX_SHARDS}, not {shards!r}")
    return shards


def shard_for(key: str, count: int) -> int:
    """The shard a routing key goes to: CRC32 of its UTF-8 bytes, so every process (any
    language, any Python hash seed) puts a key on the same shard."""
    return zlib.crc32(key.encode("utf-8")) % count


def routing(shard_key: str | None, group: object, dedup_key: str | None) -> str | None:
    """The key a message routes by: its group (so a group's messages stay on one shard, in
    order), else its shard key, else its dedup key (so a repeat meets the first on its
    shard's dedup keys); None: round robin."""
    for key in (group, shard_key, dedup_key):
        if isinstance(key, str):
            return key
    return None


def tag(shard: int, msg_id: str) -> str:
    return f"{shard}{SEP}{msg_id}"


class ShardedCore:
    """The operations of a sharded queue over its shards' QueueCores (``cores``); ``base``
    holds the logical name's own keys: the shard count, the metadata hash."""

    def __init__(
        self,
        keys: QueueKeys,
        count: int,
        make: Callable[[QueueKeys], QueueCore],
        one_node: bool = True,
        locate: Callable[[str], str] | None = None,
        primaries: Callable[[], Sequence[str]] | None = None,
    ) -> None:
        self.name, self.prefix, self.keys = keys.name, keys.prefix, keys
        self.count = count
        self.base = make(keys)
        self.base.expect_shards = count
        self.cores = [make(keys.shard(i)) for i in range(count)]
        processing = [core.keys.processing for core in self.cores]
        for i, core in enumerate(self.cores):
            core.listed_as, core.expect_shards, core.on_lost = keys.name, False, self.lost
            # The limits hold for the logical queue: one server's shards share its window
            # counters and count each other's deliveries; a cluster's (on other nodes) each
            # take their part of every window and of the in-flight cap.
            others = tuple(p for j, p in enumerate(processing) if j != i)
            core.ops.flow = FlowScope(keys, processing=others) if one_node else FlowScope(core.keys, (i, count))
        self.one_node = one_node
        self.replication = self.base.replication
        #: Round robin of single enqueues and rotation of claims: from a random shard, so
        #: short-lived producers do not all start on shard 0.
        self.next = random.randrange(count)
        self.turn = random.randrange(count)
        #: On a cluster: the node (name) of a key, once the client knows the slot map; the
        #: round robin then takes the nodes in turn, and each node's shards in turn, so every
        #: node gets its share of the messages however the shards' slots fell.
        self.locate = locate
        #: On a cluster: its primaries' names (a primary that holds no shard is warned of).
        self.primaries = primaries
        self.by_node: list[list[int]] | None = None
        #: Whether the shards' settings are loaded, and whether the count is known to be
        #: stored (False after ``destroy``: the next write stores it again, a read does not).
        self.made = False
        self.counted = False

    # -- what a face reads of a core ------------------------------------------------------

    @property
    def settings(self) -> QueueSettings | None:
        return self.cores[0].settings if self.made else None

    @property
    def ops(self) -> Any:
        return self.cores[0].ops

    @property
    def limited_until(self) -> float:
        """Held back only while every shard's limits hold it back."""
        return min(core.limited_until for core in self.cores)

    def claimable(self) -> None:
        """Refuse to claim on a cluster while the stored cap leaves some shard no slot (a
        cap written on one server, or by a client that did not check it): those shards'
        messages would wait for ever, with nothing said."""
        settings = self.settings
        cap = settings.max_in_flight if settings is not None else None
        if not self.one_node and not cap_parts_ok(cap, self.count):
            raise ConfigurationError(
                f"queue {self.name!r} has max_in_flight={cap}, below its {self.count} shards on a cluster, where "
                f"each shard holds its part of the cap: set it to {self.count} or more "
                f"(keyqueue config {self.name} --set max_in_flight={self.count})"
            )

    def own(self, message_queue_keys: QueueKeys | None, message_id: str, queue_name: str | None) -> None:
        if message_queue_keys is not None and message_queue_keys != self.keys:
            raise InvalidArgument(f"message {message_id} belongs to queue {queue_name!r}, not {self.name!r}")

    def rotation(self) -> list[int]:
        """The shards in the order the next claim serves them: from a rotating one."""
        start = self.turn
        self.turn = (start + 1) % self.count
        return [(start + i) % self.count for i in range(self.count)]

    def tagged(self, shard: int, fields: list[Fields]) -> list[Fields]:
        return [f._replace(id=tag(shard, f.id)) for f in fields]

    def split(self, msg_id: object) -> tuple[int, str] | None:
        """(shard, id in the shard) of a sharded id; None for an id no shard of this queue has."""
        shard, sep, inner = str(msg_id).partition(SEP)
        if not sep or not shard.isdigit() or int(shard) >= self.count or not inner:
            return None
        return int(shard), inner

    def route(self, msg_id: str) -> tuple[QueueCore, str]:
        where = self.split(msg_id)
        if where is None:
            raise InvalidArgument(f"{msg_id!r} is not an id of sharded queue {self.name!r} ('<shard>{SEP}<id>')")
        return self.cores[where[0]], where[1]

    def by_shard(self, ids: Iterable[object]) -> list[list[str]]:
        """Ids by shard (each shard's in their order); ids of no shard are left out."""
        out: list[list[str]] = [[] for _ in self.cores]
        for i in ids:
            where = self.split(i)
            if where is not None:
                out[where[0]].append(where[1])
        return out

    # -- settings and the shard count -------------------------------------------------------

    def ready(self) -> Op[QueueSettings]:
        if not self.made:
            cap = self.base.wanted.get("max_in_flight")
            if not self.one_node and not cap_parts_ok(cap, self.count):
                raise ConfigurationError(
                    f"max_in_flight={cap} is below the {self.count} shards of queue {self.name!r} on a cluster, "
                    "where each shard holds its part of the cap (one slot at least); nothing was written"
                )
            yield from self.make()
            yield from together([core.ready() for core in self.cores])  # (one round trip a step)
            self.made = self.counted = True
            if self.locate is not None:  # (the client learnt the slot map with these reads)
                nodes = [self.locate(core.keys.seq) for core in self.cores]
                self.by_node = spread_by_node(nodes)
                self.warn_unused(nodes)
        settings = self.cores[0].settings
        assert settings is not None
        return settings

    def warn_unused(self, nodes: Sequence[str]) -> None:
        """A primary none of the shards' slots falls on takes none of the queue's load: say
        so once, where the queue is loaded (the name and the count fix where shards land)."""
        unused = sorted(set(self.primaries()) - set(nodes)) if self.primaries is not None else []
        if unused:
            log.warning(
                "queue %s: its %d shards fall on %d of the cluster's %d primaries, none on %s, which takes none "
                "of its load; more shards (8 per primary reach every one of evenly split slots) or another name would",
                self.name,
                self.count,
                len(set(nodes)),
                len(set(nodes)) + len(unused),
                ", ".join(unused),
            )

    def make(self) -> Op[None]:
        """Fix the count when the queue is first made (and list it); refuse a queue that
        exists with another count, or unsharded, before anything is written. The count is
        stored in a MULTI under the WATCH of the keys an unsharded queue's first writes make
        (its settings, its id counter: ``QueueCore.claim_name``), so of the two made at once
        exactly one is made: the other refuses, or adopts the count."""
        k = self.keys
        watching: list[Command] = []
        for _ in range(MAKE_ATTEMPTS):
            stored, registered, made = (
                yield [
                    *watching,
                    ("GET", k.shards),
                    ("SISMEMBER", k.registry, self.name),
                    ("EXISTS", k.config, k.seq),
                ]
            )[len(watching) :]
            watching = []
            if isinstance(stored, Exception):
                raise error_for(stored, k.shards)
            if stored is None and (registered == 1 or made):
                raise ConfigurationError(
                    f"queue {self.name!r} exists unsharded; it cannot take shards={self.count} (nothing was written)"
                )
            if stored is None:
                _, stored, made = yield [
                    ("WATCH", k.shards, k.config, k.seq),
                    ("GET", k.shards),
                    ("EXISTS", k.config, k.seq),
                ]
                if stored is None and not made:
                    tail = self.replication.tail()
                    _, _, done, *waited = yield [("MULTI",), ("SET", k.shards, self.count, "NX"), ("EXEC",), *tail]
                    if isinstance(done, Exception):
                        raise error_for(done, k.shards)
                    if done is None:
                        continue  # an unsharded queue (or another count) was made meanwhile: look again
                    raise_errors([("SET", k.shards)], done, k.shards)
                    for w in waited:
                        self.replication.check(w)
                    # listed once counted (a name listed without a count reads as unsharded)
                    (listed,) = yield [("SADD", k.registry, self.name)]
                    self.base.registry_ok(listed)
                    return
                watching = [("UNWATCH",)]  # made meanwhile: the next look says how
                continue
            if text(stored) != str(self.count):
                self.base.sharded(stored)
            return
        raise KeyQueueError(f"queue {self.name!r} kept changing while it was made; try again")

    def lost(self) -> Op[None]:
        """A shard found Redis lost its data (or another process destroyed the queue), and
        restores its settings: the count and the name are stored again first, whatever
        operation found it (a running worker's claim finds it before any producer)."""
        self.counted = False
        yield from self.counted_again()

    def counted_again(self) -> Op[None]:
        """Before a write: the count stored again if this Queue destroyed the queue (as an
        unsharded queue's next write makes it again; reading it makes nothing)."""
        if not self.counted:
            yield from self.make()
            self.counted = True

    def refresh_settings(self) -> Op[QueueSettings]:
        yield from together([core.refresh_settings() for core in self.cores])
        settings = self.cores[0].settings
        assert settings is not None
        return settings

    # -- producing ------------------------------------------------------------------------

    def pick(self, routing_key: str | None) -> int:
        """The shard of one message: by its routing key (``routing``), else round robin."""
        if routing_key is not None:
            return shard_for(routing_key, self.count)
        turn = self.next
        self.next = turn + 1
        if self.by_node is None:
            return turn % self.count
        shards = self.by_node[turn % len(self.by_node)]
        return shards[(turn // len(self.by_node)) % len(shards)]

    def enqueue(
        self,
        body: object,
        delay: float,
        dedup_key: str | None,
        attributes: bytes | None = None,
        group: object = None,
        shard_key: str | None = None,
    ) -> Op[str]:
        enqueue_args(body, delay, dedup_key, attributes, shard_key)
        self.cores[0].grouped(group, [])
        shard = self.pick(routing(shard_key, group, dedup_key))
        yield from self.counted_again()
        if dedup_key is not None:
            (shard,) = yield from self.deduplicated([(dedup_key, shard)])
        msg_id = yield from self.cores[shard].enqueue(body, delay, dedup_key, attributes, group, shard_key)
        return tag(shard, msg_id)

    def enqueue_many(
        self,
        bodies: Iterable[object],
        delay: float,
        delays: Sequence[float] | None,
        dedup_keys: Sequence[str | None] | None,
        attributes: Sequence[bytes | None] | None = None,
        enqueued_at: Sequence[float | None] | None = None,
        group: object = None,
        shard_keys: Sequence[str | None] | None = None,
    ) -> Op[list[str]]:
        """The batch split over the shards (by key, else round robin): one call per shard, all
        in one round trip in the scripted mode; every argument is checked first, so a bad one
        writes to no shard."""
        items = batch_args(bodies, delay, delays, dedup_keys, attributes, enqueued_at, shard_keys)[0]
        self.cores[0].grouped(group, [("delays", delays), ("dedup_keys", dedup_keys), ("enqueued_at", enqueued_at)])
        s = yield from self.ready()
        for data in items:
            self.base.fits(data, s)
        yield from self.counted_again()
        per: dict[str, Sequence[Any] | None] = {
            "delays": delays,
            "dedup_keys": dedup_keys,
            "attributes": attributes,
            "enqueued_at": enqueued_at,
            "shard_keys": shard_keys,
        }
        routed = [
            self.pick(
                routing(
                    None if shard_keys is None else shard_keys[j], group, None if dedup_keys is None else dedup_keys[j]
                )
            )
            for j in range(len(items))
        ]
        if dedup_keys is not None:
            keyed = [(j, key) for j, key in enumerate(dedup_keys) if key is not None]
            found = yield from self.deduplicated([(key, routed[j]) for j, key in keyed])
            for (j, _), shard in zip(keyed, found):
                routed[j] = shard
        positions: list[list[int]] = [[] for _ in self.cores]
        for j, shard in enumerate(routed):
            positions[shard].append(j)
        calls = [(shard, where) for shard, where in enumerate(positions) if where]
        ops = []
        for shard, where in calls:
            picked = {n: None if v is None else [v[j] for j in where] for n, v in per.items()}
            ops.append(
                self.cores[shard].enqueue_many(
                    [items[j] for j in where],
                    delay,
                    picked["delays"],
                    picked["dedup_keys"],
                    picked["attributes"],
                    picked["enqueued_at"],
                    group,
                    picked["shard_keys"],
                )
            )
        done: list[list[str]] = []
        if self.cores[0].ops.watched_enqueues:  # (a WATCH per shard: one shard after another)
            for op in ops:
                done.append((yield from op))
        else:  # every shard's call in one round trip
            done = yield from together(ops)
        ids: list[str] = [""] * len(items)
        for (shard, where), got in zip(calls, done):
            for j, msg_id in zip(where, got):
                ids[j] = tag(shard, msg_id)
        return ids

    def deduplicated(self, keyed: Sequence[tuple[str, int]]) -> Op[list[int]]:
        """The shard each message with a dedup key goes to: the one the first message with
        that key went to within the dedup window, whatever routed it (recorded on the shard the
        key hashes to; SET NX, so of two at once both go where the first recorded), else its
        own. There the shard's dedup key finds a repeat. A client dying after the record sends
        the next message with the key to that shard: it is enqueued there, nothing is lost."""
        if not keyed:
            return []
        s = yield from self.ready()
        records = [self.cores[shard_for(key, self.count)].keys.routed(key) for key, _ in keyed]
        commands: list[Command] = []
        for record, (_, shard) in zip(records, keyed):
            commands += [("SET", record, shard, "NX", "PX", s.dedup_ms), ("GET", record)]
        tail = self.replication.tail()
        replies = yield [*commands, *tail]
        for w in replies[len(commands) :]:
            self.replication.check(w)
        out = []
        for record, (_, shard), set_reply, got in zip(records, keyed, replies[0::2], replies[1::2]):
            for reply in (set_reply, got):
                if isinstance(reply, Exception):
                    raise error_for(reply, record)
            if got is not None and not (text(got).isdigit() and int(text(got)) < self.count):
                raise CorruptQueue(record, "holds no shard of the queue")
            out.append(shard if got is None else int(text(got)))
        return out

    def get(self, ids: Iterable[object]) -> Op[list[Fields]]:
        not_one(ids, "ids", "get([id])")
        wanted = [str(i) for i in ids]
        found: dict[str, Fields] = {}
        for shard, inner in enumerate(self.by_shard(wanted)):
            if inner:
                for f in self.tagged(shard, (yield from self.cores[shard].get(inner))):
                    found[f.id] = f
        return [found[i] for i in wanted if i in found]

    # -- consuming (claims run as a plan over the shards: core/multi.py) -----------------

    def reap_if_due(self) -> Op[bool]:
        moved = False
        for core in self.cores:
            moved = (yield from core.reap_if_due()) or moved
        return moved

    def ack(self, pairs: Sequence[tuple[str, str]]) -> Op[int]:
        by_shard: list[list[tuple[str, str]]] = [[] for _ in self.cores]
        for msg_id, receipt in pairs:
            where = self.split(msg_id)
            if where is None:
                self.route(msg_id)  # (raises: not an id of this queue)
                continue
            by_shard[where[0]].append((where[1], receipt))
        done = 0
        for core, own in zip(self.cores, by_shard):
            if own:
                done += yield from core.ack(own)
        return done

    def extend(self, msg_id: str, receipt: str | None, seconds: float) -> Op[int | None]:
        core, inner = self.route(msg_id)
        return (yield from core.extend(inner, receipt, seconds))

    def release(
        self, msg_id: str, receipt: str | None, delay: float, error: str | None, unreceive: bool = False
    ) -> Op[bool]:
        core, inner = self.route(msg_id)
        return (yield from core.release(inner, receipt, delay, error, unreceive))

    def dead_letter(self, msg_id: str, receipt: str | None, reason: str) -> Op[bool]:
        core, inner = self.route(msg_id)
        return (yield from core.dead_letter(inner, receipt, reason))

    # -- flow control (each shard applies the limits to its own claims) --------------------

    def throttle(self, seconds: float) -> Op[float]:
        left = 0.0
        for core in self.cores:
            left = max(left, (yield from core.throttle(seconds)))
        return left

    def throttled(self, msg_id: str, receipt: str | None, seconds: float) -> Op[bool]:
        core, inner = self.route(msg_id)
        yield from self.throttle(seconds)
        return (yield from core.release(inner, receipt, 0.0, None, unreceive=True))

    def rate_state(self) -> Op[RateState]:
        """Shard 0's limits, with the use of every shard (of their shared counter on one server)."""
        states: list[RateState] = []
        for core in self.cores:
            states.append((yield from core.rate_state()))
        first = states[0]
        return RateState(
            first.limit,
            first.interval,
            first.used if self.one_node else sum(s.used for s in states),
            first.resets_in,
            sum(s.in_flight for s in states),
            max(s.throttled_for for s in states),
            first.max_in_flight,
        )

    # -- maintenance ----------------------------------------------------------------------

    def reap(self) -> Op[ReapResult]:
        """Every shard's reap; a corrupt shard is reported after the others were reaped."""
        total = ReapResult()
        broken: CorruptQueue | None = None
        for core in self.cores:
            try:
                total = total + (yield from core.reap())
            except CorruptQueue as exc:
                broken = broken or exc
        if broken is not None:
            raise broken
        return total

    def requeue(self, ids: Iterable[object] | None, source: str, progress: Callable[[int], None] | None) -> Op[int]:
        requeue_source(source)
        if ids is not None:
            not_one(ids, "ids", "requeue([id])")
        groups: Sequence[list[str] | None] = [None] * self.count if ids is None else self.by_shard(ids)
        done = 0
        for core, own in zip(self.cores, groups):
            if own is None or own:
                done += yield from core.requeue(own, source, progress)
        return done

    def purge(
        self, source: str, progress: Callable[[int], None] | None, ids: Iterable[object] | None = None
    ) -> Op[int]:
        source = purge_source(source)
        if ids is not None and source != "dead":
            raise InvalidArgument(f"purge(ids=...) deletes dead letters only: source='dead', not {source!r}")
        if ids is not None:
            not_one(ids, "ids", "purge(ids=[id], source='dead')")
        groups: Sequence[list[str] | None] = [None] * self.count if ids is None else self.by_shard(ids)
        total = 0
        for core, own in zip(self.cores, groups):
            total += yield from core.purge(source, progress, own)
        return total

    def exists(self) -> Op[bool]:
        return (yield from self.base.exists())

    def metadata(self) -> Op[dict[str, str]]:
        return (yield from self.base.metadata())

    def set_metadata(self, values: dict[str, str], remove: Iterable[str]) -> Op[None]:
        yield from self.base.set_metadata(values, remove)

    def destroy(self) -> Op[None]:
        """Every shard's keys, then the logical name's (its count among them) and its name."""
        for core in self.cores:
            yield from core.destroy()
        yield from self.base.destroy()
        self.counted = False

    def forget_dedup_keys(self) -> Op[int]:
        return sum((yield from together([core.forget_dedup_keys() for core in self.cores])))

    # -- schedules: kept on shard 0, whose fires enqueue there ----------------------------

    def schedule(self, *args: Any) -> Op[Schedule]:
        yield from self.counted_again()
        return (yield from self.cores[0].schedule(*args))

    def unschedule(self, schedule_id: object) -> Op[bool]:
        return (yield from self.cores[0].unschedule(schedule_id))

    def set_paused(self, schedule_id: object, paused: bool) -> Op[bool]:
        return (yield from self.cores[0].set_paused(schedule_id, paused))

    def schedules(self) -> Op[list[Schedule]]:
        return (yield from self.cores[0].schedules())

    def fire_schedule(self, schedule_id: object) -> Op[str]:
        return tag(0, (yield from self.cores[0].fire_schedule(schedule_id)))

    # -- reading --------------------------------------------------------------------------

    # (The reads of every shard go together: one round trip on a single server.)

    def length(self) -> Op[int]:
        return sum((yield from together([core.length() for core in self.cores])))

    def counters(self) -> Op[dict[str, int]]:
        total: dict[str, int] = {}
        for one in (yield from together([core.counters() for core in self.cores])):
            for name, n in one.items():
                total[name] = total.get(name, 0) + n
        return total

    def groups(self, count: int, busiest: bool = False) -> Op[list[GroupInfo]]:
        """Every shard's (a group lives on one shard: its messages route by it), merged as
        one queue's: by id, or the busiest first."""
        found = [g for each in (yield from together([c.groups(count, busiest) for c in self.cores])) for g in each]
        if busiest:
            found.sort(key=lambda info: (-(info.held + info.active), info.id))
        else:
            found.sort(key=lambda info: info.id)
        return found[:count]

    def shard_stats(self) -> Op[list[QueueStats]]:
        return (yield from together([core.stats() for core in self.cores]))

    def stats(self) -> Op[QueueStats]:
        return summed((yield from self.shard_stats()))

    def ids(self, source: str) -> Op[list[str]]:
        source = peek_source(source)
        each = yield from together([core.ids(source) for core in self.cores])
        return [tag(shard, i) for shard, ids in enumerate(each) for i in ids]

    def peek(self, count: int, source: str) -> Op[list[Fields]]:
        """Up to ``count`` of each shard, merged by enqueue time (timer for delayed and in
        flight messages; held ones group by group, as one queue gives them: a group is on
        one shard, in its order), and cut to ``count``."""
        found: list[Fields] = []
        each = yield from together([core.peek(count, source) for core in self.cores])
        for shard, fields in enumerate(each):
            found += self.tagged(shard, fields)
        if source == "held":
            found.sort(key=lambda f: f.group or "")  # (stable: each group keeps its order)
        else:
            timed = source in ("delayed", "processing")
            found.sort(key=lambda f: (f.timer_ms or 0) if timed else f.enqueued_ms)
        return found[:count]


def summed(stats: Sequence[QueueStats]) -> QueueStats:
    """The stats of the logical queue: sums, and the oldest age of any shard."""
    ages = [s.oldest_age for s in stats if s.oldest_age is not None]
    return QueueStats(
        sum(s.waiting for s in stats),
        sum(s.processing for s in stats),
        sum(s.delayed for s in stats),
        sum(s.dead for s in stats),
        max(ages) if ages else None,
        sum(s.held for s in stats),
    )


Core = Union[QueueCore, ShardedCore]


def shard_stats(core: Core) -> Op[list[QueueStats]]:
    if isinstance(core, ShardedCore):
        return (yield from core.shard_stats())
    return [(yield from core.stats())]


def spread_by_node(nodes: Sequence[str]) -> list[list[int]]:
    """The shards (indexes) on each node, given each shard's node, nodes in a stable order."""
    by: dict[str, list[int]] = {}
    for shard, node in enumerate(nodes):
        by.setdefault(node, []).append(shard)
    return [by[node] for node in sorted(by)]


def settle_core(core: Core, sharded: Callable[[int], ShardedCore]) -> Op[Core]:
    """The core a Queue runs on, settings loaded: itself, or, when it finds the queue
    sharded (a Queue given no count adopts the stored one), ``sharded(count)``."""
    try:
        yield from core.ready()
        return core
    except ShardsFound as found:
        made = sharded(found.count)
        yield from made.ready()
        return made
