"""The scripted mode: every operation is one Lua script, loaded once per client, run by SHA.

Scripts return plain values; this module builds their KEYS/ARGV and turns their error
replies into keyqueue exceptions in one place (``call``).
"""

from __future__ import annotations

import functools
import hashlib
import re
import weakref
from importlib import resources
from typing import Any, Callable, Iterable, Sequence

import redis
from redis.exceptions import NoPermissionError, NoScriptError, ResponseError

from .errors import CorruptQueue
from .keys import QueueKeys

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
    text = (resources.files("keyqueue") / "lua" / "_lib.lua").read_text()
    return [(set(_DEFINES.findall(b)), b) for b in text.split("\n\n") if _DEFINES.search(b)]


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


def keyqueue_error(exc: Exception, default_key: str) -> Exception:
    """The exception to raise for an error reply: CorruptQueue for a key of the wrong type
    (named by the script, else ``default_key``), the reply itself otherwise."""
    msg = str(exc) if isinstance(exc, ResponseError) else ""
    if msg.startswith("KQCORRUPT "):
        return CorruptQueue(msg.split()[1])
    if "WRONGTYPE" in msg:
        return CorruptQueue(default_key)
    if isinstance(exc, NoPermissionError) and ("'evalsha'" in msg or "'script" in msg):
        return type(exc)(f"{msg} (this Redis user may not run scripts: use the script-free mode, "
                         "Queue(..., scripting=False) or keyqueue --no-scripting)")
    return exc


def _text(value: bytes | str | int) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class ScriptOps:
    """Runs the scripts of one queue. ``clock`` (tests only) replaces the server's TIME."""

    def __init__(self, client: redis.Redis, keys: QueueKeys, clock: Callable[[], float] | None = None,
                 on_config_missing: Callable[[], None] = lambda: None):
        self.client = client
        self.keys = keys
        self.clock = clock
        #: Called when a write finds the config hash gone (enqueue, claim and reap report it).
        self.on_config_missing = on_config_missing
        k = keys
        # Key lists built once: they are on the hot path of every call.
        self.enqueue_keys = (k.seq, k.queue, k.items, k.timers, k.signal, k.config)
        self.state_keys = (k.queue, k.items, k.processing, k.timers, k.dead)
        # the states plus the wake-up signal: scripts that may make messages visible
        self.waking_keys = (*self.state_keys, k.signal)
        # claim and reap also report a missing config hash
        self.claim_keys = (*self.waking_keys, k.config)
        self.owner_keys = (k.processing, k.timers)

        self._static_head = (k.base, "")

    def _head(self) -> tuple[str, str]:
        if self.clock is None:
            return self._static_head
        return (self.keys.base, str(round(self.clock() * 1000)))

    def call(self, name: str, keys: Sequence[str], args: Iterable[Any]) -> Any:
        """EVALSHA, loading the script once if the server does not know it (new or restarted)."""
        command = ("EVALSHA", script_sha(name), len(keys), *keys, *self._head(), *args)
        try:
            try:
                return self.client.execute_command(*command)
            except NoScriptError:
                self.client.script_load(script_source(name))
                return self.client.execute_command(*command)
        except ResponseError as exc:
            raise keyqueue_error(exc, self.keys.base) from None

    def call_many(self, name: str, calls: Sequence[tuple[Sequence[str], Sequence[Any]]]) -> list[Any]:
        """Several calls of one script in one round trip (each call stays atomic on its own)."""
        if len(calls) == 1:
            return [self.call(name, *calls[0])]
        pending = list(range(len(calls)))
        results: list[Any] = [None] * len(calls)
        for attempt in range(2):
            pipe = self.client.pipeline(transaction=False)
            for i in pending:
                keys, args = calls[i]
                pipe.evalsha(script_sha(name), len(keys), *keys, *self._head(), *args)
            replies = pipe.execute(raise_on_error=False)
            retry = []
            for i, reply in zip(pending, replies):
                if isinstance(reply, NoScriptError) and attempt == 0:
                    retry.append(i)
                elif isinstance(reply, Exception):
                    raise keyqueue_error(reply, self.keys.base)
                else:
                    results[i] = reply
            if not retry:
                break
            self.client.script_load(script_source(name))
            pending = retry
        return results

    # The operations (the script-free mode implements the same methods).

    def enqueue_one(self, body: bytes, delay_ms: int, bucket_ms: int,
                    dedup_key: str | None, dedup_ms: int) -> str:
        keys = self.enqueue_keys if dedup_key is None else (*self.enqueue_keys, self.keys.dedup(dedup_key))
        reply = self.call("enqueue", keys, (delay_ms, bucket_ms, dedup_ms, body))
        self._report(reply[2])
        return reply[0].decode()

    def enqueue(self, bodies: Sequence[bytes], delay_ms: int, bucket_ms: int) -> list[str]:
        base = self.enqueue_keys
        calls = [(base, [delay_ms, bucket_ms, 0, *bodies[i : i + CHUNK]])
                 for i in range(0, len(bodies), CHUNK)]
        ids: list[str] = []
        replies = self.call_many("enqueue", calls)
        for first, n, _ in replies:
            start = int(first)
            ids.extend(str(start + j) for j in range(n))
        self._report(replies[-1][2])
        return ids

    def enqueue_each(self, bodies: Sequence[bytes], delays_ms: Sequence[int],
                     dedup_keys: Sequence[str | None], bucket_ms: int, dedup_ms: int) -> list[str]:
        """One script call per message (each its own delay and dedup key), all pipelined."""
        base = self.enqueue_keys
        calls = [(base if key is None else (*base, self.keys.dedup(key)), (delay, bucket_ms, dedup_ms, body))
                 for body, delay, key in zip(bodies, delays_ms, dedup_keys)]
        out: list[str] = []
        for i in range(0, len(calls), CHUNK):
            replies = self.call_many("enqueue", calls[i : i + CHUNK])
            out += [reply[0].decode() for reply in replies]
        self._report(replies[-1][2])
        return out

    def _report(self, missing: Any) -> None:
        if missing == 1:
            self.on_config_missing()

    def claim(self, count: int, visibility_ms: int, bucket_ms: int, max_receives: str) -> list[Any]:
        """[dead_lettered, config_missing, next_timer, id, b, t, r, d, c, e, ...] (see claim.lua)."""
        reply = self.call("claim", self.claim_keys, (count, visibility_ms, bucket_ms, max_receives))
        self._report(reply[1])
        return reply

    def wait_then_claim(self, signals: Sequence[str], timeout: float, count: int,
                        visibility_ms: int, bucket_ms: int, max_receives: str) -> list[Any]:
        """BLPOP on ``signals``, then claim, in one round trip: Redis runs a connection's
        commands in order, so the claim runs the moment the BLPOP wakes (or times out)."""
        pipe = self.client.pipeline(transaction=False)
        pipe.execute_command("BLPOP", *signals, timeout)
        pipe.execute_command("EVALSHA", script_sha("claim"), len(self.claim_keys), *self.claim_keys,
                             *self._head(), count, visibility_ms, bucket_ms, max_receives)
        woken, reply = pipe.execute(raise_on_error=False)
        for r in (woken, reply):
            if isinstance(r, NoScriptError):
                self.client.script_load(script_source("claim"))
                return [0, 0, None]  # the caller claims again, now with the script loaded
            if isinstance(r, Exception):
                raise keyqueue_error(r, signals[0])
        self._report(reply[1])
        return reply

    def ack(self, pairs: Sequence[tuple[str, str]], bucket_ms: int) -> int:
        item = self.keys.item
        calls = []
        for i in range(0, len(pairs), CHUNK):
            chunk = pairs[i : i + CHUNK]
            calls.append(([*self.owner_keys, *(item(mid) for mid, _ in chunk)],
                          [bucket_ms, *(x for pair in chunk for x in pair)]))
        return sum(self.call_many("ack", calls))

    def extend(self, msg_id: str, receipt: str, ms: int, bucket_ms: int) -> int:
        k = self.keys
        return self.call("extend", [k.processing, k.timers, k.item(msg_id)],
                         [bucket_ms, msg_id, receipt, ms])

    def release(self, msg_id: str, receipt: str, delay_ms: int, bucket_ms: int,
                error: str | None) -> bool:
        k = self.keys
        keys = [k.processing, k.timers, k.item(msg_id), k.queue, k.items, k.signal]
        args = [bucket_ms, msg_id, receipt, delay_ms, error or "", "0" if error is None else "1"]
        return self.call("release", keys, args) == 1

    def dead_letter(self, msg_id: str, receipt: str, reason: str, bucket_ms: int) -> bool:
        k = self.keys
        return self.call("dead_letter", [k.processing, k.timers, k.item(msg_id), k.dead],
                         [bucket_ms, msg_id, receipt, reason]) == 1

    def reap_step(self, bucket_ms: int, max_receives: str, limit: int,
                  position: tuple[str, str, int]) -> list[Any]:
        reply = self.call("reap", self.claim_keys, [bucket_ms, max_receives, limit, *position])
        self._report(reply[7])
        return reply

    def requeue(self, source: str, ids: Sequence[str], limit: int, bucket_ms: int,
                cursor: str = "0") -> tuple[int, int, str]:
        requeued, examined, cursor = self.call("requeue", self.waking_keys,
                                               [bucket_ms, source, limit, cursor, *ids])
        return requeued, examined, _text(cursor)

    def purge_step(self, source: str, limit: int, position: tuple[int, str],
                   bucket_ms: int) -> tuple[int, tuple[int, str], bool]:
        n, offset, cursor, done = self.call("purge", self.state_keys,
                                            [bucket_ms, source, limit, *position])
        return n, (int(offset), _text(cursor)), bool(done)

    def peek(self, source: str, count: int) -> list[Any]:
        return self.call("peek", self.state_keys, [source, count])

    def stats(self) -> list[Any]:
        return self.call("stats", self.state_keys, [])
