"""Worker: runs a handler on every message of one or more queues, SQS-consumer style.

Each of ``concurrency`` threads claims (queues in priority order), handles and acks its
own batches: no hand-off between threads, so an idle worker starts on a new message one
round trip after its long-poll wakes. How many messages a thread claims at once adapts to
how long handlers take, so fast handlers are fed and acked in batches while slow ones
never sit on work others could do; every ack still carries its own receipt. A heartbeat
extends what is held, the worker reaps its queues every second, and Redis outages are
logged and waited out.
"""

from __future__ import annotations

import functools
import logging
import os
import signal
import threading
import time
from typing import Any, Callable, Sequence

from .connection import TRANSIENT
from .errors import InvalidArgument, KeyQueueError
from .health import warn_unless_noeviction
from .message import Message
from .queue import WAIT_SLICE, Queue, claim_any
from .reaper import reap_and_log
from .settings import check_seconds, whole_number
from .signals import on_stop_signals

log = logging.getLogger("keyqueue.worker")

Handler = Callable[[Message], Any]

#: Most messages one thread claims at once (and acks in one call).
MAX_BATCH = 100
#: A thread claims about this many seconds of handler work at once.
BATCH_SECONDS = 0.02
#: Longest retry delay after a handler failure.
MAX_BACKOFF = 300.0
#: Seconds between reaps of the worker's queues.
REAP_INTERVAL = 1.0
#: Errors that fail one call but must not stop a worker.
RECOVERABLE = TRANSIENT + (KeyQueueError,)


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
        self.handler = handler
        self.concurrency = whole_number("concurrency", concurrency, 1)
        self.visibility_timeout = None if visibility_timeout is None else check_seconds(
            "visibility_timeout", visibility_timeout, allow_zero=False)
        self.heartbeat = heartbeat
        self.retry_backoff = check_seconds("retry_backoff", retry_backoff)
        self.reap_on_start = reap_on_start
        self.grace_period = check_seconds("grace_period", grace_period)

        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._held: dict[int, Held] = {}  # every claimed, unfinished message, for heartbeats
        self._avg_seconds = 0.0  # moving average of handler time
        self.processed = 0
        self.failed = 0

    # -- control ------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop claiming; run() returns once in-flight work is done or the grace period ends."""
        self._stopping.set()

    def run(self, *, burst: bool = False) -> None:
        """Process messages until stop() or SIGINT/SIGTERM (or, with burst, until idle)."""
        restore = on_stop_signals(self._on_signal)
        try:
            self._start()
            threads = [threading.Thread(target=self._thread_loop, args=(burst,), daemon=True,
                                        name=f"keyqueue-worker-{i}") for i in range(self.concurrency)]
            maintain = threading.Thread(target=self._maintain, name="keyqueue-maintain", daemon=True)
            for t in [*threads, maintain]:
                t.start()
            while any(t.is_alive() for t in threads) and not self._stopping.is_set():
                threads[0].join(0.1)  # short joins: the main thread stays free for signals
            self._stopping.set()
            self._shutdown([*threads, maintain])
        finally:
            self._stopping.set()
            restore()

    def _on_signal(self, sig: signal.Signals) -> None:
        if self._stopping.is_set():
            log.warning("second %s: exiting now; held messages return after their deadlines", sig.name)
            os._exit(0)
        log.info("%s: stopping; in-flight messages get %.0fs to finish", sig.name, self.grace_period)
        self.stop()

    def _start(self) -> None:
        for client in {id(q.client): q.client for q in self.queues}.values():
            self._retrying(functools.partial(warn_unless_noeviction, client, log), "check Redis")
        if self.reap_on_start:
            self._reap_all()

    # -- one thread: claim, handle, ack ---------------------------------------------------

    def _batch_size(self) -> int:
        """One message for slow handlers; about BATCH_SECONDS of work for fast ones."""
        avg = self._avg_seconds
        if avg <= 0:
            return 1 if self.processed + self.failed == 0 else MAX_BATCH
        return max(1, min(MAX_BATCH, int(BATCH_SECONDS / avg)))

    def _thread_loop(self, burst: bool) -> None:
        failures = 0
        waited_empty = False
        while not self._stopping.is_set():
            with self._lock:
                idle = not self._held
            try:
                # Burst ends once the queues are empty and nothing is in flight; otherwise
                # long-poll: the claim runs in Redis the moment a message arrives.
                wait = 0.0 if burst and idle else (0.05 if burst else WAIT_SLICE)
                q, msgs = claim_any(self.queues, self._batch_size(), poll_first=not waited_empty,
                                    visibility_timeout=self.visibility_timeout, wait=wait)
                waited_empty = not msgs and wait > 0
                failures = 0
            except RECOVERABLE as exc:
                failures += 1
                self._pause(failures, f"claim failed: {exc}")
                continue
            if msgs:
                assert q is not None
                self._work(self._hold(q, msgs))
            elif burst and idle:
                return

    def _hold(self, q: Queue, msgs: list[Message]) -> list[Held]:
        held = [Held(m, q) for m in msgs]
        with self._lock:
            for h in held:
                self._held[id(h.message)] = h
        for m in msgs:
            log.debug("claimed queue=%s id=%s receives=%d", q.name, m.id, m.receives)
        return held

    def _work(self, batch: list[Held]) -> None:
        done: list[Held] = []
        for i, h in enumerate(batch):
            if self._stopping.is_set():
                for rest in batch[i:]:
                    self._give_back(rest)  # never started: back to the queue at once
                break
            if self._handle(h):
                done.append(h)
        self._ack(done)

    def _handle(self, h: Held) -> bool:
        """Run the handler; True when it succeeded (the message is then to be acked)."""
        h.started = time.monotonic()
        try:
            self.handler(h.message)
            ok = True
        except Exception as exc:  # the handler's failure, not ours
            self._failed(h, exc)
            ok = False
        took = time.monotonic() - h.started
        self._avg_seconds = took if not self._avg_seconds else 0.9 * self._avg_seconds + 0.1 * took
        return ok

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
        except RECOVERABLE as exc2:
            log.error("could not release queue=%s id=%s (%s); it returns after its deadline",
                      q.name, m.id, exc2)
        self._forget([h])

    def _ack(self, done: list[Held]) -> None:
        """Ack a thread's finished batch, one call per queue, retrying through short outages."""
        by_queue: dict[int, list[Held]] = {}
        for h in done:
            by_queue.setdefault(id(h.queue), []).append(h)
        for group in by_queue.values():
            q, msgs = group[0].queue, [h.message for h in group]
            acked = self._retrying(lambda: q.ack_many(msgs), f"ack of {len(msgs)} on {q.name}",
                                   attempts=8)
            self.processed += len(msgs)
            if acked is None:
                log.error("could not ack %d messages of %s; they will be redelivered", len(msgs), q.name)
            elif acked < len(msgs):
                log.warning("queue=%s: %d of %d acks were stale (redelivered meanwhile)",
                            q.name, len(msgs) - acked, len(msgs))
            for m in msgs:
                log.debug("acked queue=%s id=%s receives=%d", q.name, m.id, m.receives)
        self._forget(done)

    def _forget(self, done: list[Held]) -> None:
        with self._lock:
            for h in done:
                self._held.pop(id(h.message), None)

    def _give_back(self, h: Held) -> None:
        try:
            h.queue.release(h.message)
        except RECOVERABLE as exc:
            log.warning("could not release queue=%s id=%s (%s); it returns after its deadline",
                        h.queue.name, h.message.id, exc)
        self._forget([h])

    def _pause(self, failures: int, why: str) -> None:
        delay = min(0.1 * 2 ** (failures - 1), 5.0)
        log.warning("%s; retrying in %.1fs", why, delay)
        self._stopping.wait(delay)

    def _retrying(self, fn: Callable[[], Any], what: str, attempts: int | None = None) -> Any:
        """fn(), retried with backoff through Redis outages; None if it never succeeded."""
        failures = 0
        while attempts is None or failures < attempts:
            try:
                return fn()
            except TRANSIENT as exc:
                failures += 1
                if self._stopping.is_set() and attempts is None:
                    return None
                self._pause(failures, f"{what} failed: {exc}")
        return None

    # -- heartbeat and reaping ----------------------------------------------------------

    def _maintain(self) -> None:
        next_reap = time.monotonic() + REAP_INTERVAL
        while not self._stopping.wait(0.1):
            if self.heartbeat:
                self._extend_held()
            if time.monotonic() >= next_reap:
                self._reap_all()
                next_reap = time.monotonic() + REAP_INTERVAL

    def _extend_held(self) -> None:
        now = time.monotonic()
        with self._lock:
            held = list(self._held.values())
        for h in held:
            vis = self.visibility_timeout or h.queue.settings.visibility_timeout
            if now - h.extended < vis / 3:
                continue
            try:
                ok = h.queue.extend(h.message, vis)
            except RECOVERABLE as exc:
                log.warning("heartbeat failed for queue=%s id=%s: %s", h.queue.name, h.message.id, exc)
                continue
            h.extended = now
            if ok:
                log.debug("extended queue=%s id=%s by %.1fs", h.queue.name, h.message.id, vis)
            else:
                log.warning("queue=%s id=%s: could not extend, it was redelivered meanwhile",
                            h.queue.name, h.message.id)

    def _reap_all(self) -> None:
        for q in self.queues:
            reap_and_log(q, log)

    # -- shutdown -----------------------------------------------------------------------

    def _shutdown(self, threads: list[threading.Thread]) -> None:
        end = time.monotonic() + self.grace_period
        for t in threads:
            t.join(max(0.0, end - time.monotonic()))
        with self._lock:
            left = list(self._held.values())
        for h in left:
            log.warning("grace period over: releasing queue=%s id=%s receives=%d",
                        h.queue.name, h.message.id, h.message.receives)
            self._give_back(h)
