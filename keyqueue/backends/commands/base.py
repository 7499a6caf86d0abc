"""What every group of script-free operations shares: the first round trip (server time,
key types, reads, WATCH), the WATCHed commit, timers, and the current-delivery check."""

from __future__ import annotations

from typing import Any, Callable, Sequence

from ...core.backend import FlowScope
from ...core.replication import Replication
from ...core.replies import FIELD, fields_of, item_fields, raise_errors
from ...core.replies import int_or as _int
from ...core.replies import text as _text
from ...core.results import Fields
from ...core.roundtrip import Command, Op, one, transaction
from ...errors import ConfigurationError, CorruptQueue
from ...keys import QueueKeys

#: WATCH/EXEC attempts before an operation gives up on a message that keeps changing.
ATTEMPTS = 3
#: Claim passes when the head is contested (each looks further down the list).
CLAIM_ATTEMPTS = 6
#: How long a purge of waiting messages holds them (only matters if the purge dies midway).
PURGE_VISIBILITY_MS = 60_000
#: Most item keys one WATCH names: an operation on more ids works in chunks of this many, each
#: its own WATCH/MULTI/EXEC. Redis checks every key a WATCH adds against the keys the client
#: already watches, so one WATCH of n keys costs O(n^2): on redis-server 7, 10,000 keys took
#: 1.46 s, 1,000 took 11 ms, 256 took 0.7 ms (under 3 us a key, less than the commands each
#: id needs anyway), and a chunk adds only a few round trips.
WATCH_CHUNK = 256


def fields_list(ids: Sequence[str], hashes: Sequence[Any]) -> list[Fields]:
    """HGETALL replies of ``ids`` as Fields (missing messages left out)."""
    return [fields_of(i, item_fields(raw)) for i, raw in zip(ids, hashes) if raw]


def _signal(key: str) -> list[Command]:
    """Wake one long-poll waiter; the list keeps at most one token."""
    return [("RPUSH", key, 1), ("LTRIM", key, 0, 0)]


class _Claim:
    """What the passes of one claim gathered."""

    def __init__(self, counted: bool = False) -> None:
        self.counted = counted  # its caller has counted a refusal: another is not counted
        self.messages: list[Fields] = []
        self.dead = 0
        self.expired = 0
        self.missing = False
        self.next_timer: int | None = None
        self.read = 0  # list entries the last pass read
        self.limited_ms: int | None = None  # a limit cut the claim (as ``Claimed.limited_ms``)


def groups_reads(k: QueueKeys) -> list[Command]:
    """The reads that show whether a queue has message groups (``has_groups``): its groups
    hash (released messages), and the mark a grouped enqueue leaves in its counters
    (mark_groups in _lib.lua: a queue whose grouped messages are all delayed has no groups
    hash yet)."""
    return [("EXISTS", k.groups), ("HGET", k.counters, "grouped")]


def has_groups(exists: Any, mark: Any) -> bool:
    """From the replies of ``groups_reads``."""
    return bool(exists) or mark is not None


def refuse_groups(grouped: bool, name: str) -> None:
    """Stop a claim or a reap of a queue that has message groups (a scripted client's):
    this mode would neither keep a group's order nor release its next message."""
    if grouped:
        raise ConfigurationError(
            f"queue {name!r} holds message groups: serve it in the scripted mode (the script-free "
            "mode does not keep a group's order)"
        )


class CommandBase:
    """The keys, the clock and the round-trip helpers of one queue's operations."""

    def __init__(
        self, keys: QueueKeys, clock: Callable[[], float] | None = None, replication: Replication = Replication()
    ) -> None:
        self.keys = keys
        self.clock = clock
        self.field_bytes = FIELD  # bytes per body field: the server's, once the queue has read it
        self.watch_chunk = WATCH_CHUNK  # item keys per WATCH (a small one crosses chunks with few ids)
        self.replication = replication
        self.flow: FlowScope | None = None
        #: The rate limit's window counter the last claim used: the next claim reads it in its
        #: first round trip, so one made while that window is full is refused there, with no
        #: reservation (a held-back long-poll's look each second stays a few reads).
        self.last_rate_key: str | None = None
        k = keys
        self.state_keys = (k.queue, k.items, k.processing, k.timers, k.dead)
        self.waking_keys = (*self.state_keys, k.signal)

    # -- the first round trip of every operation: clock, key types, reads ------------------

    def _open(
        self, typed: Sequence[str], reads: Sequence[Command] = (), watch: Sequence[str] = ()
    ) -> Op[tuple[int, list[Any]]]:
        """Server time (ms), a type check of ``typed`` and of every key read, and the reads."""
        head = self._time()
        head += [("TYPE", key) for key in typed]
        if watch:
            head.append(("WATCH", *watch))
        out = yield [*head, *reads]
        now = self._now(out[:1])
        self._check_kinds(typed, out[len(head) - len(typed) - (1 if watch else 0) :])
        replies = out[len(head) :]
        self._raise_errors(reads, replies)
        return now, replies

    def _time(self) -> list[Command]:
        """The server-time command to add to a round trip (none under a test clock)."""
        return [] if self.clock is not None else [("TIME",)]

    def _now(self, replies: Sequence[Any]) -> int:
        """Milliseconds from the reply of ``_time()``'s command, the first of ``replies``."""
        if self.clock is not None:
            return round(self.clock() * 1000)
        sec, usec = replies[0]
        return int(sec) * 1000 + int(usec) // 1000

    def _check_kinds(self, keys: Sequence[str], kinds: Sequence[Any]) -> None:
        """Raise CorruptQueue for the first key whose TYPE reply is neither absent nor its own."""
        for key, kind in zip(keys, kinds):
            if _text(kind) not in ("none", self.keys.kind(key)):
                raise CorruptQueue(key)

    def _types(self, keys: Sequence[str]) -> Op[None]:
        """A round trip that only checks types (keys known after the first one)."""
        self._check_kinds(keys, (yield [("TYPE", k) for k in keys]))

    def _raise_errors(self, cmds: Sequence[Command], replies: Sequence[Any]) -> None:
        raise_errors(cmds, replies, self.keys.base)

    def _commit(self, cmds: Sequence[Command]) -> Op[list[Any] | None]:
        """MULTI/EXEC; None when a watched key changed. An error inside is raised after the
        fact (the types were checked first, so it means a key was overwritten meanwhile).

        A timer set the transaction removes ids from is counted in it too; one left empty
        loses its index entry, in a WATCHed transaction of its own so that a claimer adding
        to it meanwhile keeps it (if we die first, the reaper drops the entry instead)."""
        timer_prefix = self.keys.base + "timer:"
        emptied = list(dict.fromkeys(str(c[1]) for c in cmds if c[0] == "SREM" and str(c[1]).startswith(timer_prefix)))
        res = yield from transaction([*cmds, *(("SCARD", tk) for tk in emptied)], self.replication)
        if res is None:
            return None
        self._raise_errors(cmds, res)
        empty = [tk for tk, n in zip(emptied, res[len(cmds) :]) if n == 0]
        if empty:
            left = (yield [("WATCH", *empty), *(("EXISTS", tk) for tk in empty)])[1:]
            gone = [tk[len(timer_prefix) :] for tk, n in zip(empty, left) if n == 0]
            if gone:
                yield from transaction([("ZREM", self.keys.timers, *gone)])
            else:
                (yield from one(("UNWATCH",)))
        return res[: len(cmds)]

    def _tk(self, t: int, bucket_ms: int) -> tuple[str, int]:
        b = t // bucket_ms
        return self.keys.timer(b), b

    def _current(self, typed: Sequence[str], pairs: Sequence[tuple[str, str]]) -> Op[tuple[int, list[tuple[str, int]]]]:
        """WATCH the items, then which (id, timer) pairs are current deliveries (receipt
        matches and the id is still in processing)."""
        k = self.keys
        item_keys = [k.item(mid) for mid, _ in pairs]
        reads: list[Command] = [("HMGET", key, "c", "d") for key in item_keys]
        reads.append(("SMISMEMBER", k.processing, *(mid for mid, _ in pairs)))
        now, got = yield from self._open(typed, reads, watch=item_keys)
        held = got[-1]
        current, seen = [], set()
        for (mid, receipt), (c, d), h in zip(pairs, got[:-1], held):
            if c is not None and _text(c) == receipt and h == 1 and mid not in seen:
                seen.add(mid)
                current.append((mid, _int(d)))
        return now, current

    def _drop_timer(self, mid: str, d: int, bucket_ms: int) -> list[Command]:
        return [("SREM", self.keys.timer(d // bucket_ms), mid)] if d > 0 else []

    def _one(
        self,
        msg_id: str,
        receipt: str,
        typed: Sequence[str],
        bucket_ms: int,
        change: Callable[[int, int], Op[list[Command]]],
    ) -> Op[int | None]:
        """Apply the commands of ``change(now, timer)`` to a current delivery, atomically:
        the server time it applied at, None when the delivery is not current."""
        k = self.keys
        for _ in range(ATTEMPTS):
            now, current = yield from self._current([*typed, k.item(msg_id)], [(msg_id, receipt)])
            if not current:
                (yield from one(("UNWATCH",)))
                return None
            d = current[0][1]
            tx = [*self._drop_timer(msg_id, d, bucket_ms), *(yield from change(now, d))]
            if (yield from self._commit(tx)) is not None:
                return now
        return None

    def _to_timer(self, mid: str, at: int, bucket_ms: int) -> Op[list[Command]]:
        tk, b = self._tk(at, bucket_ms)
        yield from self._types([tk])
        return [("HSET", self.keys.item(mid), "d", at), ("SADD", tk, mid), ("ZADD", self.keys.timers, "LT", at, b)]

    def _rescore(self, tk: str, bucket: str, earliest: int | None, kept: int, now: int) -> Op[bool]:
        """Point the index at the bucket's earliest remaining timer, or drop an empty bucket,
        unless the bucket holds other ids than those we judged (a claimer added one): then
        the old, earlier score stays. Whether the bucket is no longer due."""
        k = self.keys
        card = (yield [("WATCH", tk), ("SCARD", tk)])[1]
        if int(card) == 0:
            return (yield from self._commit([("ZREM", k.timers, bucket)])) is not None
        if earliest is not None and earliest > now and int(card) == kept:
            return (yield from self._commit([("ZADD", k.timers, earliest, bucket)])) is not None
        (yield from one(("UNWATCH",)))
        return False
