"""Every queue operation, written once: argument checks, settings, which backend operation
to run, and what to do with its result. Each method returns an operation (a generator of
round trips); ``keyqueue.Queue`` runs it on a blocking client, ``keyqueue.aio.Queue`` on
asyncio. Nothing here sends or awaits anything.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any, Callable, Iterable, Sequence

from ..errors import (
    ConfigurationError,
    CorruptQueue,
    InvalidArgument,
    InvalidSchedule,
    KeyQueueError,
    MessageTooLarge,
    ShardsFound,
    UnknownSchedule,
)
from ..keys import QueueKeys, registry_key, validate_prefix
from ..settings import SETTING_NAMES, QueueSettings, seconds_arg, validate, whole_number
from .backend import Backend, FireCall
from .replies import FIELD, error_for, fields_of, hash_reply, item_fields, ok, raise_errors, scored, text
from .results import (
    EXPIRE_START,
    START,
    Claimed,
    Enqueued,
    ExpirePosition,
    Fields,
    GroupInfo,
    Looked,
    QueueStats,
    RateState,
    ReapPosition,
    ReapResult,
)
from .roundtrip import Command, Op, Sleep, together, transaction
from .schedules import (
    Definition,
    Fire,
    Known,
    Schedule,
    check_id,
    definition,
    next_fire_ms,
    pack_state,
    plan_fire,
    schedule_raws,
    schedule_reads,
    score,
    stored,
)
from .sources import PEEK_SOURCES, one_of, peek_source, purge_source, requeue_source

#: The exact totals of the counters hash, kept by the operations in the change they count.
COUNTER_NAMES = ("enqueued", "acked", "redelivered", "dead_lettered", "expired", "scheduled", "throttled")

log = logging.getLogger("keyqueue.queue")

#: Ids examined per script call by reap and purge, so Redis is never blocked long.
BATCH = 500
#: Ids one expiry step examines: smaller than BATCH, so that a sweep through a large expired
#: backlog holds Redis under a millisecond at a time and other queues' claims slip between.
EXPIRE_BATCH = 100
#: Seconds of each reap spent on the ordered ends of the sweep (the head of the FIFO, where
#: the oldest wait, and the head of the dead list): a huge expired backlog is deleted over
#: several reaps, and a Worker, which reaps between its heartbeats, is never held up long.
EXPIRE_SECONDS = 0.2
#: Steps of each reap spent scanning every waiting and delayed message (for those released
#: behind younger ones): the scan resumes at the next reap, so a backlog of up to
#: EXPIRE_SCAN_STEPS * EXPIRE_BATCH messages is scanned whole at every reap and a larger one
#: over several, at a bounded cost each.
EXPIRE_SCAN_STEPS = 20
#: Requeue does more per id (reset fields, move, drop timers): smaller calls, same bound.
REQUEUE_BATCH = 250
#: Longest single BLPOP of a long-poll; an idle waiter costs Redis one BLPOP and one claim per period.
WAIT_SLICE = 2.0
#: Seconds between the reaps a Queue's claims make (and Workers make) of its queue.
REAP_INTERVAL = 1.0
#: Ids one claim-time reap examines at most: a backlog is reaped over the following claims.
CLAIM_REAP_LIMIT = 500
#: Most bytes (UTF-8) a message's last_error keeps, the mark of a cut included: a traceback
#: or a huge exception text must not grow every item hash it fails on.
MAX_ERROR_BYTES = 4096
#: Ends a cut last_error.
CUT = "\u2026"
#: Schedules read per look at the head of the schedule index, and fired by one call (a
#: script, or a MULTI): a call of this many holds Redis a few milliseconds at most.
FIRE_BATCH = 200
#: Seconds a reap goes on looking at the schedule index while full batches of due schedules
#: remain (claim-time reaping takes one look): many due at once are fired in one reap, and
#: a reap still ends.
FIRE_SECONDS = 1.0
#: Schedules whose last read a Queue keeps to fire them without reading them again (a
#: larger queue of schedules is read again as it fires).
FIRE_KNOWN = 100_000
#: Seconds between the looks a claiming Queue takes at the schedule index while it knows no
#: schedule to fall due sooner (a schedule another process adds is found this late): one
#: small read per period, a long-poll's slice, for a queue without schedules.
SCHEDULE_POLL = WAIT_SLICE
#: Most message groups ``groups(busiest=True)`` compares (the first ones by id).
BUSIEST_LOOK = 10_000
#: Compare-and-set attempts of a schedule operation whose schedule keeps changing.
SCHEDULE_ATTEMPTS = 10
#: Attempts at making a queue (its first writes, or its shard count) while another process
#: makes it differently.
MAKE_ATTEMPTS = 10
#: Tries of a look's fires in the script-free mode, whose WATCH covers the hashes every
#: schedule of the queue shares: a burst of other schedules' writes (a deploy upserting
#: thousands) undoes its MULTI again and again, and a fire left to the next look would come
#: late, or count missed.
FIRE_ATTEMPTS_WATCHED = 50
#: Groups one call of a group_concurrency raise's refill looks at (at most).
GROUP_REFILL_CHUNK = 200
#: The upserted schedules a restore checks when nothing else was found lost (a rotating
#: sample), and those it checks in one round trip once one was.
RESTORE_SAMPLE = 100
RESTORE_CHUNK = 1000
#: Compare-and-set attempts of a throttle whose key keeps changing (others throttling too).
THROTTLE_ATTEMPTS = 10
#: Longest sleep of a claimer its limits hold back before it claims again: a slot that
#: max_in_flight waits for frees when a delivery is settled (which signals nobody), and a
#: limit lifted or changed elsewhere (keyqueue config) applies, within about this long, at
#: one claim per period. A window or a throttle that ends sooner is waited for exactly.
HELD_BACK_POLL = 1.0


def not_one(values: object, what: str, instead: str) -> None:
    """A str or bytes where an iterable of them is expected is one value, not many."""
    if isinstance(values, (str, bytes, bytearray, memoryview)):
        raise TypeError(
            f"{what} must be an iterable (a list), not one {type(values).__name__}; for one value use {instead}"
        )


def field_bytes(limits: Any) -> int:
    """Bytes per body field: the server's hash-max-listpack-value (CONFIG GET reply, RESP2 or
    RESP3), so a body kept in a few fields leaves its hash compact; FIELD when the server
    does not say (CONFIG not allowed, as on managed Redis) or says something unusable."""
    values = hash_reply(limits).values() if not isinstance(limits, Exception) else ()
    sizes = [int(v) for v in values if text(v).isdigit()]
    size = min(sizes, default=FIELD)
    return size if 16 <= size <= 65536 else FIELD


def to_bytes(body: object) -> bytes:
    """A body as bytes: str is encoded UTF-8; anything else is the built-in TypeError."""
    if isinstance(body, str):
        return body.encode("utf-8")
    if isinstance(body, (bytes, bytearray, memoryview)):
        return bytes(body)
    raise TypeError(f"a message body must be bytes or str, not {type(body).__name__}")


def check_attributes(values: Iterable[object]) -> None:
    """Attributes are opaque bytes (or None): the core stores them, a surface reads them."""
    for a in values:
        if a is not None and not isinstance(a, bytes):
            raise TypeError(f"message attributes must be bytes or None, not {type(a).__name__}")


def enqueued_ms(at: object) -> int | None:
    """An ``enqueued_at`` entry (epoch seconds, or None for now) in ms."""
    if at is None:
        return None
    if isinstance(at, bool) or not isinstance(at, (int, float)) or not 0 <= at <= 1e11:
        raise InvalidArgument(f"each enqueued_at must be epoch seconds or None, not {at!r}")
    return int(at * 1000)


def batch_args(
    bodies: Iterable[object],
    delay: float,
    delays: Sequence[float] | None,
    dedup_keys: Sequence[str | None] | None,
    attributes: Sequence[bytes | None] | None,
    enqueued_at: Sequence[float | None] | None,
    shard_keys: Sequence[str | None] | None,
) -> tuple[list[bytes], int, list[int] | None, list[int | None] | None]:
    """An ``enqueue_many``'s arguments checked before any I/O (a bad one writes nothing):
    the bodies as bytes, the delay and each message's (ms), each enqueue time (ms)."""
    not_one(bodies, "bodies", "enqueue(body)")
    raw = [to_bytes(b) for b in bodies]
    delay_ms = seconds_arg("delay", delay)
    if attributes is not None:
        not_one(attributes, "attributes", "enqueue(body, attributes=...)")
        check_attributes(attributes)
    since = None if enqueued_at is None else [enqueued_ms(t) for t in enqueued_at]
    for name, per in (
        ("delays", delays),
        ("dedup_keys", dedup_keys),
        ("attributes", attributes),
        ("enqueued_at", enqueued_at),
        ("shard_keys", shard_keys),
    ):
        if per is not None and len(per) != len(raw):
            raise InvalidArgument(f"{name} has {len(per)} entries for {len(raw)} bodies")
    each_ms = None if delays is None else [seconds_arg("delay", d) for d in delays]
    for key in dedup_keys or ():
        check_dedup_key("each dedup key", key)
    for key in shard_keys or ():
        check_dedup_key("each shard key", key)
    return raw, delay_ms, each_ms, since


def enqueue_args(
    body: object, delay: float, dedup_key: object, attributes: object, shard_key: object
) -> tuple[bytes, int]:
    """An ``enqueue``'s arguments checked before any I/O: the body as bytes, the delay (ms)."""
    data = to_bytes(body)
    delay_ms = seconds_arg("delay", delay)
    check_dedup_key("dedup_key", dedup_key)
    check_dedup_key("shard_key", shard_key)
    check_attributes([attributes])
    return data, delay_ms


def check_dedup_key(what: str, key: object) -> None:
    if key is not None and (not isinstance(key, str) or not key):
        raise InvalidArgument(f"{what} must be a non-empty str or None, not {key!r}")


#: Longest message group id.
MAX_GROUP = 128


def check_group(group: object) -> str | None:
    """A message group: None, or 1 to MAX_GROUP printable ASCII characters without spaces
    (letters, digits, punctuation: what SQS takes as a MessageGroupId)."""
    if group is None:
        return None
    if not (
        isinstance(group, str)
        and 1 <= len(group) <= MAX_GROUP
        and group.isascii()
        and group.isprintable()  # (ASCII: "!" to "~", and the space, refused below)
        and " " not in group
    ):
        raise InvalidArgument(
            f"group must be a str of 1 to {MAX_GROUP} printable ASCII characters without spaces, not {group!r}"
        )
    return group


def bounded_error(error: str) -> str:
    """``error`` if it fits MAX_ERROR_BYTES, else its start cut on a character boundary and
    ending with CUT."""
    if len(error) <= MAX_ERROR_BYTES // 4:  # (at most 4 bytes a character: fits)
        return error
    data = error.encode("utf-8", "surrogatepass")
    if len(data) <= MAX_ERROR_BYTES:
        return error
    end = MAX_ERROR_BYTES - len(CUT.encode())
    while data[end] & 0xC0 == 0x80:  # a continuation byte: the character starts before it
        end -= 1
    return data[:end].decode("utf-8", "surrogatepass") + CUT


class QueueCore:
    """The state one Queue object keeps (its settings, registration, claim-time reaping)
    and its operations. ``ops`` is the backend: ScriptOps or CommandOps."""

    def __init__(
        self, keys: QueueKeys, given: dict[str, Any], ops: Backend, socket_timeout: float | None = None
    ) -> None:
        self.name, self.prefix, self.keys = keys.name, keys.prefix, keys
        self.wanted = dict(given)
        self.given = validate(QueueSettings(), given).to_hash(set(given))
        self.ops = ops
        self.socket_timeout = socket_timeout
        #: WAIT after writes (min_replicas): the backend's.
        self.replication = ops.replication
        self.settings: QueueSettings | None = None
        #: The config fields this Queue restores if the hash vanishes: those it was given or
        #: found when it loaded (never defaults it merely fell back to).
        self.held: dict[str, str] = {}
        self.registered = False
        self.restored_at = -math.inf
        #: Claim-time reaping (monotonic times): the last reap, when the earliest timer falls
        #: due (every claim reply says; 0 = unknown, so the first claim reaps), and where a
        #: reap cut short goes on.
        self.last_reap = -math.inf
        self.due_at = 0.0
        self.reap_position: ReapPosition = START
        #: Where the scan part of the expiry sweep goes on at the next reap (None: from the start).
        self.scan_position: ExpirePosition | None = None
        #: Tests and benchmarks only: False turns claim-time reaping off.
        self.claim_reaping = True
        #: Schedules (monotonic times): the next look at the schedule index a claim takes,
        #: and the earliest fire time known (a long-poll wakes for it).
        self.fire_at = 0.0
        self.fire_wake = math.inf
        #: The schedules this Queue upserted (definition, body, anchor ms), written again
        #: when Redis lost them.
        self.upserted: dict[str, tuple[Definition, bytes, int]] = {}
        #: Where the next sample of them checked by ``restore_schedules`` starts.
        self.restore_cursor = 0
        #: What this Queue last read or wrote of each schedule it fires (version, stored next
        #: fire, paused, definition, anchor ms): a fire is a compare-and-set on all but the
        #: pause (a schedule made again may reach the same version and next fire), so one
        #: that is out of date changes nothing and is read again.
        self.known: dict[str, Known] = {}
        #: Flow control (monotonic time): until when the last claim's limits hold claims back
        #: (a long-poll or a worker sleeps until then instead of polling).
        self.limited_until = 0.0
        self.refused = False  # the last claim's limits held messages back
        #: Whether its last claim among several queues' failed for an outage of its node (a
        #: claim of several queues serves the others meanwhile, and says so once).
        self.out_of_reach = False
        #: The name the registry lists this queue under (a shard's: its logical queue's).
        self.listed_as = keys.name
        #: The shard count this Queue was given: None adopts a stored one (the Queue turns
        #: sharded), 1 refuses it; False: a shard itself, which has no count of its own.
        self.expect_shards: int | None | bool = None
        #: A count stored since this Queue (given none) loaded, read with a reap or a
        #: claim's look at the schedules: the face turns the Queue sharded.
        self.found_shards: int | None = None
        #: A shard's: run when it finds Redis lost its data, whatever found it (a claim, a
        #: reap, a write): its logical queue stores its count and name again, in that order,
        #: before the name can read as unsharded.
        self.on_lost: Callable[[], Op[None]] | None = None

    # -- settings and registration ------------------------------------------------------

    def ready(self) -> Op[QueueSettings]:
        """The settings in force, loading them first if that has not happened yet."""
        if self.settings is None:
            yield from self.load_settings()
        assert self.settings is not None
        return self.settings

    def load_settings(self) -> Op[None]:
        """Read the config hash and write the values this Queue was given (last writer
        wins); log which values in force the given ones changed. A Queue that may find the
        queue sharded writes them only while no count was stored since it looked (WATCH), so
        of it and a sharded Queue made at once, one wins and the other adopts or refuses."""
        k = self.keys
        guard: list[Command] = [("WATCH", k.shards)] if self.given and self.expect_shards is not False else []
        for _ in range(MAKE_ATTEMPTS):
            stored_raw, registered, limits, *count = (
                yield [
                    *guard,
                    ("HGETALL", k.config),
                    ("SISMEMBER", k.registry, self.listed_as),
                    ("CONFIG", "GET", "hash-max-*-value"),
                    *self.counts(),
                ]
            )[len(guard) :]
            if count and count[0] is not None:  # a sharded queue: adopted, or refused before any write
                self.sharded(count[0])
            if isinstance(stored_raw, Exception):
                raise error_for(stored_raw, k.config)
            self.ops.field_bytes = field_bytes(limits)
            stored = hash_reply(stored_raw)
            self.registered = self.registry_ok(registered) and registered == 1
            current = parse_settings(k.config, stored)
            if not self.given:
                break
            flat = [x for pair in self.given.items() for x in pair]
            if guard:
                if (yield from self.claim_name([("HSET", k.config, *flat)])):
                    self.registered = True
                    break
                continue  # the count was stored meanwhile: read again
            reply, *waited = yield [("HSET", k.config, *flat), *self.replication.tail()]
            if isinstance(reply, Exception):
                raise error_for(reply, k.config)
            for w in waited:
                self.replication.check(w)
            yield from self.register()
            break
        else:
            raise KeyQueueError(f"queue {self.name!r} kept changing while its settings were written; try again")
        if self.given:
            changed = [
                f"{name} {stored[name.encode()].decode() or 'none'} -> {value or 'none'}"
                for name, value in self.given.items()
                if name.encode() in stored and stored[name.encode()].decode() != value
            ]
            if changed:
                log.info("queue %s: changed %s in its config hash", self.name, ", ".join(changed))
        settings = validate(current, self.wanted)
        self.held = settings.to_hash({f.decode() for f in stored} & SETTING_NAMES | set(self.given))
        self.settings = settings
        if "group_concurrency" in self.given and settings.group_concurrency > current.group_concurrency:
            released = yield from self.refill_groups()
            if released:
                log.info("queue %s: released %d held messages (group_concurrency raised)", self.name, released)

    def refill_groups(self) -> Op[int]:
        """Release the held messages every group has room for under a raised group_concurrency
        (one script call per chunk of groups, each atomic: a crash between them leaves the
        rest to their groups' next ends, or to ``check --repair``)."""
        k = self.keys
        cursor, released = "0", 0
        while True:
            (reply,) = yield [("HSCAN", k.groups, cursor, "COUNT", GROUP_REFILL_CHUNK)]
            if isinstance(reply, Exception):
                raise error_for(reply, k.groups)
            cursor, flat = text(reply[0]), reply[1]
            names = [text(name) for name in flat[::2]]
            if names:
                released += yield from self.ops.group_refill(names)
            if cursor == "0":
                return released

    def sharded(self, reply: object) -> None:
        """The queue is sharded (``reply``: its stored count): a Queue given no count adopts
        it (ShardsFound: the face rebuilds itself sharded), one given shards=1 is refused."""
        if isinstance(reply, Exception) or not text(reply).isdigit():
            raise error_for(reply, self.keys.shards) if isinstance(reply, Exception) else CorruptQueue(self.keys.shards)
        count = int(text(reply))
        if self.expect_shards is None:
            raise ShardsFound(count)
        raise ConfigurationError(
            f"queue {self.name!r} has {count} shards, not {self.expect_shards}; nothing was written"
        )

    def counts(self) -> list[Command]:
        """The read of the shard count that goes with another round trip (none for a shard)."""
        return [] if self.expect_shards is False else [("GET", self.keys.shards)]

    def notice(self, count: list[Any], adopt: bool) -> None:
        """A count read with another round trip (``counts``): the queue was sharded after this
        Queue loaded. ``adopt``: raise ShardsFound now (nothing written yet: the face runs the
        operation again sharded); else noted for the face, once this operation ends."""
        if not count or count[0] is None:
            return
        try:
            self.sharded(count[0])
        except ShardsFound as found:
            if adopt:
                raise
            self.found_shards = found.count

    def refresh_settings(self) -> Op[QueueSettings]:
        """Re-read the config hash (the reaper does this every pass). A hash that vanished
        keeps the settings held until a write restores it, rather than falling to defaults."""
        raw, *count = yield [("HGETALL", self.keys.config), *self.counts()]
        self.notice(count, adopt=True)
        if isinstance(raw, Exception):
            raise error_for(raw, self.keys.config)
        stored = hash_reply(raw)
        if not stored and self.held and self.settings is not None:
            return self.settings
        self.settings = parse_settings(self.keys.config, stored)
        self.held = self.settings.to_hash({f.decode() for f in stored} & SETTING_NAMES)
        return self.settings

    def register(self) -> Op[None]:
        """Record the name for ``keyqueue ls`` and reapers of every queue, on first write."""
        if self.registered:
            return
        if self.expect_shards is False:  # a shard: its logical queue's name
            (reply,) = yield [("SADD", self.keys.registry, self.listed_as)]
            self.registry_ok(reply)
        else:
            for _ in range(MAKE_ATTEMPTS):
                _, count = yield [("WATCH", self.keys.shards), *self.counts()]
                self.notice([count], adopt=True)  # (sharded since it loaded: written to the shards instead)
                if (yield from self.claim_name([("SET", self.keys.seq, 0, "NX")], replicated=False)):
                    break
            else:
                raise KeyQueueError(f"queue {self.name!r} kept changing while it was made; try again")
        self.registered = True

    def claim_name(self, writes: Sequence[Command], replicated: bool = True) -> Op[bool]:
        """The first writes of an unsharded queue (its settings, or its id counter), in one
        MULTI under the WATCH of the shard count, with its registration: False (nothing
        written) when a sharded Queue stored a count meanwhile. A sharded Queue being made
        WATCHes these keys in turn, so of the two made at once exactly one is made.
        ``replicated``: followed by the WAIT of min_replicas (settings are; the id counter,
        like the registration, is not: the first enqueue's own WAIT covers it)."""
        k = self.keys
        tail = self.replication.tail() if replicated else []
        listed, _, *queued = yield [("SADD", k.registry, self.listed_as), ("MULTI",), *writes, ("EXEC",), *tail]
        done = queued[len(writes)]
        if isinstance(done, Exception):
            raise error_for(done, k.config)
        if done is None:
            return False
        raise_errors(writes, done, k.base)
        for w in queued[len(writes) + 1 :]:
            self.replication.check(w)
        self.registry_ok(listed)
        return True

    def registry_ok(self, reply: object) -> bool:
        """False (logged) when the registry, shared by every queue, holds the wrong type:
        registering is a side effect, so a broken registry must not stop this queue."""
        if not isinstance(reply, Exception):
            return True
        log.error(
            "queue %s: cannot register: %s (keyqueue ls and reapers of every queue miss it until the key is fixed)",
            self.name,
            error_for(reply, self.keys.registry),
        )
        return False

    def restore(self) -> Op[None]:
        """A write found the config hash gone (Redis lost its data: a restart without
        persistence, a FLUSHDB, a failover to an empty replica). Write back the settings this
        Queue runs with and its registration, so ``keyqueue ls``, reapers of every queue and
        other processes find it again. HSETNX: a value another process wrote since wins. At
        most once a second (a queue with no settings to restore reports it on every write).
        A Queue that never knew the queue to exist (a claim on a name nobody wrote) restores
        nothing: reading a queue must not create it."""
        now = time.monotonic()
        if now - self.restored_at < 1.0 or not (self.held or self.registered):
            return
        self.restored_at = now
        k = self.keys
        commands: list[Command] = [("HSETNX", k.config, name, value) for name, value in self.held.items()]
        # A shard's name is its logical queue's, listed again only once its count is stored.
        listing: list[Command] = [] if self.on_lost is not None else [("SADD", k.registry, self.listed_as)]
        if self.on_lost is not None:
            yield from self.on_lost()
        replies = yield [*commands, *listing]
        for reply in replies[: len(commands)]:
            if isinstance(reply, Exception):
                raise error_for(reply, k.config)
        added = replies[-1] if listing and self.registry_ok(replies[-1]) else 0
        self.registered = True
        restored = [name for name, n in zip(self.held, replies) if n == 1]
        yield from self.restore_schedules(lost=added == 1 or bool(restored))
        if added == 1 or restored:
            log.warning(
                "queue %s: %s missing from Redis (data lost?); restored%s",
                self.name,
                "its registration and settings were" if restored else "its registration was",
                f" {', '.join(f'{n}={self.held[n]}' for n in restored)}" if restored else "",
            )

    def restore_schedules(self, lost: bool) -> Op[None]:
        """Write back the schedules this Queue upserted that Redis lost. A queue without
        settings of its own has no config hash, so this runs once a second while it is
        written to: unless the registration or settings were found lost too, it checks a
        rotating sample of them (RESTORE_SAMPLE), and all of them once one is missing."""
        sids = list(self.upserted)
        if not sids:
            return
        if not lost and len(sids) > RESTORE_SAMPLE:
            start = self.restore_cursor % len(sids)
            self.restore_cursor = start + RESTORE_SAMPLE
            sample = [sids[(start + i) % len(sids)] for i in range(RESTORE_SAMPLE)]
            if not (yield from self.put_missing(sample)):
                return
        for chunk in range(0, len(sids), RESTORE_CHUNK):
            yield from self.put_missing(sids[chunk : chunk + RESTORE_CHUNK])

    def put_missing(self, sids: Sequence[str]) -> Op[int]:
        """Write back those of ``sids`` missing from the schedule state (one round trip to
        find them); how many were."""
        there = yield [("HEXISTS", self.keys.schedule_state, sid) for sid in sids]
        missing = [sid for sid, found in zip(sids, there) if found != 1]
        for sid in missing:
            entry = self.upserted.get(sid)  # (None: unscheduled since, by another thread of this Queue)
            if entry is not None:
                yield from self.put_schedule(sid, *entry, absent_only=True)
        return len(missing)

    def _after(self, config_missing: bool) -> Op[None]:
        if config_missing:
            yield from self.restore()

    # -- producing ------------------------------------------------------------------------

    def fits(self, data: bytes, settings: QueueSettings) -> bytes:
        if len(data) > settings.max_body_bytes:
            raise MessageTooLarge(
                f"message body of {len(data)} bytes exceeds max_body_bytes="
                f"{settings.max_body_bytes} of queue {self.name!r}"
            )
        return data

    def grouped(self, group: object, alone: Iterable[tuple[str, object]]) -> str | None:
        """``group`` checked, and that this mode and the other arguments given allow it."""
        g = check_group(group)
        if g is None:
            return None
        for name, value in alone:
            if value is not None:
                raise InvalidArgument(f"{name} cannot be given with group")
        if not self.ops.groups:
            raise ConfigurationError(
                "message groups need the scripted mode: the script-free mode does not release a "
                "group's next message in the same atomic step that ends the current one"
            )
        return g

    def enqueue(
        self,
        body: object,
        delay: float,
        dedup_key: str | None,
        attributes: bytes | None = None,
        group: object = None,
        shard_key: str | None = None,
    ) -> Op[str]:
        data, delay_ms = enqueue_args(body, delay, dedup_key, attributes, shard_key)
        g = self.grouped(group, [])
        s = yield from self.ready()
        self.fits(data, s)
        yield from self.register()
        done: Enqueued
        if g is not None:
            a = None if attributes is None else [attributes]
            done = yield from self.ops.enqueue_group([data], delay_ms, s.bucket_ms, dedup_key, s.dedup_ms, g, a)
        else:
            done = yield from self.ops.enqueue_one(data, delay_ms, s.bucket_ms, dedup_key, s.dedup_ms, attributes)
        yield from self._after(done.config_missing)
        return done.ids[0]

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
        raw, delay_ms, each_ms, since = batch_args(
            bodies, delay, delays, dedup_keys, attributes, enqueued_at, shard_keys
        )
        g = self.grouped(
            group,
            [("delays", delays), ("dedup_keys", dedup_keys), ("enqueued_at", enqueued_at)],
        )
        s = yield from self.ready()
        data = [self.fits(b, s) for b in raw]
        if not data:
            return []
        yield from self.register()
        if g is not None:
            done: Enqueued = yield from self.ops.enqueue_group(
                data, delay_ms, s.bucket_ms, None, s.dedup_ms, g, attributes
            )
        elif each_ms is None and dedup_keys is None and since is None:
            done = yield from self.ops.enqueue(data, delay_ms, s.bucket_ms, attributes)
        else:
            done = yield from self.ops.enqueue_each(
                data,
                each_ms or [delay_ms] * len(data),
                list(dedup_keys or [None] * len(data)),
                s.bucket_ms,
                s.dedup_ms,
                attributes,
                since,
            )
        yield from self._after(done.config_missing)
        return done.ids

    def get(self, ids: Iterable[object]) -> Op[list[Fields]]:
        not_one(ids, "ids", "get([id])")
        wanted = [str(i) for i in ids]
        if not wanted:
            return []
        replies = yield [("HGETALL", self.keys.item(i)) for i in wanted]
        out = []
        for i, raw in zip(wanted, replies):
            if isinstance(raw, Exception):
                raise error_for(raw, self.keys.item(i))
            if raw:
                out.append(fields_of(i, item_fields(raw)))
        return out

    # -- consuming ------------------------------------------------------------------------

    def visibility_ms(self, visibility_timeout: float | None, s: QueueSettings) -> int:
        if visibility_timeout is None:
            return s.visibility_ms
        return seconds_arg("visibility_timeout", visibility_timeout, allow_zero=False)

    def claim(
        self, count: int, visibility_timeout: float | None, wait: float, counted: bool = False
    ) -> Op[list[Fields]]:
        """Up to ``count`` messages; ``wait`` long-polls, waking also when a reap may be due
        (expiring and due delayed messages signal nobody). A claim its limits refuse is
        counted once (``throttled``), however often its long-poll tries again, and not at
        all when ``counted`` (its caller's earlier try was)."""
        whole_number("count", count, 1)
        if visibility_timeout is not None:
            seconds_arg("visibility_timeout", visibility_timeout, allow_zero=False)
        wait_ms = seconds_arg("wait", wait)
        s = yield from self.ready()
        vis_ms = self.visibility_ms(visibility_timeout, s)
        deadline = time.monotonic() + wait_ms / 1000.0
        yield from self.reap_if_due()
        got = yield from self.claim_now(count, vis_ms, counted)
        counted = counted or self.refused
        while not got:
            now = time.monotonic()
            remaining = deadline - now
            if remaining <= 0 or self.found_shards:  # (found sharded: the face claims from the shards)
                return []
            if (yield from self.reap_if_due()):
                got = yield from self.claim_now(count, vis_ms, counted)
            elif self.limited_until > now:  # held back: sleep until the limit may let one through
                yield from self.held_back(min(remaining, self.limited_until - now))
                got = yield from self.claim_now(count, vis_ms, counted)
            else:
                wake = max(min(self.next_reap(), self.fire_wake) - now, 0.01)
                got = yield from self.wait_then_claim(
                    [self.keys.signal], min(remaining, wake), count, visibility_timeout, counted
                )
            counted = counted or self.refused
        return got

    def claim_now(self, count: int, vis_ms: int, counted: bool = False) -> Op[list[Fields]]:
        s = yield from self.ready()
        done: Claimed = yield from self.ops.claim(count, vis_ms, s.bucket_ms, s.max_receives, s.retention_ms, counted)
        return (yield from self.took(done))

    def wait_then_claim(
        self,
        signals: Sequence[str],
        seconds: float,
        count: int,
        visibility_timeout: float | None,
        counted: bool = False,
    ) -> Op[list[Fields]]:
        """BLPOP on ``signals`` (this queue's among them) for one slice, then claim here."""
        s = yield from self.ready()
        vis_ms = self.visibility_ms(visibility_timeout, s)
        done: Claimed = yield from self.ops.wait_then_claim(
            signals, self.slice(seconds), count, vis_ms, s.bucket_ms, s.max_receives, s.retention_ms, counted
        )
        return (yield from self.took(done))

    def held_back(self, seconds: float) -> Op[None]:
        """Sleep while the queue's limits refuse claims (no polling meanwhile)."""
        log.debug("queue %s: claims held back by its limits; sleeping %.3fs", self.name, seconds)
        yield Sleep(max(seconds, 0.001))

    def took(self, done: Claimed) -> Op[list[Fields]]:
        """A claim's messages; its reply also says when the earliest timer falls due, and
        whether the queue's limits held it back."""
        ms = done.next_timer_ms
        mono = time.monotonic()
        self.due_at = math.inf if ms is None else mono + ms / 1000.0
        limited = done.limited_ms
        self.refused = limited is not None  # (the claim was counted as refused, or would have been)
        if limited is None:
            self.limited_until = 0.0
        else:
            self.limited_until = mono + (HELD_BACK_POLL if limited < 0 else min(limited / 1000.0, HELD_BACK_POLL))
        yield from self._after(done.config_missing)
        return done.messages

    def slice(self, seconds: float) -> float:
        """One blocking wait: at most WAIT_SLICE, and well inside the client's socket timeout."""
        timeout = min(seconds, WAIT_SLICE)
        if self.socket_timeout:
            timeout = min(timeout, self.socket_timeout / 2)
        return max(timeout, 0.01)

    def next_reap(self) -> float:
        return max(self.last_reap + REAP_INTERVAL, self.due_at)

    def reap_if_due(self) -> Op[bool]:
        """One bounded reap step when a timer may have fallen due and the last reap is
        REAP_INTERVAL old (a reap cut short goes on at the next call). This is how a consumer
        that only claims gets expired and due delayed messages back without a Reaper; it
        costs nothing while no timer is due. True when it moved a message."""
        now = time.monotonic()
        if not self.claim_reaping:
            return False
        fired = (yield from self.fire_due(0.0)) > 0 if now >= self.fire_at else False
        if now < self.next_reap():
            return fired
        s = yield from self.ready()
        # (No expiry sweep here: with retention set a claim costs no more round trips. The claim
        # deletes the expired messages it meets, this step those it finds at their timer.)
        step = yield from self.ops.reap_step(
            s.bucket_ms, s.max_receives, CLAIM_REAP_LIMIT, self.reap_position, s.retention_ms
        )
        # Corrupt keys (step.broken) are left for reap() and the Reaper to report.
        if step.done:
            self.reap_position, self.last_reap = START, now
        else:
            self.reap_position = step.position
        yield from self._after(step.config_missing)
        return step.moved.total > 0 or fired

    def own(self, message_queue_keys: QueueKeys | None, message_id: str, queue_name: str | None) -> None:
        if message_queue_keys is not None and message_queue_keys != self.keys:
            raise InvalidArgument(f"message {message_id} belongs to queue {queue_name!r}, not {self.name!r}")

    def ack(self, pairs: Sequence[tuple[str, str]]) -> Op[int]:
        if not pairs:
            return 0
        s = yield from self.ready()
        return (yield from self.ops.ack(pairs, s.bucket_ms))

    def extend(self, msg_id: str, receipt: str | None, seconds: float) -> Op[int | None]:
        ms = seconds_arg("seconds", seconds)
        if receipt is None:
            return None
        s = yield from self.ready()
        return (yield from self.ops.extend(msg_id, receipt, ms, s.bucket_ms))

    def release(
        self, msg_id: str, receipt: str | None, delay: float, error: str | None, unreceive: bool = False
    ) -> Op[bool]:
        delay_ms = seconds_arg("delay", delay)
        if receipt is None:
            return False
        s = yield from self.ready()
        bounded = None if error is None else bounded_error(error)
        return (yield from self.ops.release(msg_id, receipt, delay_ms, s.bucket_ms, bounded, unreceive))

    # -- flow control -----------------------------------------------------------------------

    def throttled(self, msg_id: str, receipt: str | None, seconds: float) -> Op[bool]:
        """A handler's ``Throttle``: the queue throttled first (so no delivery starts in its
        seconds), then the message given back at once with its receive taken back."""
        yield from self.throttle(seconds)
        return (yield from self.release(msg_id, receipt, 0.0, None, unreceive=True))

    def server_ms(self) -> Op[int]:
        clock = getattr(self.ops, "clock", None)
        if clock is not None:
            return round(clock() * 1000)
        ((sec, usec),) = yield [("TIME",)]
        return int(sec) * 1000 + int(usec) // 1000

    def throttle(self, seconds: float) -> Op[float]:
        """No claim of the queue succeeds for ``seconds`` from now (a longer throttle already
        set is kept): the throttle key holds its end (server ms) and expires then. Returns
        the seconds the queue is now throttled for."""
        ms = seconds_arg("seconds", seconds, allow_zero=False)
        k = self.keys
        for _ in range(THROTTLE_ATTEMPTS):
            now = yield from self.server_ms()
            until = now + ms
            _, kind, current = yield [("WATCH", k.throttle), ("TYPE", k.throttle), ("GET", k.throttle)]
            if text(kind) not in ("none", "string") or (current is not None and not text(current).isdigit()):
                yield [("UNWATCH",)]
                raise CorruptQueue(k.throttle)
            if current is not None and int(current) >= until:
                yield [("UNWATCH",)]
                return (int(current) - now) / 1000.0
            if (yield from transaction([("SET", k.throttle, until, "PX", ms)], self.replication)) is not None:
                log.debug("queue %s: throttled for %.3fs", self.name, ms / 1000.0)
                return ms / 1000.0
        raise KeyQueueError(f"the throttle of queue {self.name!r} kept changing; try again")

    def rate_state(self) -> Op[RateState]:
        """The limits in force (read from the config hash, as every claim does) and their use."""
        k = self.keys
        now = yield from self.server_ms()
        limits, throttle, held = yield [
            ("HMGET", k.config, "rate_limit", "max_in_flight"),
            ("GET", k.throttle),
            ("SCARD", k.processing),
        ]
        for reply, key in ((limits, k.config), (throttle, k.throttle), (held, k.processing)):
            if isinstance(reply, Exception):
                raise error_for(reply, key)
        s = parse_settings(
            k.config, {name.encode(): v for name, v in zip(("rate_limit", "max_in_flight"), limits) if v is not None}
        )
        if throttle is not None and not text(throttle).isdigit():
            raise CorruptQueue(k.throttle, "holds a throttle time that is not a number")
        throttled_for = max(0, int(throttle) - now) / 1000.0 if throttle is not None else 0.0
        if s.rate is None:
            return RateState(None, None, 0, None, int(held), throttled_for, s.max_in_flight)
        limit, window = s.rate
        w = now // window
        counted = k.rate(w) if self.ops.flow is None else self.ops.flow.keys.rate(w)
        (used,) = yield [("GET", counted)]
        if isinstance(used, Exception) or used is not None and not text(used).lstrip("-").isdigit():
            raise CorruptQueue(counted)
        return RateState(
            limit,
            window / 1000.0,
            max(int(used or 0), 0),
            ((w + 1) * window - now) / 1000.0,
            int(held),
            throttled_for,
            s.max_in_flight,
        )

    def dead_letter(self, msg_id: str, receipt: str | None, reason: str) -> Op[bool]:
        if receipt is None:
            return False
        s = yield from self.ready()
        return (yield from self.ops.dead_letter(msg_id, receipt, bounded_error(str(reason)), s.bucket_ms))

    # -- maintenance ----------------------------------------------------------------------

    def reap(self) -> Op[ReapResult]:
        """Redeliver expired messages and release due delayed ones, in bounded batches; with
        retention or dead_retention set, then sweep for what outlived them."""
        s = yield from self.ready()
        total = ReapResult()
        position = START
        broken: list[str] = []
        missing = False
        while True:
            step = yield from self.ops.reap_step(s.bucket_ms, s.max_receives, BATCH, position, s.retention_ms)
            total = total + step.moved
            broken += step.broken
            missing = missing or step.config_missing
            position = step.position
            if step.done:
                break
        self.last_reap, self.reap_position = time.monotonic(), START
        if s.retention_ms or s.dead_retention_ms:
            total = total + ReapResult(expired=(yield from self.expire(s)))
        yield from self._after(missing)
        yield from self.fire_due(FIRE_SECONDS)
        if broken:
            raise CorruptQueue(broken[0], f"holds the wrong type (reaped the rest: {total})")
        return total

    def expire(self, s: QueueSettings) -> Op[int]:
        """A bounded part of the expiry sweep: the head of the FIFO and of the dead list (where
        the oldest are) for up to EXPIRE_SECONDS, then, once the head holds no expired
        backlog, EXPIRE_SCAN_STEPS steps of the scan of every waiting and delayed message,
        which the next reap resumes."""
        started = time.monotonic()
        expired = 0

        def in_time() -> bool:
            return time.monotonic() - started < EXPIRE_SECONDS

        def run(position: ExpirePosition, goes_on: Callable[[ExpirePosition], bool]) -> Op[ExpirePosition]:
            nonlocal expired
            while True:
                step = yield from self.ops.expire_step(
                    s.retention_ms, s.dead_retention_ms, s.bucket_ms, EXPIRE_BATCH, position
                )
                expired += step.expired
                position = step.position
                if step.done or not goes_on(position):
                    return position

        head = EXPIRE_START
        if s.retention_ms:
            head = yield from run(EXPIRE_START, lambda p: p[0] == "head" and in_time())
        if s.dead_retention_ms:
            yield from run(("dead", "0", 0), lambda p: in_time())
        # (While the head still holds an expired backlog, the scan would only meet it there.)
        if s.retention_ms and head[0] != "head":
            taken = 0

            def scanning(p: ExpirePosition) -> bool:
                nonlocal taken
                taken += 1
                return p[0] in ("waiting", "delayed") and taken < EXPIRE_SCAN_STEPS

            scan = yield from run(self.scan_position or ("waiting", "0", 0), scanning)
            self.scan_position = scan if scan[0] in ("waiting", "delayed") else None
        return expired

    def requeue(self, ids: Iterable[object] | None, source: str, progress: Callable[[int], None] | None) -> Op[int]:
        source = requeue_source(source)
        if ids is not None:
            not_one(ids, "ids", "requeue([id])")
        s = yield from self.ready()
        done = 0
        if ids is not None:
            wanted = [str(i) for i in ids]
            for i in range(0, len(wanted), REQUEUE_BATCH):
                r = yield from self.ops.requeue(source, wanted[i : i + REQUEUE_BATCH], REQUEUE_BATCH, s.bucket_ms)
                done += r.requeued
                if progress:
                    progress(r.requeued)
            return done
        # Everything that was in the source when we started, in batches: dead letters from
        # the head of their list, in-flight ids by one SSCAN pass over processing.
        key = self.keys.dead if source == "dead" else self.keys.processing
        (size,) = yield [("LLEN" if source == "dead" else "SCARD", key)]
        if isinstance(size, Exception):
            raise error_for(size, key)
        budget, cursor = int(size), "0"
        while budget > 0:
            r = yield from self.ops.requeue(source, [], min(REQUEUE_BATCH, budget), s.bucket_ms, cursor)
            budget -= r.examined
            done += r.requeued
            cursor = r.cursor
            if progress:
                progress(r.requeued)
            if source == "dead" and r.examined == 0 or source == "processing" and cursor == "0":
                break
        return done

    def purge(
        self, source: str, progress: Callable[[int], None] | None, ids: Iterable[object] | None = None
    ) -> Op[int]:
        source = purge_source(source)
        if ids is not None:
            return (yield from self.purge_dead(source, ids, progress))
        s = yield from self.ready()
        sources = ("waiting", "delayed", "dead", "processing") if source == "all" else (source,)
        total = 0
        for src in sources:
            position: tuple[int, str] = (0, "0")
            done = False
            while not done:
                step = yield from self.ops.purge_step(src, BATCH, position, s.bucket_ms)
                position, done = step.position, step.done
                total += step.count
                if progress and step.count:
                    progress(step.count)
        return total

    def purge_dead(self, source: str, ids: Iterable[object], progress: Callable[[int], None] | None) -> Op[int]:
        """Delete these dead letters (ids no longer dead are left alone): how a message
        moved elsewhere (the SQS API's redrive to a dead-letter queue) leaves this queue."""
        if source != "dead":
            raise InvalidArgument(f"purge(ids=...) deletes dead letters only: source='dead', not {source!r}")
        not_one(ids, "ids", "purge(ids=[id], source='dead')")
        wanted = list(dict.fromkeys(str(i) for i in ids))
        total = 0
        for i in range(0, len(wanted), BATCH):
            n = yield from self.ops.purge_dead(wanted[i : i + BATCH])
            total += n
            if progress and n:
                progress(n)
        return total

    # -- schedules ------------------------------------------------------------------------

    def schedule(
        self,
        schedule_id: object,
        cron: object,
        every: object,
        body: object,
        tz: object,
        start: object,
        end: object,
        jitter: object,
        catch_up: object,
        misfire_grace: object,
    ) -> Op[Schedule]:
        """Upsert: an identical schedule changes nothing; a changed one takes effect now."""
        sid = check_id(schedule_id)
        d = definition(
            cron=cron,
            every=every,
            tz=tz,
            start=start,
            end=end,
            jitter=jitter,
            catch_up=catch_up,
            misfire_grace=misfire_grace,
        )
        data = to_bytes(body)
        s = yield from self.ready()
        self.fits(data, s)
        yield from self.register()
        made = yield from self.put_schedule(sid, d, data, None)
        assert made is not None
        return made

    def put_schedule(
        self, sid: str, d: Definition, data: bytes, anchor: int | None, absent_only: bool = False
    ) -> Op[Schedule | None]:
        """Write a schedule unless it is already so (``absent_only``: unless it exists), as a
        compare-and-set on the version read, so upserts at once never mix."""
        dump = d.dump()
        for _ in range(SCHEDULE_ATTEMPTS):
            now, raw = yield from self.ops.schedule_get(sid)
            if raw and absent_only:
                yield from self.ops.schedule_done()
                return None
            readable = b"a" in raw and b"v" in raw  # (a state the fsck calls bad is written again)
            if readable and raw.get(b"d") == dump.encode() and raw.get(b"b", b"") == data:
                yield from self.ops.schedule_done()
                made = self.decoded(sid, raw)
                self.upserted[sid] = (d, data, int(raw[b"a"]))
                return made
            a = int(raw[b"a"]) if b"a" in raw else now if anchor is None else anchor
            nxt = next_fire_ms(d, a, now)
            version = text(raw.get(b"v", b""))
            merged = {**raw, b"d": dump.encode(), b"b": data, b"a": str(a).encode()}
            merged[b"v"] = str(int(version or 0) + 1).encode()
            merged.pop(b"n", None)
            if nxt is not None:
                merged[b"n"] = str(nxt).encode()
            paused = raw.get(b"p") == b"1"
            state = pack_state(merged)
            if absent_only and sid not in self.upserted:  # unscheduled meanwhile: not written back
                yield from self.ops.schedule_done()
                return None
            put = self.ops.schedule_put(
                sid, version, raw.get(b"i", b""), score(nxt, paused), state, (dump.encode(), data)
            )
            if (yield from put):
                self.upserted[sid] = (d, data, a)
                self.fire_at = 0.0
                return self.decoded(sid, merged)
        raise KeyQueueError(f"schedule {sid!r} of queue {self.name!r} kept changing while it was written; try again")

    def unschedule(self, schedule_id: object) -> Op[bool]:
        sid = check_id(schedule_id)
        self.upserted.pop(sid, None)
        self.known.pop(sid, None)
        k = self.keys
        commands: list[Command] = [
            ("HDEL", k.schedule_state, sid),
            ("HDEL", k.schedule_defs, sid),
            ("HDEL", k.schedule_bodies, sid),
            ("ZREM", k.schedules, sid),
        ]
        replies = yield from transaction(commands, self.replication)
        raise_errors(commands, replies or [], self.keys.schedules)
        return bool(replies and replies[0])

    def set_paused(self, schedule_id: object, paused: bool) -> Op[bool]:
        """Pause or resume: False for an unknown id. A resumed schedule fires next at its first
        fire time after now (what passed while it was paused is not caught up)."""
        sid = check_id(schedule_id)
        for _ in range(SCHEDULE_ATTEMPTS):
            now, raw = yield from self.ops.schedule_get(sid)
            if not raw or (raw.get(b"p") == b"1") == paused:
                yield from self.ops.schedule_done()
                return bool(raw)
            version = text(raw.get(b"v", b""))
            changed = {**raw, b"p": b"1" if paused else b"0", b"v": str(int(version or 0) + 1).encode()}
            nxt = None if b"n" not in raw else int(raw[b"n"])
            if not paused:
                nxt = next_fire_ms(Definition.load(raw[b"d"]), int(raw[b"a"]), now)
            changed.pop(b"n", None)
            if nxt is not None:
                changed[b"n"] = str(nxt).encode()
            put = self.ops.schedule_put(sid, version, raw.get(b"i", b""), score(nxt, paused), pack_state(changed), None)
            if (yield from put):
                self.fire_at = 0.0
                return True
        raise KeyQueueError(f"schedule {sid!r} of queue {self.name!r} kept changing; try again")

    def schedules(self) -> Op[list[Schedule]]:
        k = self.keys
        (ids,) = yield [("ZRANGE", k.schedules, 0, -1)]
        if isinstance(ids, Exception):
            raise error_for(ids, k.schedules)
        names = sorted(text(i) for i in ids)
        if not names:
            return []
        reads = schedule_reads(k, names)
        replies = yield reads
        raise_errors(reads, replies, k.schedule_state)
        return [self.decoded(sid, raw) for sid, raw in zip(names, schedule_raws(replies)) if raw]

    def decoded(self, sid: str, raw: dict[bytes, bytes]) -> Schedule:
        try:
            return stored(sid, raw)
        except (KeyError, ValueError, TypeError):
            raise CorruptQueue(self.keys.schedule_state, f"holds a schedule keyqueue cannot read ({sid})") from None

    def fire_schedule(self, schedule_id: object) -> Op[str]:
        """One message now; the schedule's next fire, interval and pause stay as they are."""
        sid = check_id(schedule_id)
        s = yield from self.ready()
        for _ in range(SCHEDULE_ATTEMPTS):
            now, raw = yield from self.ops.schedule_get(sid)
            if not raw:
                yield from self.ops.schedule_done()
                raise UnknownSchedule(f"queue {self.name!r} has no schedule {sid!r}")
            nxt = None if b"n" not in raw else int(raw[b"n"])
            call = FireCall.of_read(sid, raw, nxt, score(nxt, raw.get(b"p") == b"1"), 0, [(now, now)])
            fired = yield from self.ops.schedule_fire(call, s.bucket_ms)
            if fired.done:
                yield from self._after(fired.config_missing)
                return fired.ids[0]
        raise KeyQueueError(f"schedule {sid!r} of queue {self.name!r} kept changing; try again")

    def fire_due(self, seconds: float) -> Op[int]:
        """Fire the due schedules: the messages enqueued. Looks at the head of the index go on
        while each finds a full batch due and fires some of it, for up to ``seconds`` (one
        look at least). Each fire is a compare-and-set, or made in the call that read the
        schedule, so any number of processes may do this."""
        s = yield from self.ready()
        total = 0
        soonest = math.inf  # ms from now to the earliest fire time known
        until = time.monotonic() + seconds
        timed = False  # (the core's own look) whether the server's time comes with it
        counted = bool(self.counts())  # the first look also reads the shard count
        while True:
            # A queue without schedules costs one call; the backend's look fires the due
            # schedules that need no planning, here the rest are planned and fired. (A Queue
            # that claims or reaps learns a shard count stored since it loaded, at no round trip.)
            if counted:
                counted = False
                both: list[Op[Any]] = [self._looked(timed), self.read_count()]
                (looked, timed), count = yield from together(both)
                self.notice([count], adopt=False)
            else:
                looked, timed = yield from self._looked(timed)
            if looked.soonest is not None:
                soonest = min(soonest, looked.soonest - looked.now)
            before = total
            total += looked.fired
            left = looked.left
            fired = (yield from self.fire_many(left, looked.now, s.bucket_ms)) if left else []
            for n, nxt in fired:
                total += n
                if nxt is not None:
                    soonest = min(soonest, nxt - looked.now)
            # (no progress: the rest is another firer's, or cannot be fired: left to the next reap)
            progress = total > before
            full = looked.looked >= FIRE_BATCH and looked.fired + len(left) >= FIRE_BATCH
            if not full or not progress or time.monotonic() >= until:
                break
        mono = time.monotonic()
        self.fire_wake = mono + max(soonest, 0) / 1000.0
        self.fire_at = min(mono + SCHEDULE_POLL, self.fire_wake)
        return total

    def _looked(self, timed: bool) -> Op[tuple[Looked, bool]]:
        """One look at the schedule index: the backend's (which fires what needs no
        planning), or the core's own."""
        looked = yield from self.ops.schedule_fire_due(FIRE_BATCH)
        if looked is None:
            return (yield from self._look(timed))
        yield from self._after(looked.config_missing)
        return looked, timed

    def read_count(self) -> Op[Any]:
        """The shard count as stored (None: unsharded), to go with another round trip."""
        (reply,) = yield self.counts()
        return reply

    def _look(self, timed: bool) -> Op[tuple[Looked, bool]]:
        """The head of the schedule index read here, nothing fired (a backend whose fires all
        read first): its due entries all left to fire_many. The clock is read only when the
        index holds something that may be due (and with the looks after the first)."""
        k = self.keys
        clock = getattr(self.ops, "clock", None)
        look: list[Command] = [("ZRANGE", k.schedules, 0, FIRE_BATCH - 1, "WITHSCORES")]
        raw, *tm = yield look + [("TIME",)] if timed else look
        if isinstance(raw, Exception):
            raise error_for(raw, k.schedules)
        pairs = [(text(m), sc) for m, sc in scored(raw)]
        if not pairs or pairs[0][1] == math.inf:
            return Looked(0, 0, None, len(pairs), [], False), timed
        if clock is not None:
            now = round(clock() * 1000)
        else:
            ((sec, usec),) = tm or (yield [("TIME",)])
            now = int(sec) * 1000 + int(usec) // 1000
        due = [(sid, sc) for sid, sc in pairs if sc <= now]
        later = [int(sc) for _, sc in pairs if now < sc < math.inf]
        return Looked(now, 0, later[0] if later else None, len(pairs), due, False), True

    def known_of(self, sid: str, raw: dict[bytes, bytes]) -> Known | None:
        """A schedule's hash as read, kept for its next fires (None: gone or unreadable)."""
        self.known.pop(sid, None)
        if not raw:
            return None
        try:
            nxt = None if b"n" not in raw else int(raw[b"n"])
            dump = raw[b"d"]
            known = Known(text(raw[b"v"]), nxt, raw.get(b"p") == b"1", Definition.load(dump), dump, int(raw[b"a"]))
        except (KeyError, ValueError, TypeError, InvalidSchedule):
            log.error("queue %s: schedule %s cannot be read (keyqueue check reports it); not fired", self.name, sid)
            return None
        if len(self.known) >= FIRE_KNOWN:
            self.known.clear()
        self.known[sid] = known
        return known

    def plan_known(self, sid: str, known: Known, now: int) -> tuple[Fire | None, int | None]:
        nxt = known.next_ms
        if known.paused or nxt is None or nxt > now:
            return None, None if known.paused else nxt
        try:
            return plan_fire(sid, known.d, known.anchor_ms, nxt, now), None
        except (KeyError, ValueError, TypeError, InvalidSchedule):
            log.error("queue %s: schedule %s cannot be read (keyqueue check reports it); not fired", self.name, sid)
            return None, None

    def fire_many(self, due: Sequence[tuple[str, float]], now: int, bucket_ms: int) -> Op[list[tuple[int, int | None]]]:
        """The fires of due schedules (id, index score), in one call (a script, or a MULTI
        whose WATCH covers them all). A schedule is read first (all in one round trip)
        unless this Queue's last read or fire of it matches the index and the backend's
        compare-and-set needs no WATCH; a fire lost to another firer or a change is read and
        tried again once, then left to the next look (the index says whether it is still
        due): (0, now) stands for it. With a WATCH, which any change of any schedule of the
        queue undoes, they are tried again up to FIRE_ATTEMPTS_WATCHED times."""
        out: dict[str, tuple[int, int | None]] = {}
        todo = [(sid, sc) for sid, sc in due]
        watched = self.ops.watched_fires
        for _ in range(FIRE_ATTEMPTS_WATCHED if watched else 2):
            unread = [sid for sid, sc in todo if watched or not self.fresh(sid, sc)]
            read: dict[str, dict[bytes, bytes]] = {}
            if unread:
                read = dict(zip(unread, (yield from self.ops.schedule_get_many(unread))))
                for sid, raw in read.items():
                    self.known_of(sid, raw)
            calls: list[tuple[str, Known, Fire]] = []
            alike: dict[tuple[Definition, int, int | None], tuple[Fire | None, int | None]] = {}
            for sid, _ in todo:
                known = self.known.get(sid)
                if known is None:
                    plan, nxt = None, None
                elif known.d.jitter_ms:
                    plan, nxt = self.plan_known(sid, known, now)
                else:  # schedules alike (one definition, one next fire) fire alike: planned once
                    anchor = known.anchor_ms if known.d.start_ms is None else 0  # (unused with a start)
                    same = (known.d, anchor, None if known.paused else known.next_ms)
                    if same not in alike:
                        alike[same] = self.plan_known(sid, known, now)
                    plan, nxt = alike[same]
                out[sid] = (0, nxt)
                if plan is not None and known is not None:
                    calls.append((sid, known, plan))
            done, missing = yield from self.ops.schedule_fire_many(
                [
                    FireCall(
                        sid,
                        k.version,
                        score(k.next_ms, k.paused),
                        k.dump,
                        k.anchor_ms,
                        p.next_ms,
                        score(p.next_ms, False),
                        p.missed,
                        k.d.every_ms,
                        p.messages,
                        read[sid] if watched else {},
                    )
                    for sid, k, p in calls
                ],
                bucket_ms,
            )
            for sid in [sid for sid, raw in read.items() if not raw]:  # (after the fire: it ends its WATCH)
                yield from self.drop_stale(sid)
            yield from self._after(missing)
            todo = []
            for (sid, known, plan), fired in zip(calls, done):
                if fired:
                    out[sid] = (len(plan.messages), plan.next_ms)
                    self.known[sid] = known.fired(plan.next_ms)
                else:
                    out[sid] = (0, now)
                    self.known.pop(sid, None)
                    todo.append((sid, math.nan))
            if not todo:
                break
        return [out[sid] for sid, _ in due]

    def fresh(self, sid: str, index_score: float) -> bool:
        """Whether this Queue's last read or fire of a schedule still holds as far as the index
        tells (the compare-and-set of its fire finds out for sure)."""
        known = self.known.get(sid)
        return known is not None and not known.paused and known.next_ms == index_score

    def drop_stale(self, sid: str) -> Op[None]:
        """Take an id whose schedule is gone out of the index, unless it came back meanwhile."""
        key = self.keys.schedule_state
        exists = (yield [("WATCH", key), ("HEXISTS", key, sid)])[1]
        if exists:
            yield [("UNWATCH",)]
            return
        yield from transaction([("ZREM", self.keys.schedules, sid)])

    # -- a surface's own data about the queue ----------------------------------------------

    def exists(self) -> Op[bool]:
        """Whether the queue is registered (made with settings, or written to)."""
        (reply,) = yield [("SISMEMBER", self.keys.registry, self.listed_as)]
        if isinstance(reply, Exception):
            raise error_for(reply, self.keys.registry)
        return bool(reply)

    def metadata(self) -> Op[dict[str, str]]:
        """The queue's metadata hash: values a surface keeps about the queue (the SQS API's
        attributes and tags), which keyqueue itself never reads."""
        (raw,) = yield [("HGETALL", self.keys.meta)]
        if isinstance(raw, Exception):
            raise error_for(raw, self.keys.meta)
        return {text(k): text(v) for k, v in hash_reply(raw).items()}

    def set_metadata(self, values: dict[str, str], remove: Iterable[str]) -> Op[None]:
        """Write and remove metadata fields, atomically (one MULTI/EXEC)."""
        gone = [str(f) for f in remove]
        commands: list[Command] = []
        if gone:
            commands.append(("HDEL", self.keys.meta, *gone))
        if values:
            commands.append(("HSET", self.keys.meta, *(x for pair in values.items() for x in pair)))
        if not commands:
            return
        replies = yield from transaction(commands, self.replication)
        raise_errors(commands, replies or [], self.keys.meta)

    def destroy(self) -> Op[None]:
        """Delete every key of the queue and its name."""
        yield from self._unlink_matching(self.keys.pattern)
        (reply,) = yield [("SREM", self.keys.registry, self.listed_as)]
        if isinstance(reply, Exception):
            raise error_for(reply, self.keys.registry)
        self.registered, self.held = False, {}

    def forget_dedup_keys(self) -> Op[int]:
        """Delete the queue's deduplication records (a sharded queue's shard also keeps where
        each key went): a dedup key used before then enqueues anew. How many went."""
        return (yield from self._unlink_matching(self.keys.dedup("*"))) + (
            yield from self._unlink_matching(self.keys.routed("*"))
        )

    def _unlink_matching(self, pattern: str) -> Op[int]:
        """UNLINK the keys a SCAN pass finds by ``pattern``, in batches: how many went."""
        cursor, gone = "0", 0
        while True:
            (reply,) = yield [("SCAN", cursor, "MATCH", pattern, "COUNT", 1000)]
            cursor, found = text(reply[0]), list(reply[1])
            for i in range(0, len(found), BATCH):
                (n,) = yield [("UNLINK", *found[i : i + BATCH])]
                gone += int(ok(n))
            if cursor == "0":
                return gone

    # -- reading --------------------------------------------------------------------------

    def length(self) -> Op[int]:
        """Messages waiting to be claimed, held ones of message groups included."""
        n, held = yield [("SCARD", self.keys.items), ("GET", self.keys.held)]
        for reply, key in ((n, self.keys.items), (held, self.keys.held)):
            if isinstance(reply, Exception):
                raise error_for(reply, key)
        if held is not None and not text(held).lstrip("-").isdigit():
            raise CorruptQueue(self.keys.held, "holds a count that is not a number")
        return int(n) + max(int(held or 0), 0)

    def counters(self) -> Op[dict[str, int]]:
        """The totals the operations keep in Redis (0 for one never counted)."""
        (reply,) = yield [("HMGET", self.keys.counters, *COUNTER_NAMES)]
        if isinstance(reply, Exception):
            raise error_for(reply, self.keys.counters)
        try:
            return {name: int(v or 0) for name, v in zip(COUNTER_NAMES, reply)}
        except ValueError:
            raise CorruptQueue(self.keys.counters, "holds a counter that is not a number") from None

    def stats(self) -> Op[QueueStats]:
        c = yield from self.ops.stats()
        age = None if c.oldest_ms is None else max(0.0, (c.now_ms - c.oldest_ms) / 1000.0)
        return QueueStats(c.waiting, c.processing, c.delayed, c.dead, age, c.held)

    def groups(self, count: int, busiest: bool = False) -> Op[list[GroupInfo]]:
        """Up to ``count`` message groups with released or held messages, by id; ``busiest``:
        those with the most messages first (among the first BUSIEST_LOOK by id, whose
        lengths are read in one round trip)."""
        whole_number("count", count, 0)
        k = self.keys
        (raw,) = yield [("HGETALL", k.groups)]
        if isinstance(raw, Exception):
            raise error_for(raw, k.groups)
        active = sorted((text(g), v) for g, v in hash_reply(raw).items())[: BUSIEST_LOOK if busiest else count]
        if not active:
            return []
        lengths = yield [("LLEN", k.group(g)) for g, _ in active]
        out = []
        for (g, v), n in zip(active, lengths):
            if isinstance(n, Exception):
                raise error_for(n, k.group(g))
            if not text(v).isdigit():
                raise CorruptQueue(k.groups, f"holds a count that is not a number for group {g!r}")
            out.append(GroupInfo(g, int(n), int(v)))
        if busiest:
            out = sorted(out, key=lambda info: (-(info.held + info.active), info.id))[:count]
        return out

    def ids(self, source: str) -> Op[list[str]]:
        """Every id in one state, in the order peek gives them (for snapshots)."""
        source = peek_source(source)
        k = self.keys
        if source in ("delayed", "held"):
            return [f.id for f in (yield from self.ops.peek(source, 2**31 - 1))]
        if source == "processing":
            (members,) = yield [("SMEMBERS", k.processing)]
            if isinstance(members, Exception):
                raise error_for(members, k.processing)
            return sorted((text(i) for i in members), key=int)
        key = k.dead if source == "dead" else k.queue
        listed, waiting = yield [("LRANGE", key, 0, -1), ("SMEMBERS", k.items)]
        for reply, name in ((listed, key), (waiting, k.items)):
            if isinstance(reply, Exception):
                raise error_for(reply, name)
        ids = [text(i) for i in listed]
        if source == "waiting":  # the script-free mode may leave stale entries in the list
            members = {text(i) for i in waiting}
            ids = [i for i in dict.fromkeys(ids) if i in members]
        return ids

    def peek(self, count: int, source: str) -> Op[list[Fields]]:
        source = one_of(source, PEEK_SOURCES, "peek source")
        whole_number("count", count, 0)
        return (yield from self.ops.peek(source, count))


def parse_settings(config_key: str, stored: dict[bytes, bytes]) -> QueueSettings:
    try:
        return QueueSettings.from_hash(stored)
    except InvalidArgument as exc:
        raise CorruptQueue(config_key, f"holds a bad setting ({exc})") from None


def list_queues_op(prefix: str) -> Op[list[str]]:
    """Names of the queues registered under a prefix (those that were ever written to)."""
    registry = registry_key(validate_prefix(prefix))
    (reply,) = yield [("SMEMBERS", registry)]
    if isinstance(reply, Exception):
        raise error_for(reply, registry)
    return sorted(text(n) for n in reply)
