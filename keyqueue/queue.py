"""Queue: the public face of one queue. Validates input, then delegates every state change
to one atomic operation of its mode; it sends no raw Redis commands of its own except to
read settings, wait for a wake-up signal, and find keys to destroy."""

from __future__ import annotations

import logging
import math
import time
from typing import TYPE_CHECKING, Any, Callable, Iterable, Literal, Sequence

import redis
from redis.exceptions import ResponseError
from redis.typing import EncodableT

from .connection import TRANSIENT, connection_kwargs, resolve_client
from .commands import CommandOps, flat_messages
from .errors import CorruptQueue, InvalidArgument, MessageTooLarge
from .keys import QueueKeys, registry_key, validate_name, validate_prefix
from .message import Message, QueueStats, ReapResult, decode_messages
from .scripted import ScriptOps, keyqueue_error
from .settings import SETTING_NAMES, UNSET, QueueSettings, Unset, seconds_arg, validate, whole_number

if TYPE_CHECKING:
    from .check import CheckReport

log = logging.getLogger("keyqueue.queue")

PeekSource = Literal["waiting", "processing", "delayed", "dead"]
PurgeSource = Literal["waiting", "delayed", "dead", "all"]
RequeueSource = Literal["dead", "processing"]

#: Ids examined per script call by reap and purge, so Redis is never blocked long.
BATCH = 500
#: Requeue does more per id (reset fields, move, drop timers): smaller calls, same bound.
REQUEUE_BATCH = 250
#: Longest single BLPOP of a long-poll; an idle waiter costs Redis one BLPOP and one claim per period.
WAIT_SLICE = 2.0
#: Seconds between the reaps a Queue's claims make (and Workers make) of its queue.
REAP_INTERVAL = 1.0
#: Ids one claim-time reap examines at most: a backlog is reaped over the following claims.
CLAIM_REAP_LIMIT = 500
#: Fields before the messages in a claim reply: dead-lettered count, config missing, ms to
#: the earliest timer.
CLAIM_HEAD = 3


class Queue:
    """A reliable FIFO work queue in Redis with SQS-style visibility timeouts.

    Args:
        name: queue name, ``[A-Za-z0-9._-]{1,200}``.
        client / url: a redis-py client, or a URL (default ``redis://localhost:6379/0``).
        prefix: key prefix; every key is ``prefix:{name}:...``.
        visibility_timeout, max_receives, bucket_seconds, max_body_bytes, dedup_window:
            settings. Given ones are written to the queue's config hash; the others are
            read from it, so every process applies the same values.
        scripting: False selects the script-free mode (servers without EVAL).
        clock: tests only: a function returning epoch seconds that replaces Redis TIME.
    """

    def __init__(
        self,
        name: str,
        *,
        client: redis.Redis | None = None,
        url: str | None = None,
        prefix: str = "kq",
        visibility_timeout: float | Unset = UNSET,
        max_receives: int | None | Unset = UNSET,
        bucket_seconds: float | Unset = UNSET,
        max_body_bytes: int | Unset = UNSET,
        dedup_window: float | Unset = UNSET,
        scripting: bool = True,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.name = validate_name(name)
        self.prefix = validate_prefix(prefix)
        given = {
            k: v for k, v in dict(
                visibility_timeout=visibility_timeout, max_receives=max_receives,
                bucket_seconds=bucket_seconds, max_body_bytes=max_body_bytes,
                dedup_window=dedup_window,
            ).items() if v is not UNSET
        }
        self._wanted = given
        self._given = validate(QueueSettings(), given).to_hash(set(given))
        self.scripting = scripting
        self.client = resolve_client(client, url)
        self.keys = QueueKeys(self.prefix, self.name)
        self._ops: ScriptOps | CommandOps = (ScriptOps if scripting else CommandOps)(
            self.client, self.keys, clock, self._restore)
        self._settings: QueueSettings | None = None
        #: The config fields this Queue restores if the hash vanishes: those it was given or
        #: found when it loaded (never defaults it merely fell back to).
        self._held: dict[str, str] = {}
        self._registered = False
        self._restored_at = -math.inf
        #: Claim-time reaping (monotonic times): the last reap, when the earliest timer falls
        #: due (every claim reply says; 0 = unknown, so the first claim reaps), and where a
        #: reap cut short goes on.
        self._last_reap = -math.inf
        self._due_at = 0.0
        self._reap_position: tuple[str, str, int] = ("", "0", 0)
        try:
            self._load_settings()
        except TRANSIENT as exc:  # e.g. a module-level Queue while Redis restarts
            log.debug("queue %s: Redis unreachable (%s); settings load on first use", self.name, exc)

    # -- settings -------------------------------------------------------------------

    @property
    def settings(self) -> QueueSettings:
        """The settings in force: loaded when the Queue was made, or on first use if Redis
        was unreachable then."""
        if self._settings is None:
            self._load_settings()
        assert self._settings is not None
        return self._settings

    def _load_settings(self) -> None:
        """Read the config hash and write the values this Queue was given (last writer
        wins); log which values in force the given ones changed."""
        k = self.keys
        pipe = self.client.pipeline(transaction=False)
        pipe.hgetall(k.config)
        pipe.sismember(k.registry, self.name)
        stored, registered = pipe.execute(raise_on_error=False)
        if isinstance(stored, ResponseError):
            raise keyqueue_error(stored, k.config)
        self._registered = self._registry_ok(registered) and bool(registered)
        current = self._parse_settings(stored)
        if self._given:
            fields: dict[EncodableT, EncodableT] = dict(self._given.items())
            self._guarded(lambda: self.client.hset(k.config, mapping=fields), k.config)
            self._register()
            changed = [f"{name} {stored[name.encode()].decode() or 'none'} -> {value or 'none'}"
                       for name, value in self._given.items()
                       if name.encode() in stored and stored[name.encode()].decode() != value]
            if changed:
                log.info("queue %s: changed %s in its config hash", self.name, ", ".join(changed))
        settings = validate(current, self._wanted)
        self._held = settings.to_hash({f.decode() for f in stored} & SETTING_NAMES | set(self._given))
        self._settings = settings

    def _restore(self) -> None:
        """A write found the config hash gone (Redis lost its data: a restart without
        persistence, a FLUSHDB, a failover to an empty replica). Write back the settings this
        Queue runs with and its registration, so ``keyqueue ls``, reapers of every queue and
        other processes find it again. HSETNX: a value another process wrote since wins. At
        most once a second (a queue with no settings to restore reports it on every write).
        A Queue that never knew the queue to exist (a claim on a name nobody wrote) restores
        nothing: reading a queue must not create it."""
        now = time.monotonic()
        if now - self._restored_at < 1.0 or not (self._held or self._registered):
            return
        self._restored_at = now
        k = self.keys
        pipe = self.client.pipeline(transaction=False)
        for name, value in self._held.items():
            pipe.hsetnx(k.config, name, value)
        pipe.sadd(k.registry, self.name)
        replies = pipe.execute(raise_on_error=False)
        for reply in replies[:-1]:
            if isinstance(reply, ResponseError):
                raise keyqueue_error(reply, k.config)
        if not self._registry_ok(replies[-1]):
            replies[-1] = 0
        self._registered = True
        restored = [name for name, n in zip(self._held, replies) if n]
        if replies[-1] or restored:
            log.warning("queue %s: %s missing from Redis (data lost?); restored%s", self.name,
                        "its registration and settings were" if restored else "its registration was",
                        f" {', '.join(f'{n}={self._held[n]}' for n in restored)}" if restored else "")

    def _parse_settings(self, stored: dict[bytes, bytes]) -> QueueSettings:
        try:
            return QueueSettings.from_hash(stored)
        except InvalidArgument as exc:
            raise CorruptQueue(self.keys.config, f"holds a bad setting ({exc})") from None

    def _register(self) -> None:
        """Record the name for ``keyqueue ls`` and reapers of every queue, on first write."""
        if not self._registered:
            try:
                self.client.sadd(self.keys.registry, self.name)
            except ResponseError as exc:
                self._registry_ok(exc)
            self._registered = True

    def _registry_ok(self, reply: object) -> bool:
        """False (logged) when the registry, shared by every queue, holds the wrong type:
        registering is a side effect, so a broken registry must not stop this queue."""
        if not isinstance(reply, ResponseError):
            return True
        log.error("queue %s: cannot register: %s (keyqueue ls and reapers of every queue miss "
                  "it until the key is fixed)", self.name, keyqueue_error(reply, self.keys.registry))
        return False

    def refresh_settings(self) -> QueueSettings:
        """Re-read the config hash (the reaper does this every pass). A hash that vanished
        keeps the settings held until a write restores it, rather than falling to defaults."""
        stored = self._guarded(lambda: self.client.hgetall(self.keys.config), self.keys.config)
        if not stored and self._held and self._settings is not None:
            return self._settings
        self._settings = self._parse_settings(stored)
        self._held = self._settings.to_hash({f.decode() for f in stored} & SETTING_NAMES)
        return self._settings

    def _guarded(self, fn: Callable[[], Any], *keys: str) -> Any:
        try:
            return fn()
        except ResponseError as exc:
            raise keyqueue_error(exc, " or ".join(keys)) from None

    # -- producing ------------------------------------------------------------------

    def _body(self, body: object) -> bytes:
        if isinstance(body, str):
            data = body.encode("utf-8")
        elif isinstance(body, (bytes, bytearray, memoryview)):
            data = bytes(body)
        else:
            raise TypeError(f"a message body must be bytes or str, not {type(body).__name__}")
        if len(data) > self.settings.max_body_bytes:
            raise MessageTooLarge(
                f"message body of {len(data)} bytes exceeds max_body_bytes="
                f"{self.settings.max_body_bytes} of queue {self.name!r}"
            )
        return data

    def enqueue(self, body: bytes | str, *, delay: float = 0.0, dedup_key: str | None = None) -> str:
        """Add a message; with ``dedup_key``, a repeat within dedup_window returns the first id."""
        data = self._body(body)
        delay_ms = seconds_arg("delay", delay)
        _check_dedup_key("dedup_key", dedup_key)
        self._register()
        s = self.settings
        return self._ops.enqueue_one(data, delay_ms, s.bucket_ms, dedup_key, s.dedup_ms)

    def enqueue_many(self, bodies: Iterable[bytes | str], *, delay: float = 0.0,
                     delays: Sequence[float] | None = None,
                     dedup_keys: Sequence[str | None] | None = None) -> list[str]:
        """Add many messages in one round trip; ids are returned in order.

        ``delays`` and ``dedup_keys`` (one per body, None = no key) give each message its
        own; a repeated dedup key returns the first message's id, as ``enqueue`` does."""
        _not_one(bodies, "bodies", "enqueue(body)")
        data = [self._body(b) for b in bodies]
        delay_ms = seconds_arg("delay", delay)
        for name, per in (("delays", delays), ("dedup_keys", dedup_keys)):
            if per is not None and len(per) != len(data):
                raise InvalidArgument(f"{name} has {len(per)} entries for {len(data)} bodies")
        each_ms = None if delays is None else [seconds_arg("delay", d) for d in delays]
        for key in dedup_keys or ():
            _check_dedup_key("each dedup key", key)
        if not data:
            return []
        self._register()
        s = self.settings
        if each_ms is None and dedup_keys is None:
            return self._ops.enqueue(data, delay_ms, s.bucket_ms)
        return self._ops.enqueue_each(data, each_ms or [delay_ms] * len(data),
                                      list(dedup_keys or [None] * len(data)), s.bucket_ms, s.dedup_ms)

    def get(self, ids: Iterable[str]) -> list[Message]:
        """The messages with these ids, in order, without claiming them (no receipt); ids
        with no message are skipped. One round trip."""
        _not_one(ids, "ids", "get([id])")
        wanted = [str(i) for i in ids]
        if not wanted:
            return []
        pipe = self.client.pipeline(transaction=False)
        for i in wanted:
            pipe.execute_command("HGETALL", self.keys.item(i))
        replies = self._guarded(lambda: pipe.execute(), self.keys.base + "item:*")
        return decode_messages(flat_messages(wanted, replies), self, with_receipt=False)

    # -- consuming ------------------------------------------------------------------

    def claim(self, *, visibility_timeout: float | None = None, wait: float = 0.0) -> Message | None:
        """The next message, invisible to others until its deadline; ``wait`` long-polls."""
        got = self.claim_many(1, visibility_timeout=visibility_timeout, wait=wait)
        return got[0] if got else None

    def claim_many(self, count: int, *, visibility_timeout: float | None = None,
                   wait: float = 0.0) -> list[Message]:
        whole_number("count", count, 1)
        s = self.settings
        vis_ms = s.visibility_ms if visibility_timeout is None else seconds_arg(
            "visibility_timeout", visibility_timeout, allow_zero=False)
        wait_ms = seconds_arg("wait", wait)
        deadline = time.monotonic() + wait_ms / 1000.0
        self.reap_if_due()
        got = self._take(self._ops.claim(count, vis_ms, s.bucket_ms, s.max_receives_arg))
        while not got:
            now = time.monotonic()
            remaining = deadline - now
            if remaining <= 0:
                return []
            if self.reap_if_due():
                got = self._take(self._ops.claim(count, vis_ms, s.bucket_ms, s.max_receives_arg))
                continue
            # Wake when a reap may be due too: expiring and due delayed messages signal nobody.
            wake = max(self._next_reap() - now, 0.01)
            got = self._take(self._wait_then_claim([self], min(remaining, wake), count, vis_ms))
        return got

    def _take(self, reply: list[Any]) -> list[Message]:
        """The messages of a claim reply; its head says when the earliest timer falls due."""
        due_ms = reply[2]
        self._due_at = math.inf if due_ms is None else time.monotonic() + int(due_ms) / 1000.0
        return decode_messages(reply, self, start=CLAIM_HEAD)

    def _next_reap(self) -> float:
        return max(self._last_reap + REAP_INTERVAL, self._due_at)

    def reap_if_due(self) -> bool:
        """One bounded reap step when a timer may have fallen due and the last reap is
        REAP_INTERVAL old (a reap cut short goes on at the next call). This is how a consumer
        that only claims gets expired and due delayed messages back without a Reaper; it
        costs nothing while no timer is due. True when it moved a message."""
        now = time.monotonic()
        if now < self._next_reap():
            return False
        s = self.settings
        reply = self._ops.reap_step(s.bucket_ms, s.max_receives_arg, CLAIM_REAP_LIMIT, self._reap_position)
        done = bool(int(reply[6]))
        # Corrupt keys (reply[8:]) are left for Queue.reap and the Reaper to report.
        if done:
            self._reap_position, self._last_reap = ("", "0", 0), now
        else:
            self._reap_position = (reply[3].decode(), reply[4].decode(), int(reply[5]))
        return int(reply[0]) + int(reply[1]) + int(reply[2]) > 0

    def _wait_then_claim(self, watched: Sequence[Queue], seconds: float, count: int,
                         vis_ms: int) -> list[Any]:
        """Wait for a signal on any of ``watched`` (this queue among them), then claim from
        this queue: one round trip where the queues share a client outside a cluster."""
        s = self.settings
        if not _one_connection(watched):
            wait_for_any(watched, seconds)
            return self._ops.claim(count, vis_ms, s.bucket_ms, s.max_receives_arg)
        return self._ops.wait_then_claim([q.keys.signal for q in watched], _slice(self, seconds),
                                         count, vis_ms, s.bucket_ms, s.max_receives_arg)

    def _own(self, message: Message) -> bool:
        """Whether ``message`` carries a receipt this queue can check."""
        if message.queue is not None and message.queue is not self and message.queue.keys != self.keys:
            raise InvalidArgument(
                f"message {message.id} belongs to queue {message.queue.name!r}, not {self.name!r}")
        return message.receipt is not None

    def ack(self, message: Message) -> bool:
        """Delete a message; True only if this delivery was still current."""
        return self.ack_many([message]) == 1

    def ack_many(self, messages: Sequence[Message]) -> int:
        owned = [m for m in messages if self._own(m)]
        if not owned:
            return 0
        n = self._ops.ack([(m.id, m.receipt) for m in owned], self.settings.bucket_ms)  # type: ignore[misc]
        for m in owned:
            m.settled = "ack"
        return n

    def extend(self, message: Message, seconds: float) -> bool:
        """Heartbeat: new deadline = now + seconds, if this delivery is current."""
        ms = seconds_arg("seconds", seconds)
        if not self._own(message):
            return False
        new = self._ops.extend(message.id, message.receipt, ms, self.settings.bucket_ms)  # type: ignore[arg-type]
        if new:
            message.deadline = int(new) / 1000.0
        return bool(new)

    def release(self, message: Message, *, delay: float = 0.0, error: str | None = None) -> bool:
        """Give a message back (to the tail, or after ``delay``); ``error`` becomes last_error."""
        delay_ms = seconds_arg("delay", delay)
        if not self._own(message):
            return False
        ok = self._ops.release(message.id, message.receipt, delay_ms,  # type: ignore[arg-type]
                               self.settings.bucket_ms, error)
        message.settled = "release"
        return ok

    def dead_letter(self, message: Message, reason: str = "") -> bool:
        """Move a current delivery to dead letters; ``reason`` becomes last_error."""
        if not self._own(message):
            return False
        ok = self._ops.dead_letter(message.id, message.receipt, str(reason),  # type: ignore[arg-type]
                                   self.settings.bucket_ms)
        message.settled = "dead_letter"
        return ok

    # -- maintenance ----------------------------------------------------------------

    def reap(self) -> ReapResult:
        """Redeliver expired messages and release due delayed ones, in bounded batches."""
        s = self.settings
        total = ReapResult()
        position: tuple[str, str, int] = ("", "0", 0)
        broken: list[str] = []
        while True:
            reply = self._ops.reap_step(s.bucket_ms, s.max_receives_arg, BATCH, position)
            total = total + ReapResult(int(reply[0]), int(reply[1]), int(reply[2]))
            broken.extend(k.decode() for k in reply[8:])
            position = (reply[3].decode(), reply[4].decode(), int(reply[5]))
            if int(reply[6]):
                break
        self._last_reap = time.monotonic()
        self._reap_position = ("", "0", 0)
        if broken:
            raise CorruptQueue(broken[0], f"holds the wrong type (reaped the rest: {total})")
        return total

    def requeue(self, ids: Iterable[str] | None = None, *, source: RequeueSource = "dead",
                progress: Callable[[int], None] | None = None) -> int:
        """Put dead (or in-flight) messages back at the tail with receives reset to 0."""
        if source not in ("dead", "processing"):
            raise InvalidArgument(f"requeue source must be 'dead' or 'processing', not {source!r}")
        bucket_ms = self.settings.bucket_ms
        done = 0
        if ids is not None:
            _not_one(ids, "ids", "requeue([id])")
            wanted = [str(i) for i in ids]
            for i in range(0, len(wanted), REQUEUE_BATCH):
                n, _, _ = self._ops.requeue(source, wanted[i : i + REQUEUE_BATCH], REQUEUE_BATCH, bucket_ms)
                done += n
                if progress:
                    progress(n)
            return done
        # Everything that was in the source when we started, in batches: dead letters from
        # the head of their list, in-flight ids by one SSCAN pass over processing.
        budget = self._source_size(source)
        cursor = "0"
        while budget > 0:
            n, examined, cursor = self._ops.requeue(source, [], min(REQUEUE_BATCH, budget), bucket_ms, cursor)
            budget -= examined
            done += n
            if progress:
                progress(n)
            if source == "dead" and examined == 0 or source == "processing" and cursor == "0":
                break
        return done

    def _source_size(self, source: str) -> int:
        key = self.keys.dead if source == "dead" else self.keys.processing
        fn = self.client.llen if source == "dead" else self.client.scard
        return int(self._guarded(lambda: fn(key), key))

    def purge(self, *, source: PurgeSource = "waiting", progress: Callable[[int], None] | None = None) -> int:
        """Delete every message of a source (``all``: every message); seq, config and dedup keys stay."""
        if source not in ("waiting", "delayed", "dead", "all"):
            raise InvalidArgument(
                f"purge source must be one of waiting, delayed, dead, all, not {source!r}")
        sources = ("waiting", "delayed", "dead", "processing") if source == "all" else (source,)
        total = 0
        for src in sources:
            position: tuple[int, str] = (0, "0")
            done = False
            while not done:
                n, position, done = self._ops.purge_step(src, BATCH, position, self.settings.bucket_ms)
                total += n
                if progress and n:
                    progress(n)
        return total

    def destroy(self) -> None:
        """Delete every key of the queue and forget its name."""
        batch: list[bytes] = []
        for key in self.client.scan_iter(match=self.keys.pattern, count=1000):
            batch.append(key)
            if len(batch) >= BATCH:
                self.client.unlink(*batch)
                batch.clear()
        if batch:
            self.client.unlink(*batch)
        self._guarded(lambda: self.client.srem(self.keys.registry, self.name), self.keys.registry)
        self._registered, self._held = False, {}

    # -- reading --------------------------------------------------------------------

    def length(self) -> int:
        """Messages waiting to be claimed (not delayed, not in flight)."""
        return int(self._guarded(lambda: self.client.scard(self.keys.items), self.keys.items))

    def __len__(self) -> int:
        return self.length()

    def stats(self) -> QueueStats:
        waiting, processing, delayed, dead, oldest, now = self._ops.stats()
        age = None if oldest is None else max(0.0, (int(now) - int(oldest)) / 1000.0)
        return QueueStats(int(waiting), int(processing), int(delayed), int(dead), age)

    def peek(self, count: int = 10, *, source: PeekSource = "waiting") -> list[Message]:
        """Read messages without claiming them; they carry no receipt."""
        if source not in ("waiting", "processing", "delayed", "dead"):
            raise InvalidArgument(
                f"peek source must be one of waiting, processing, delayed, dead, not {source!r}")
        whole_number("count", count, 0)
        return decode_messages(self._ops.peek(source, count), self, with_receipt=False)

    def check(self, *, repair: bool = False, settle: float = 1.0) -> CheckReport:
        """fsck: verify every message is in exactly one state; with ``repair``, fix what can
        be fixed without losing a message. Findings must hold for ``settle`` seconds, so a
        live operation caught between two commands is not mistaken for damage."""
        from .check import check_queue

        return check_queue(self, repair=repair, settle=settle)

    def worker(self, handler: Callable[[Message], Any] | None = None, **options: Any) -> Any:
        """Decorator: ``@queue.worker(concurrency=4)`` (or bare ``@queue.worker``) turns
        ``fn(message)`` into a Worker."""
        from .worker import Worker

        def decorate(handler: Callable[[Message], Any]) -> Worker:
            return Worker(self, handler, **options)

        return decorate if handler is None else decorate(handler)

    def __repr__(self) -> str:
        return f"Queue({self.name!r}, prefix={self.prefix!r})"


def _not_one(values: object, what: str, instead: str) -> None:
    """A str or bytes where an iterable of them is expected is one value, not many."""
    if isinstance(values, (str, bytes, bytearray, memoryview)):
        raise TypeError(f"{what} must be an iterable (a list), not one {type(values).__name__}; "
                        f"for one value use {instead}")


def _check_dedup_key(what: str, key: object) -> None:
    if key is not None and (not isinstance(key, str) or not key):
        raise InvalidArgument(f"{what} must be a non-empty str or None, not {key!r}")


def list_queues(client: redis.Redis, prefix: str = "kq") -> list[str]:
    """Names of the queues registered under ``prefix`` (those that were ever written to)."""
    key = registry_key(validate_prefix(prefix))
    try:
        return sorted(n.decode() if isinstance(n, bytes) else str(n) for n in client.smembers(key))
    except ResponseError as exc:
        raise keyqueue_error(exc, key) from None


def _one_connection(queues: Sequence[Queue]) -> bool:
    """Whether one BLPOP can watch all their signal lists (same client, no cluster)."""
    first = queues[0]
    if type(first.client).__name__ == "RedisCluster":
        return len(queues) == 1
    return all(q.client is first.client for q in queues)


def _slice(queue: Queue, seconds: float) -> float:
    """One blocking wait: at most WAIT_SLICE, and well inside the client's socket timeout."""
    timeout = min(seconds, WAIT_SLICE)
    sock_timeout = connection_kwargs(queue.client).get("socket_timeout")
    if isinstance(sock_timeout, (int, float)) and sock_timeout > 0:
        timeout = min(timeout, sock_timeout / 2)
    return max(timeout, 0.01)


def claim_any(queues: Sequence[Queue], count: int, *, visibility_timeout: float | None = None,
              wait: float = 0.0, poll_first: bool = True) -> tuple[Queue | None, list[Message]]:
    """Claim from the first non-empty of ``queues`` (priority order), long-polling all of
    them for up to ``wait`` seconds. Returns the queue the messages came from.
    ``poll_first=False`` skips the first plain claim of the first queue (the caller's last
    wait just claimed it and found it empty)."""
    deadline = time.monotonic() + wait
    first = queues[0]
    vis_ms = None if visibility_timeout is None else seconds_arg(
        "visibility_timeout", visibility_timeout, allow_zero=False)
    skip_first = not poll_first
    while True:
        for q in queues[1:] if skip_first else queues:
            msgs = q.claim_many(count, visibility_timeout=visibility_timeout)
            if msgs:
                return q, msgs
        skip_first = True  # every later pass follows a wait that claimed the first queue
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return None, []
        reply = first._wait_then_claim(queues, remaining, count,
                                       first.settings.visibility_ms if vis_ms is None else vis_ms)
        got = first._take(reply)
        if got:
            return first, got


def wait_for_any(queues: Sequence[Queue], timeout: float) -> None:
    """Block until any of ``queues`` is signalled (a message may be there), at most ``timeout``.

    Queues on one client wait in a single BLPOP over their signal lists; otherwise (several
    clients, or a cluster, where the lists live in different slots) the first queue's list
    is watched and the others are polled between slices."""
    first = queues[0]
    if _one_connection(queues):
        keys = [q.keys.signal for q in queues]
        first._guarded(lambda: first.client.blpop(keys, timeout=_slice(first, timeout)), *keys)
    else:
        wait_for_any([first], min(timeout, 0.25))
