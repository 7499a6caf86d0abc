"""Worker: runs a handler on every message of one or more queues, SQS-consumer style.

Each of ``concurrency`` threads claims (queues in priority order), handles and acks its
own batches: no hand-off between threads, so an idle worker starts on a new message one
round trip after its long-poll wakes. How many messages a thread claims at once adapts to
how long handlers take, so fast handlers are fed and acked in batches while slow ones
never sit on work others could do; every ack still carries its own receipt. A heartbeat
extends what is held, the worker reaps its queues every second, and Redis outages are
logged and waited out.

What a handler did to its own message counts: one that acked, released or dead-lettered it
is taken at its word (the worker neither redoes it nor warns), and one that extended it
keeps the longer deadline (the heartbeat only ever pushes a deadline out). A handler that
raises any BaseException fails its delivery (retry with backoff, or dead letter); a
SystemExit or KeyboardInterrupt from a handler then also stops the worker gracefully and
run() re-raises it. A second SIGINT/SIGTERM during the grace period releases every held
message at once and makes run() raise KeyboardInterrupt (SIGINT) or SystemExit(143); a
third one (should releasing hang) ends the process at once.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from typing import Any, Callable, Sequence

from .health import warn_unless_noeviction
from .message import Message
from .queue import WAIT_SLICE, Queue, claim_any
from .reaper import reap_and_log
from .signals import on_stop_signals
from .worker_rules import (  # noqa: F401 (MAX_BACKOFF, backoff, describe: the names this module had)
    BATCH_SECONDS,
    MAX_BACKOFF,
    MAX_BATCH,
    RECOVERABLE,
    REAP_INTERVAL,
    TICK,
    Held,
    Steps,
    StopSignals,
    WorkerBase,
    backoff,
    describe,
    drive,
    is_async,
    outage_pause,
    retrying,
)

log = logging.getLogger("keyqueue.worker")

Handler = Callable[[Message], Any]


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
        if _is_async(handler):  # called here, it would return an unawaited coroutine: acked unrun
            raise InvalidArgument(f"handler {getattr(handler, '__name__', handler)!r} is an async "
                                  "function: this Worker runs plain functions")
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
        self._claiming: set[int] = set()  # threads inside a claim (it may return messages)
        self._avg_seconds = 0.0  # moving average of handler time
        #: A SystemExit/KeyboardInterrupt a handler raised: run() re-raises it.
        self._fatal: BaseException | None = None
        #: The second stop signal: release everything held now, then raise.
        self._forced: signal.Signals | None = None
        self.processed = 0
        self.failed = 0

    # -- control ------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop claiming; run() returns once in-flight work is done or the grace period ends."""
        self._stopping.set()

    def run(self, *, burst: bool = False) -> None:
        """Process messages until stop() or SIGINT/SIGTERM (or, with burst, until idle).

        Raises the SystemExit or KeyboardInterrupt a handler raised (after a graceful stop),
        and, after a second SIGINT/SIGTERM, KeyboardInterrupt or SystemExit(143) once every
        held message is released."""
        self._fatal = self._forced = None
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
        if self._forced is not None:
            if self._forced == signal.SIGINT:
                raise KeyboardInterrupt
            raise SystemExit(128 + int(self._forced))
        if self._fatal is not None:
            raise self._fatal

    def _on_signal(self, sig: signal.Signals) -> None:
        # Runs in the main thread between two bytecodes of run(): only flags here, no I/O
        # (the interrupted code may hold a connection pool's lock); run() acts on them.
        if self._forced is not None:  # releasing hangs (Redis unreachable?): leave at once
            log.warning("third %s: exiting now; messages not yet released return after their "
                        "deadlines", sig.name)
            os._exit(128 + int(sig))
        if self._stopping.is_set():
            log.warning("second %s: releasing every held message now, then exiting", sig.name)
            self._forced = sig
            return
        log.info("%s: stopping; in-flight messages get %.0fs to finish", sig.name, self.grace_period)
        self.stop()

    def _start(self) -> None:
        for client in {id(q.client): q.client for q in self.queues}.values():
            self._retrying(functools.partial(warn_unless_noeviction, client, log), "check Redis")
        self._log_settings()
        if self.reap_on_start:
            self._reap_all()

    def _log_settings(self) -> None:
        """One INFO line with the worker's options, one per queue with its settings in force."""
        log.info("worker options: concurrency=%d retry_backoff=%s grace_period=%s heartbeat=%s "
                 "reap_on_start=%s visibility_timeout=%s", self.concurrency, _number(self.retry_backoff),
                 _number(self.grace_period), "on" if self.heartbeat else "off",
                 "on" if self.reap_on_start else "off",
                 "per queue" if self.visibility_timeout is None else _number(self.visibility_timeout))
        for priority, q in enumerate(self.queues, 1):
            s = self._retrying(lambda: q.settings, f"read the settings of {q.name}")
            if s is None:  # stopped while Redis was unreachable
                return
            vis = _number(s.visibility_timeout)
            if self.visibility_timeout is not None:
                vis = f"{_number(self.visibility_timeout)} (worker; queue's {vis})"
            log.info("queue=%s priority=%d visibility_timeout=%s max_receives=%s bucket_seconds=%s "
                     "max_body_bytes=%d dedup_window=%s mode=%s", q.name, priority, vis,
                     _number(s.max_receives), _number(s.bucket_seconds), s.max_body_bytes,
                     _number(s.dedup_window), "scripted" if q.scripting else "script-free")

    def _timeout(self, q: Queue) -> float:
        """The visibility timeout this worker claims and heartbeats with on ``q``."""
        return self.visibility_timeout or q.settings.visibility_timeout

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
                with self._lock:
                    self._claiming.add(threading.get_ident())
                try:
                    q, msgs = claim_any(self.queues, self._batch_size(), poll_first=not waited_empty,
                                        visibility_timeout=self.visibility_timeout, wait=wait)
                    held = self._hold(q, msgs) if q is not None and msgs else []
                finally:
                    with self._lock:
                        self._claiming.discard(threading.get_ident())
                waited_empty = not msgs and wait > 0
                failures = 0
            except RECOVERABLE as exc:
                failures += 1
                self._pause(failures, f"claim failed: {exc}")
                continue
            if held:
                self._work(held)
            elif burst and idle:
                return

    def _hold(self, q: Queue, msgs: list[Message]) -> list[Held]:
        timeout = self._timeout(q)
        held = [Held(m, q, timeout) for m in msgs]
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
        """Run the handler; True when it succeeded and left its message to the worker (the
        message is then to be acked)."""
        m, q = h.message, h.queue
        h.started = time.monotonic()
        ok = False
        try:
            self.handler(m)
        except BaseException as exc:  # the handler's failure, not ours: whatever it raised
            self._failed(h, exc)
            if isinstance(exc, STOPPING_EXCEPTIONS):
                self._stop_for(h, exc)
        else:
            if m.settled is None:
                ok = True
            else:  # the handler acked, released or dead-lettered it: taken at its word
                self.processed += 1
                log.debug("handler %s queue=%s id=%s receives=%d itself", SETTLED_PAST[m.settled],
                          q.name, m.id, m.receives)
                self._forget([h])
        took = time.monotonic() - h.started
        self._avg_seconds = took if not self._avg_seconds else 0.9 * self._avg_seconds + 0.1 * took
        return ok

    def _stop_for(self, h: Held, exc: BaseException) -> None:
        """A handler raised SystemExit or KeyboardInterrupt: stop gracefully, and let run()
        re-raise the first such exception."""
        log.error("handler raised %r on queue=%s id=%s; stopping", exc, h.queue.name, h.message.id)
        with self._lock:
            if self._fatal is None:
                self._fatal = exc
        self.stop()

    def _failed(self, h: Held, exc: BaseException) -> None:
        m, q = h.message, h.queue
        error = describe(exc)
        self.failed += 1
        if m.settled is not None:  # the handler settled it, then raised: leave it so
            log.warning("failed queue=%s id=%s receives=%d: %s; the handler had %s it already, "
                        "so it is not released", q.name, m.id, m.receives, error, SETTLED_PAST[m.settled])
            self._forget([h])
            return
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
            # Skips what was settled since the handler returned (released by a second signal).
            q, msgs = group[0].queue, [h.message for h in group if h.message.settled is None]
            if not msgs:
                continue
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
            except KeyQueueError as exc:  # e.g. a key overwritten meanwhile: never kill the thread
                log.error("%s failed: %s", what, exc)
                return None
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
        """Every third of the visibility timeout, push each held deadline to a timeout from
        now, unless it already lies further out (the handler extended it): a heartbeat never
        pulls a deadline in. Messages the handler settled are left alone."""
        now = time.monotonic()
        with self._lock:
            held = list(self._held.values())
        for h in held:
            m = h.message
            if m.settled is not None:
                continue
            vis = self._timeout(h.queue)
            h.sync_deadline()
            if h.due - now > vis * 2 / 3:
                continue
            try:
                ok = h.queue.extend(m, vis)
            except RECOVERABLE as exc:
                log.warning("heartbeat failed for queue=%s id=%s: %s", h.queue.name, m.id, exc)
                continue
            if ok:
                h.due, h.seen = now + vis, m.deadline
                log.debug("extended queue=%s id=%s by %.1fs", h.queue.name, m.id, vis)
            elif m.settled is None:  # (not: the handler acked it as the heartbeat ran)
                h.due = now + vis  # warn once a timeout, not every pass
                log.warning("queue=%s id=%s: could not extend, it was redelivered meanwhile",
                            h.queue.name, m.id)

    def _reap_all(self) -> None:
        for q in self.queues:
            reap_and_log(q, log)

    # -- shutdown -----------------------------------------------------------------------

    def _shutdown(self, threads: list[threading.Thread]) -> None:
        end = time.monotonic() + self.grace_period
        while self._forced is None:
            alive = [t for t in threads if t.is_alive()]
            left = end - time.monotonic()
            if not alive or left <= 0:
                break
            alive[0].join(min(left, 0.1))  # short joins: a second signal is acted on at once
        if self._forced is not None:
            self._release_now()
            return
        with self._lock:
            left_over = list(self._held.values())
        for h in left_over:
            log.warning("grace period over: releasing queue=%s id=%s receives=%d",
                        h.queue.name, h.message.id, h.message.receives)
            self._give_back(h)

    def _release_now(self) -> None:
        """Second signal: every held message back to waiting, no delay, running handlers or
        not. A claim under way may still bring messages: wait for those (at most one
        long-poll slice) and release them too."""
        released = self._release_held()
        end = time.monotonic() + WAIT_SLICE + 1.0
        while time.monotonic() < end:
            with self._lock:
                if not self._claiming:
                    break
            time.sleep(0.01)
        released += self._release_held()
        log.warning("released %d held messages", released)

    def _release_held(self) -> int:
        with self._lock:
            held = list(self._held.values())
        n = 0
        for h in held:
            try:
                if h.message.settled is None:
                    n += h.queue.release(h.message)
            except RECOVERABLE as exc:
                log.error("could not release queue=%s id=%s (%s); it returns after its deadline",
                          h.queue.name, h.message.id, exc)
            self._forget([h])
        return n
