"""The scripted mode: every operation is one Lua script (``keyqueue/lua``), run by SHA and
loaded once per server. Each method returns an operation of the core (a generator of round
trips, see ``core/roundtrip.py``) with a typed result; transports run it.
"""

from __future__ import annotations

import functools
import hashlib
import re
from importlib import resources
from typing import Any, Callable, Iterable, Sequence

from redis.exceptions import NoScriptError, ResponseError

from .core.replies import error_for, flat_fields, int_or, text
from .core.results import Claimed, Counts, Enqueued, Fields, Purged, ReapPosition, ReapStep, Requeued
from .core.roundtrip import Command, Op
from .keys import QueueKeys
from .message import ReapResult

SCRIPT_NAMES = (
    "enqueue", "claim", "ack", "extend", "release", "dead_letter",
    "reap", "requeue", "purge", "peek", "stats",
)
#: Most messages or ids in one script call (Lua's unpack() stops near 8,000 values).
CHUNK = 1000

_DEFINES = re.compile(r"^local (?:function )?(\w+)", re.M)
_COMMENTS = re.compile(r"--\[\[.*?\]\]|--[^\n]*", re.S)


def _lib_blocks() -> list[tuple[set[str], str]]:
    """_lib.lua as blank-line separated blocks, each with the names it defines."""
    text_ = (resources.files("keyqueue") / "lua" / "_lib.lua").read_text()
    return [(set(_DEFINES.findall(b)), b) for b in text_.split("\n\n") if _DEFINES.search(b)]


@functools.cache
def script_source(name: str) -> str:
    """The script with the _lib.lua helpers it uses (transitively) prepended, in lib order.

    Redis runs the whole chunk on every call, so helpers a script never uses would cost
    a closure each per call."""
    body = (resources.files("keyqueue") / "lua" / f"{name}.lua").read_text()
    blocks = _lib_blocks()
    used: set[int] = set()
    code = _COMMENTS.sub("", body)
    while True:
        new = {i for i, (names, _) in enumerate(blocks) if i not in used
               and any(re.search(rf"\b{n}\b", code) for n in names)}
        if not new:
            break
        used |= new
        code = _COMMENTS.sub("", body + "".join(blocks[i][1] for i in used))
    return "\n\n".join(blocks[i][1] for i in sorted(used)) + "\n\n" + body


@functools.cache
def script_sha(name: str) -> str:
    return hashlib.sha1(script_source(name).encode()).hexdigest()


def _max_receives(limit: int | None) -> str:
    return "" if limit is None else str(limit)  # the scripts read '' as no limit


def claimed(reply: Sequence[Any]) -> Claimed:
    """claim.lua's reply: {dead_lettered, config_missing, next_timer, id, b, t, r, d, c, e, ...}."""
    return Claimed(flat_fields(reply, 3), int(reply[0]), reply[1] == 1,
                   None if reply[2] is None else int(reply[2]))


class ScriptOps:
    """The operations of one queue as scripts. ``clock`` (tests only) replaces Redis TIME."""

    def __init__(self, keys: QueueKeys, clock: Callable[[], float] | None = None):
        self.keys = keys
        self.clock = clock
        k = keys
        # Key lists built once: they are on the hot path of every call.
        self.enqueue_keys = (k.seq, k.queue, k.items, k.timers, k.signal, k.config)
        self.state_keys = (k.queue, k.items, k.processing, k.timers, k.dead)
        # the states plus the wake-up signal: scripts that may make messages visible
        self.waking_keys = (*self.state_keys, k.signal)
        # claim and reap also report a missing config hash
        self.claim_keys = (*self.waking_keys, k.config)
        self._static_head = (k.base, "")

    def _head(self) -> tuple[str, str]:
        if self.clock is None:
            return self._static_head
        return (self.keys.base, str(round(self.clock() * 1000)))

    def _evalsha(self, name: str, keys: Sequence[str], args: Iterable[Any]) -> Command:
        return ("EVALSHA", script_sha(name), len(keys), *keys, *self._head(), *args)

    def call(self, name: str, keys: Sequence[str], args: Iterable[Any]) -> Op[Any]:
        """One script call; loaded once if the server does not know it (new or restarted)."""
        return (yield from self.call_many(name, [(keys, args)]))[0]

    def call_many(self, name: str, calls: Sequence[tuple[Sequence[str], Iterable[Any]]]) -> Op[list[Any]]:
        """Several calls of one script in one round trip (each call atomic on its own)."""
        commands = [self._evalsha(name, keys, args) for keys, args in calls]
        replies = yield commands
        retry = [i for i, r in enumerate(replies) if isinstance(r, NoScriptError)]
        if retry:
            again = yield [("SCRIPT LOAD", script_source(name)), *(commands[i] for i in retry)]
            for i, r in zip(retry, again[1:]):
                replies[i] = r
        for r in replies:
            if isinstance(r, ResponseError):
                raise error_for(r, self.keys.base)
        return replies

    # -- producing ------------------------------------------------------------------------

    def enqueue_one(self, body: bytes, delay_ms: int, bucket_ms: int,
                    dedup_key: str | None, dedup_ms: int) -> Op[Enqueued]:
        keys = self.enqueue_keys if dedup_key is None else (*self.enqueue_keys, self.keys.dedup(dedup_key))
        reply = yield from self.call("enqueue", keys, (delay_ms, bucket_ms, dedup_ms, body))
        return Enqueued([text(reply[0])], reply[2] == 1)

    def enqueue(self, bodies: Sequence[bytes], delay_ms: int, bucket_ms: int) -> Op[Enqueued]:
        calls = [(self.enqueue_keys, [delay_ms, bucket_ms, 0, *bodies[i : i + CHUNK]])
                 for i in range(0, len(bodies), CHUNK)]
        replies = yield from self.call_many("enqueue", calls)
        ids: list[str] = []
        for first, n, _ in replies:
            ids.extend(str(int(first) + j) for j in range(n))
        return Enqueued(ids, replies[-1][2] == 1)

    def enqueue_each(self, bodies: Sequence[bytes], delays_ms: Sequence[int],
                     dedup_keys: Sequence[str | None], bucket_ms: int, dedup_ms: int) -> Op[Enqueued]:
        """One script call per message (each its own delay and dedup key), all pipelined."""
        base = self.enqueue_keys
        calls = [(base if key is None else (*base, self.keys.dedup(key)), (delay, bucket_ms, dedup_ms, body))
                 for body, delay, key in zip(bodies, delays_ms, dedup_keys)]
        ids: list[str] = []
        missing = False
        for i in range(0, len(calls), CHUNK):
            replies = yield from self.call_many("enqueue", calls[i : i + CHUNK])
            ids += [text(reply[0]) for reply in replies]
            missing = replies[-1][2] == 1
        return Enqueued(ids, missing)

    # -- consuming ------------------------------------------------------------------------

    def claim(self, count: int, visibility_ms: int, bucket_ms: int, max_receives: int | None) -> Op[Claimed]:
        reply = yield from self.call("claim", self.claim_keys,
                                     (count, visibility_ms, bucket_ms, _max_receives(max_receives)))
        return claimed(reply)

    def wait_then_claim(self, signals: Sequence[str], timeout: float, count: int,
                        visibility_ms: int, bucket_ms: int, max_receives: int | None) -> Op[Claimed]:
        """BLPOP on ``signals``, then claim, in one round trip: Redis runs a connection's
        commands in order, so the claim runs the moment the BLPOP wakes (or times out)."""
        claim = self._evalsha("claim", self.claim_keys,
                              (count, visibility_ms, bucket_ms, _max_receives(max_receives)))
        woken, reply = yield [("BLPOP", *signals, timeout), claim]
        if isinstance(woken, ResponseError):
            raise error_for(woken, signals[0])
        if isinstance(reply, NoScriptError):
            _, reply = yield [("SCRIPT LOAD", script_source("claim")), claim]
        if isinstance(reply, ResponseError):
            raise error_for(reply, self.keys.base)
        return claimed(reply)

    # -- one delivery ---------------------------------------------------------------------

    def ack(self, pairs: Sequence[tuple[str, str]], bucket_ms: int) -> Op[int]:
        item = self.keys.item
        calls = []
        for i in range(0, len(pairs), CHUNK):
            chunk = pairs[i : i + CHUNK]
            calls.append(([*self.owner_keys(), *(item(mid) for mid, _ in chunk)],
                          [bucket_ms, *(x for pair in chunk for x in pair)]))
        return sum((yield from self.call_many("ack", calls)))

    def owner_keys(self) -> tuple[str, str]:
        return (self.keys.processing, self.keys.timers)

    def extend(self, msg_id: str, receipt: str, ms: int, bucket_ms: int) -> Op[int | None]:
        """The new deadline in ms, None when the delivery is not current."""
        k = self.keys
        new = yield from self.call("extend", [k.processing, k.timers, k.item(msg_id)],
                                   [bucket_ms, msg_id, receipt, ms])
        return int(new) or None

    def release(self, msg_id: str, receipt: str, delay_ms: int, bucket_ms: int,
                error: str | None) -> Op[bool]:
        k = self.keys
        keys = [k.processing, k.timers, k.item(msg_id), k.queue, k.items, k.signal]
        args = [bucket_ms, msg_id, receipt, delay_ms, error or "", "0" if error is None else "1"]
        return (yield from self.call("release", keys, args)) == 1

    def dead_letter(self, msg_id: str, receipt: str, reason: str, bucket_ms: int) -> Op[bool]:
        k = self.keys
        return (yield from self.call("dead_letter", [k.processing, k.timers, k.item(msg_id), k.dead],
                                     [bucket_ms, msg_id, receipt, reason])) == 1

    # -- maintenance ----------------------------------------------------------------------

    def reap_step(self, bucket_ms: int, max_receives: int | None, limit: int,
                  position: ReapPosition) -> Op[ReapStep]:
        r = yield from self.call("reap", self.claim_keys,
                                 [bucket_ms, _max_receives(max_receives), limit, *position])
        return ReapStep(ReapResult(int(r[0]), int(r[1]), int(r[2])), (text(r[3]), text(r[4]), int(r[5])),
                        bool(int(r[6])), r[7] == 1, [text(key) for key in r[8:]])

    def requeue(self, source: str, ids: Sequence[str], limit: int, bucket_ms: int,
                cursor: str = "0") -> Op[Requeued]:
        requeued, examined, cursor = yield from self.call("requeue", self.waking_keys,
                                                          [bucket_ms, source, limit, cursor, *ids])
        return Requeued(int(requeued), int(examined), text(cursor))

    def purge_step(self, source: str, limit: int, position: tuple[int, str], bucket_ms: int) -> Op[Purged]:
        n, offset, cursor, done = yield from self.call("purge", self.state_keys,
                                                       [bucket_ms, source, limit, *position])
        return Purged(int(n), (int(offset), text(cursor)), bool(done))

    # -- reading --------------------------------------------------------------------------

    def peek(self, source: str, count: int) -> Op[list[Fields]]:
        return flat_fields((yield from self.call("peek", self.state_keys, [source, count])))

    def stats(self) -> Op[Counts]:
        waiting, processing, delayed, dead, oldest, now = yield from self.call("stats", self.state_keys, [])
        return Counts(int(waiting), int(processing), int(delayed), int(dead),
                      None if oldest is None else int_or(oldest), int(now))
