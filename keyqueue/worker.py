"""Worker: runs a handler on every message of one or more queues, SQS-consumer style.

One fetch loop claims in priority order and hands messages to ``concurrency`` handler
threads. How many messages it holds adapts to how long handlers take, so fast handlers
are fed (and acked) in batches while slow ones never sit on work others could do. Every
ack still carries its own receipt. A heartbeat extends what is held, a reap thread
recovers expired messages, and Redis outages are logged and waited out.
"""

from __future__ import annotations

import logging
import os
import queue as stdqueue
import signal
import threading
import time
from typing import Any, Callable, Iterable, Sequence

import redis

from .errors import InvalidArgument, KeyQueueError
from .health import warn_unless_noeviction
from .message import Message
from .queue import Queue, wait_for_any
from .signals import on_stop_signals

log = logging.getLogger("keyqueue.worker")

Handler = Callable[[Message], Any]

#: Most messages one claim takes, and most acks sent in one call.
MAX_BATCH = 100
#: The worker holds about this many seconds of handler work beyond what its threads run.
PREFETCH_SECONDS = 0.02
#: Longest retry delay after a handler failure (SQS's visibility limit is 12 h; ours is 5 min).
MAX_BACKOFF = 300.0
#: Seconds between reaps of the worker's queues.
REAP_INTERVAL = 1.0
#: Redis errors worth waiting out: the server is down, restarting or failing over.
TRANSIENT = (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError)


def backoff(retry_backoff: float, receives: int) -> float:
    """Delay before a failed message is retried: doubles with every receive, capped."""
    return min(retry_backoff * 2 ** max(receives - 1, 0), MAX_BACKOFF)


def describe(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= 2000 else text[:1997] + "..."


class Held:
    """A claimed message and when its deadline was last pushed back."""

    __slots__ = ("message", "queue", "extended", "started")

    def __init__(self, message: Message, queue: Queue) -> None:
        self.message = message
        self.queue = queue
        self.extended = time.monotonic()
        self.started: float | None = None


class Worker:
    """Runs ``handler(message)`` for every message of ``queues`` (a Queue or a list in
    priority order: the first non-empty queue wins).

    Args:
        concurrency: handler threads (they share the queues' connection pools).
        visibility_timeout: per-claim timeout; default the queue's setting.
        heartbeat: extend held messages while handlers run, so a handler may take longer
            than the visibility timeout without its message being redelivered.
        retry_backoff: a failed message is retried after ``retry_backoff * 2**(receives-1)``
            seconds (at most 300), or dead-lettered when it is out of receives.
        reap_on_start: recover expired messages (by deadline) before the first claim.
        grace_period: seconds in-flight handlers get to finish after stop() or SIGTERM.
    """

    def __init__(
        self,
        queues: Queue | Sequence[Queue],
        handler: Handler,
        *,
        concurrency: int = 1,
        visibility_timeout: float | None = None,
        heartbeat: bool = True,
        retry_backoff: float = 1.0,
        reap_on_start: bool = True,
        grace_period: float = 30.0,
    ) -> None:
        self.queues: list[Queue] = [queues] if isinstance(queues, Queue) else list(queues)
        if not self.queues or not all(isinstance(q, Queue) for q in self.queues):
            raise InvalidArgument("a Worker needs a Queue or a non-empty list of Queues")
        if not callable(handler):
            raise InvalidArgument(f"handler must be callable, not {handler!r}")
        if not isinstance(concurrency, int) or isinstance(concurrency, bool) or concurrency < 1:
            raise InvalidArgument(f"concurrency must be a whole number >= 1, not {concurrency!r}")
        for name, value in (("retry_backoff", retry_backoff), ("grace_period", grace_period)):
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not value >= 0:
                raise InvalidArgument(f"{name} must be a number of seconds >= 0, not {value!r}")
        if visibility_timeout is not None and not (
                isinstance(visibility_timeout, (int, float)) and visibility_timeout > 0):
            raise InvalidArgument(f"visibility_timeout must be > 0 seconds, not {visibility_timeout!r}")
        self.handler = handler
        self.concurrency = concurrency
        self.visibility_timeout = visibility_timeout
        self.heartbeat = heartbeat
        self.retry_backoff = float(retry_backoff)
        self.reap_on_start = reap_on_start
        self.grace_period = float(grace_period)

        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._held: dict[int, Held] = {}
        self._work: stdqueue.SimpleQueue[Held | None] = stdqueue.SimpleQueue()
        self._done: list[Held] = []  # handled, waiting for a batched ack
        self._slot_free = threading.Condition(self._lock)
        self._avg_seconds = 0.0  # moving average of handler time
        self.processed = 0
        self.failed = 0

    # -- control ------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop claiming; run() returns once in-flight work is done or the grace period ends."""
        self._stopping.set()
        with self._lock:
            self._slot_free.notify_all()

    def run(self, *, burst: bool = False) -> None:
        """Process messages until stop() or SIGINT/SIGTERM (or, with burst, until idle)."""
        restore = on_stop_signals(self._on_signal)
        threads = [threading.Thread(target=self._handle_loop, name=f"keyqueue-handler-{i}", daemon=True)
                   for i in range(self.concurrency)]
        threads.append(threading.Thread(target=self._maintain, name="keyqueue-maintain", daemon=True))
        try:
            self._start()
            for t in threads:
                t.start()
            self._fetch_loop(burst)
        finally:
            self._stopping.set()
            self._shutdown(threads)
            restore()

    def _on_signal(self, sig: signal.Signals) -> None:
        if self._stopping.is_set():
            log.warning("second %s: exiting now; held messages return after their deadlines", sig.name)
            os._exit(0)
        log.info("%s: stopping; in-flight messages get %.0fs to finish", sig.name, self.grace_period)
        self.stop()

    def _start(self) -> None:
        seen: set[int] = set()
        for q in self.queues:
            if id(q.client) not in seen:
                seen.add(id(q.client))
                self._retrying(lambda q=q: warn_unless_noeviction(q.client, log), "check Redis")
        if self.reap_on_start:
            self._reap_all()

    # -- claiming -----------------------------------------------------------------------

    def _capacity(self) -> int:
        """Messages to hold: one per thread, plus ~PREFETCH_SECONDS of work when handlers are fast."""
        avg = self._avg_seconds
        extra = MAX_BATCH if avg == 0 and self.processed > 0 else int(PREFETCH_SECONDS / avg) if avg else 0
        return self.concurrency + min(extra * self.concurrency, MAX_BATCH)

    def _fetch_loop(self, burst: bool) -> None:
        failures = 0
        while not self._stopping.is_set():
            with self._lock:
                while len(self._held) >= self._capacity() and not self._stopping.is_set():
                    self._slot_free.wait(0.1)
                free = self._capacity() - len(self._held)
            if self._stopping.is_set():
                return
            try:
                got = self._claim(min(free, MAX_BATCH))
                failures = 0
            except TRANSIENT as exc:
                failures += 1
                self._pause(failures, f"claim failed: {exc}")
                continue
            except KeyQueueError as exc:
                failures += 1
                self._pause(failures, f"claim refused: {exc}")
                continue
            if got:
                continue
            self._flush_acks()
            with self._lock:
                idle = not self._held
            if burst and idle:
                return
            try:
                wait_for_any(self.queues, 1.0 if not burst else 0.05)
            except (TRANSIENT + (KeyQueueError,)) as exc:
                failures += 1
                self._pause(failures, f"wait failed: {exc}")

    def _claim(self, count: int) -> bool:
        for q in self.queues:
            msgs = q.claim_many(count, visibility_timeout=self.visibility_timeout)
            if msgs:
                with self._lock:
                    for m in msgs:
                        h = Held(m, q)
                        self._held[id(m)] = h
                        self._work.put(h)
                for m in msgs:
                    log.debug("claimed queue=%s id=%s receives=%d", q.name, m.id, m.receives)
                return True
        return False

    def _pause(self, failures: int, why: str) -> None:
        delay = min(0.1 * 2 ** (failures - 1), 5.0)
        log.warning("%s; retrying in %.1fs", why, delay)
        self._stopping.wait(delay)

    # -- handling -----------------------------------------------------------------------

    def _handle_loop(self) -> None:
        while True:
            h = self._work.get()
            if h is None:
                return
            if self._stopping.is_set():
                self._give_back(h)  # never started: back to the queue at once
                continue
            self._handle(h)
            if self._work.empty():
                self._flush_acks()

    def _handle(self, h: Held) -> None:
        m = h.message
        h.started = time.monotonic()
        try:
            self.handler(m)
        except Exception as exc:  # the handler's failure, not ours
            self._failed(h, exc)
        else:
            with self._lock:
                self._done.append(h)
        finally:
            took = time.monotonic() - h.started
            self._avg_seconds = took if not self._avg_seconds else 0.9 * self._avg_seconds + 0.1 * took

    def _failed(self, h: Held, exc: Exception) -> None:
        m, q = h.message, h.queue
        error = describe(exc)
        self.failed += 1
        limit = q.settings.max_receives
        try:
            if limit is not None and m.receives >= limit:
                ok = q.dead_letter(m, error)
                log.error("dead-lettered queue=%s id=%s receives=%d after %s", q.name, m.id, m.receives, error)
            else:
                delay = backoff(self.retry_backoff, m.receives)
                ok = q.release(m, delay=delay, error=error)
                log.warning("failed queue=%s id=%s receives=%d: %s; retry in %.1fs",
                            q.name, m.id, m.receives, error, delay)
            if not ok:
                log.warning("queue=%s id=%s was redelivered meanwhile; its new delivery decides",
                            q.name, m.id)
        except (TRANSIENT + (KeyQueueError,)) as exc2:
            log.error("could not release queue=%s id=%s (%s); it returns after its deadline",
                      q.name, m.id, exc2)
        self._forget([h])

    def _flush_acks(self) -> None:
        with self._lock:
            done, self._done = self._done, []
        if not done:
            return
        by_queue: dict[int, list[Held]] = {}
        for h in done:
            by_queue.setdefault(id(h.queue), []).append(h)
        for group in by_queue.values():
            q = group[0].queue
            msgs = [h.message for h in group]
            for attempt in range(1, 6):
                try:
                    acked = q.ack_many(msgs)
                    break
                except TRANSIENT as exc:
                    if self._stopping.wait(min(0.1 * 2 ** attempt, 2.0)) and attempt >= 3:
                        acked = 0
                        log.error("could not ack %d messages of %s: %s", len(msgs), q.name, exc)
                        break
            else:
                acked = 0
                log.error("could not ack %d messages of %s; they will be redelivered", len(msgs), q.name)
            self.processed += len(msgs)
            if acked < len(msgs):
                log.warning("queue=%s: %d of %d acks were stale (redelivered meanwhile)",
                            q.name, len(msgs) - acked, len(msgs))
            for m in msgs:
                log.debug("acked queue=%s id=%s receives=%d", q.name, m.id, m.receives)
        self._forget(done)

    def _forget(self, done: Iterable[Held]) -> None:
        with self._lock:
            for h in done:
                self._held.pop(id(h.message), None)
            self._slot_free.notify_all()

    def _give_back(self, h: Held) -> None:
        try:
            h.queue.release(h.message)
        except (TRANSIENT + (KeyQueueError,)) as exc:
            log.warning("could not release queue=%s id=%s (%s); it returns after its deadline",
                        h.queue.name, h.message.id, exc)
        self._forget([h])

    # -- heartbeat and reaping ----------------------------------------------------------

    def _maintain(self) -> None:
        next_reap = time.monotonic() + REAP_INTERVAL
        while not self._stopping.wait(0.1):
            if self.heartbeat:
                self._extend_held()
            if time.monotonic() >= next_reap:
                self._reap_all()
                next_reap = time.monotonic() + REAP_INTERVAL
            self._flush_acks()

    def _extend_held(self) -> None:
        now = time.monotonic()
        with self._lock:
            held = list(self._held.values())
        for h in held:
            vis = self.visibility_timeout or h.queue.settings.visibility_timeout
            if now - h.extended < vis / 3:
                continue
            try:
                if h.queue.extend(h.message, vis):
                    h.extended = now
                    log.debug("extended queue=%s id=%s by %.1fs", h.queue.name, h.message.id, vis)
                else:
                    h.extended = now
                    log.warning("queue=%s id=%s: could not extend, it was redelivered meanwhile",
                                h.queue.name, h.message.id)
            except (TRANSIENT + (KeyQueueError,)) as exc:
                log.warning("heartbeat failed for queue=%s id=%s: %s", h.queue.name, h.message.id, exc)

    def _reap_all(self) -> None:
        for q in self.queues:
            try:
                r = q.reap()
                if r.total:
                    log.info("reaped queue=%s requeued=%d dead_lettered=%d delayed_released=%d",
                             q.name, r.requeued, r.dead_lettered, r.delayed_released)
            except (TRANSIENT + (KeyQueueError,)) as exc:
                log.warning("reap of queue=%s failed: %s", q.name, exc)

    def _retrying(self, fn: Callable[[], Any], what: str) -> Any:
        failures = 0
        while not self._stopping.is_set():
            try:
                return fn()
            except TRANSIENT as exc:
                failures += 1
                self._pause(failures, f"{what} failed: {exc}")
        return None

    # -- shutdown -----------------------------------------------------------------------

    def _shutdown(self, threads: list[threading.Thread]) -> None:
        for _ in range(self.concurrency):
            self._work.put(None)
        end = time.monotonic() + self.grace_period
        for t in threads:
            t.join(max(0.0, end - time.monotonic()))
        self._flush_acks()
        with self._lock:
            left = list(self._held.values())
        for h in left:
            log.warning("grace period over: releasing queue=%s id=%s receives=%d",
                        h.queue.name, h.message.id, h.message.receives)
            self._give_back(h)
