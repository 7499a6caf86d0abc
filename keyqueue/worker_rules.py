"""What the blocking Worker (``keyqueue.worker``) and the asyncio Worker
(``keyqueue.aio.worker``) share: their options, the rules (retry backoff, batch sizes, how an
error reads, what a failed delivery becomes, what the log says) and every step that touches
Redis once a message is claimed (handle, fail, ack, give back, heartbeat, release).

The steps are written once, as generators in the style of ``keyqueue.core``: each yields
a call to make (a ``functools.partial`` of a queue method, or of the worker's own
``_invoke``) or a ``Pause``, and is sent back the call's result; a Redis error the call
raised is thrown back into it, so an outage is handled once too. The blocking worker drives
them with ``drive`` (it calls); the asyncio worker awaits each call instead. Only how a
worker claims, runs its handlers at once (threads or tasks) and shuts down is its own.
"""

from __future__ import annotations

import functools
import inspect
import logging
import os
import signal
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Generator, Generic, Iterable, Iterator, Sequence, TypeVar, Union

from .connection import TRANSIENT, outage_delay
from .errors import InvalidArgument, KeyQueueError
from .face import QueueFace
from .message import Message
from .settings import QueueSettings, check_seconds, whole_number
from .worker_metrics import WorkerMetrics

log = logging.getLogger("keyqueue.worker")

T = TypeVar("T")
QueueT = TypeVar("QueueT", bound=QueueFace)
HandlerT = TypeVar("HandlerT")

#: Most messages one thread (or task) claims at once (and acks in one call).
MAX_BATCH = 100
#: A thread (or task) claims about this many seconds of handler work at once.
BATCH_SECONDS = 0.02
#: Longest retry delay after a handler failure.
MAX_BACKOFF = 300.0
#: Seconds between reaps of the worker's queues.
REAP_INTERVAL = 1.0
#: Seconds between two looks at what is held (heartbeats are due every third of a timeout).
TICK = 0.1
#: Errors that fail one call but must not stop a worker.
RECOVERABLE = TRANSIENT + (KeyQueueError,)
#: How a handler's own settlement reads in a log line.
SETTLED_PAST = {"ack": "acked", "release": "released", "dead_letter": "dead-lettered"}
#: The worker-metrics outcome of a message its handler settled itself.
SETTLED_OUTCOME = {"ack": "ok", "release": "retry", "dead_letter": "dead"}
#: Exceptions from a handler that stop the worker (after failing the delivery).
STOPPING_EXCEPTIONS = (SystemExit, KeyboardInterrupt)


# -- rules ------------------------------------------------------------------------------


def is_async(handler: object) -> bool:
    """An ``async def`` function, a callable object with one as ``__call__``, or a partial of one."""
    return any(inspect.iscoroutinefunction(f) for f in
               (handler, getattr(handler, "__call__", None), getattr(handler, "func", None)))


def backoff(retry_backoff: float, receives: int) -> float:
    """Delay before a failed message is retried: doubles with every receive, capped."""
    return min(retry_backoff * 2 ** max(receives - 1, 0), MAX_BACKOFF)


def describe(exc: BaseException) -> str:
    """``RuntimeError: boom`` (the type alone when there is no text), at most 2,000 chars."""
    detail = str(exc)
    text = f"{type(exc).__name__}: {detail}" if detail else type(exc).__name__
    return text if len(text) <= 2000 else text[:1997] + "..."


def number(v: float | int | None) -> str:
    """A setting as the start-up log shows it: ``30``, ``7.5``, ``none``."""
    if v is None:
        return "none"
    return str(int(v)) if float(v).is_integer() else f"{v:g}"


def batch_size(avg_seconds: float, handled: int) -> int:
    """One message for slow handlers; about BATCH_SECONDS of work for fast ones (and one
    for the very first claim, before anything is known)."""
    if avg_seconds <= 0:
        return 1 if handled == 0 else MAX_BATCH
    return max(1, min(MAX_BATCH, int(BATCH_SECONDS / avg_seconds)))


def outage_pause(failures: int, why: str) -> Pause:
    """The wait after the ``failures``-th failure in a row (0.1 s doubling to 5 s), logged."""
    delay = outage_delay(failures)
    log.warning("%s; retrying in %.1fs", why, delay)
    return Pause(delay)


class Held:
    """A claimed message, with where the worker believes its deadline is.

    ``due`` is that deadline on this process's monotonic clock, so heartbeats never depend
    on the skew between this host's clock and Redis'. ``seen`` is ``message.deadline`` (the
    server's clock) as of ``due``: when the handler moves the deadline (``msg.extend``), the
    heartbeat shifts ``due`` by the same amount. ``abandoned``: given back by the worker
    while its handler ran (grace period over, second signal); ``task``: the asyncio task
    running its handler."""

    __slots__ = ("message", "queue", "due", "seen", "started", "abandoned", "task")

    def __init__(self, message: Message, queue: Any, timeout: float) -> None:
        self.message = message
        self.queue = queue
        self.due = time.monotonic() + timeout
        self.seen = message.deadline
        self.started: float | None = None
        self.abandoned = False
        self.task: Any = None

    def sync_deadline(self) -> None:
        """Take in a deadline someone else (the handler) set on the message."""
        current = self.message.deadline
        if current is not None and self.seen is not None and current != self.seen:
            self.due += current - self.seen
        self.seen = current


# -- steps ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pause:
    """A step: wait this long; ``interruptible``: cut short when the worker stops."""

    seconds: float
    interruptible: bool = True


Step = Union[Callable[[], Any], Pause]
Steps = Generator[Step, Any, T]


class Stepper(Generic[T]):
    """Walks ``steps``: iterate it for each step, set ``reply`` (or, in ``answering()``, let
    the call's exception go back into the steps); ``result`` is what they returned."""

    def __init__(self, steps: Steps[T]) -> None:
        self.steps = steps
        self.reply: Any = None
        self.error: Exception | None = None
        self.result: Any = None

    def __iter__(self) -> Iterator[Step]:
        while True:
            try:
                step = self.steps.send(self.reply) if self.error is None else self.steps.throw(self.error)
            except StopIteration as stop:
                self.result = stop.value
                return
            self.reply, self.error = None, None
            yield step

    def answering(self) -> Stepper[T]:
        """``with stepper.answering():`` around a step's call (a plain context manager: this
        runs once per message, where @contextmanager's generator costs a microsecond)."""
        return self

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: Any) -> bool:
        if isinstance(exc, Exception):  # back into the steps, which handle Redis errors
            self.error = exc
            return True
        return False


def drive(steps: Steps[T], pause: Callable[[float], Any]) -> T:
    """Run ``steps`` in this thread: make each call, wait out each Pause with ``pause``
    (``threading.Event.wait``: cut short once the worker stops)."""
    stepper = Stepper(steps)
    for step in stepper:
        with stepper.answering():
            stepper.reply = pause(step.seconds) if isinstance(step, Pause) else step()
    return stepper.result


def retrying(fn: Callable[[], Any], what: str, stopping: Callable[[], bool],
             attempts: int | None = None) -> Steps[Any]:
    """fn(), retried with backoff through Redis outages; None if it never succeeded (or,
    with no limit of attempts, once the worker stops)."""
    failures = 0
    while attempts is None or failures < attempts:
        try:
            return (yield fn)
        except TRANSIENT as exc:
            failures += 1
            if stopping() and attempts is None:
                return None
            yield outage_pause(failures, f"{what} failed: {exc}")
        except KeyQueueError as exc:  # e.g. a key overwritten meanwhile: never kill the thread
            log.error("%s failed: %s", what, exc)
            return None
    return None


def fail(h: Held, exc: BaseException, retry_backoff: float) -> Steps[str]:
    """A handler raised: release the message with backoff and the error as last_error, or
    dead-letter it when it is out of receives; a message the handler settled stays so.
    Returns the outcome for the worker's metrics: "retry" or "dead"."""
    m, q = h.message, h.queue
    error = describe(exc)
    if m.settled is not None:
        log.warning("failed queue=%s id=%s receives=%d: %s; the handler had %s it already, "
                    "so it is not released", q.name, m.id, m.receives, error, SETTLED_PAST[m.settled])
        return SETTLED_OUTCOME[m.settled]
    limit = q.settings.max_receives
    outcome = "retry"
    try:
        if limit is not None and m.receives >= limit:
            outcome = "dead"
            ok = yield functools.partial(q.dead_letter, m, error)
            log.error("dead-lettered queue=%s id=%s receives=%d after %s", q.name, m.id, m.receives, error)
        else:
            delay = backoff(retry_backoff, m.receives)
            ok = yield functools.partial(q.release, m, delay=delay, error=error)
            log.warning("failed queue=%s id=%s receives=%d: %s; retry in %.1fs",
                        q.name, m.id, m.receives, error, delay)
        if not ok:
            log.warning("queue=%s id=%s was redelivered meanwhile; its new delivery decides", q.name, m.id)
    except RECOVERABLE as exc2:
        log.error("could not release queue=%s id=%s (%s); it returns after its deadline", q.name, m.id, exc2)
    return outcome


def ack(done: list[Held], stopping: Callable[[], bool]) -> Steps[int]:
    """Ack a finished batch, one call per queue, retrying through short outages; the number
    of messages it covered."""
    by_queue: dict[int, list[Held]] = {}
    for h in done:
        by_queue.setdefault(id(h.queue), []).append(h)
    covered = 0
    for group in by_queue.values():
        # Skips what was settled since the handler returned (released by a second signal).
        q, msgs = group[0].queue, [h.message for h in group if h.message.settled is None]
        if not msgs:
            continue
        acked = yield from retrying(functools.partial(q.ack_many, msgs), f"ack of {len(msgs)} on {q.name}",
                                    stopping, attempts=8)
        covered += len(msgs)
        if acked is None:
            log.error("could not ack %d messages of %s; they will be redelivered", len(msgs), q.name)
        elif acked < len(msgs):
            log.warning("queue=%s: %d of %d acks were stale (redelivered meanwhile)",
                        q.name, len(msgs) - acked, len(msgs))
        for m in msgs:
            log.debug("acked queue=%s id=%s receives=%d", q.name, m.id, m.receives)
    return covered


def give_back(h: Held, level: int = logging.WARNING) -> Steps[bool]:
    """Release a held message at once (no delay), unless it was settled already."""
    if h.message.settled is not None:
        return False
    try:
        return bool((yield functools.partial(h.queue.release, h.message)))
    except RECOVERABLE as exc:
        log.log(level, "could not release queue=%s id=%s (%s); it returns after its deadline",
                h.queue.name, h.message.id, exc)
        return False


def heartbeat(held: list[Held], timeout: Callable[[Any], float]) -> Steps[None]:
    """Every third of the visibility timeout, push each held deadline to a timeout from
    now, unless it already lies further out (the handler extended it): a heartbeat never
    pulls a deadline in. Messages the handler settled are left alone."""
    now = time.monotonic()
    for h in held:
        m = h.message
        if m.settled is not None:
            continue
        vis = timeout(h.queue)
        h.sync_deadline()
        if h.due - now > vis * 2 / 3:
            continue
        try:
            ok = yield functools.partial(h.queue.extend, m, vis)
        except RECOVERABLE as exc:
            log.warning("heartbeat failed for queue=%s id=%s: %s", h.queue.name, m.id, exc)
            continue
        if ok:
            h.due, h.seen = now + vis, m.deadline
            log.debug("extended queue=%s id=%s by %.1fs", h.queue.name, m.id, vis)
        elif m.settled is None:  # (not: the handler acked it as the heartbeat ran)
            h.due = now + vis  # warn once a timeout, not every pass
            log.warning("queue=%s id=%s: could not extend, it was redelivered meanwhile", h.queue.name, m.id)


def log_queue_settings(priority: int, q: Any, s: QueueSettings, visibility_timeout: float | None) -> None:
    """The start-up line of one queue: its priority and the settings in force."""
    vis = number(s.visibility_timeout)
    if visibility_timeout is not None:
        vis = f"{number(visibility_timeout)} (worker; queue's {vis})"
    log.info("queue=%s priority=%d visibility_timeout=%s max_receives=%s bucket_seconds=%s "
             "max_body_bytes=%d dedup_window=%s mode=%s", q.name, priority, vis,
             number(s.max_receives), number(s.bucket_seconds), s.max_body_bytes,
             number(s.dedup_window), "scripted" if q.scripting else "script-free")


# -- what both workers are --------------------------------------------------------------


class WorkerBase(Generic[QueueT, HandlerT]):
    """The options, the held messages and the per-message steps of a worker; a subclass
    claims, runs handlers (``_invoke``) and stops its own way.

    Args:
        queues: a Queue, or a list of them in priority order (the first non-empty one wins).
        handler: called with each message; returns to ack it, raises to fail it.
        concurrency: handlers at once (threads, or tasks on one loop); None: the class's
            ``default_concurrency``.
        visibility_timeout: per-claim timeout; default the queue's setting.
        heartbeat: extend held messages while handlers run, so a handler may take longer
            than the visibility timeout without its message being redelivered.
        retry_backoff: a failed message is retried after ``retry_backoff * 2**(receives-1)``
            seconds (at most 300), or dead-lettered when it is out of receives.
        reap_on_start: recover expired messages (by deadline) before the first claim.
        grace_period: seconds in-flight handlers get to finish after stop() or SIGTERM.
        metrics_port: serve ``keyqueue_worker_handled_total{queue,outcome}`` and
            ``keyqueue_worker_handler_seconds{queue}`` on this port (0: any free one) while
            run() runs, on ``metrics_host`` (loopback by default); needs prometheus_client.
    """

    #: The queues it serves, and what it and they are called in error messages.
    queue_class: type
    kind, queue_kind = "Worker", "Queue"
    default_concurrency = 1

    def __init__(
        self,
        queues: QueueT | Sequence[QueueT],
        handler: HandlerT,
        *,
        concurrency: int | None = None,
        visibility_timeout: float | None = None,
        heartbeat: bool = True,
        retry_backoff: float = 1.0,
        reap_on_start: bool = True,
        grace_period: float = 30.0,
        metrics_port: int | None = None,
        metrics_host: str = "127.0.0.1",
    ) -> None:
        many = isinstance(queues, Iterable) and not isinstance(queues, QueueFace)  # (a queue of the other kind)
        items: list[Any] = list(queues) if many else [queues]  # type: ignore[arg-type]
        self.queues: list[QueueT] = items
        if not self.queues or not all(isinstance(q, self.queue_class) for q in self.queues):
            raise InvalidArgument(f"a {self.kind} needs a {self.queue_kind} or a non-empty list of them")
        if not callable(handler):
            raise InvalidArgument(f"handler must be callable, not {handler!r}")
        self.handler = handler
        self.concurrency = whole_number("concurrency", self.default_concurrency if concurrency is None
                                        else concurrency, 1)
        self.visibility_timeout = None if visibility_timeout is None else check_seconds(
            "visibility_timeout", visibility_timeout, allow_zero=False)
        self.heartbeat = heartbeat
        self.retry_backoff = check_seconds("retry_backoff", retry_backoff)
        self.reap_on_start = reap_on_start
        self.grace_period = check_seconds("grace_period", grace_period)
        self.metrics = None if metrics_port is None else WorkerMetrics(metrics_port, metrics_host)

        self._lock = threading.Lock()
        self._held: dict[int, Held] = {}  # every claimed, unfinished message, for heartbeats
        self._avg_seconds = 0.0  # moving average of handler time
        #: A SystemExit/KeyboardInterrupt a handler raised: run() re-raises it.
        self._fatal: BaseException | None = None
        self.processed = 0
        self.failed = 0
        self._setup()

    # -- what a subclass provides ---------------------------------------------------------

    def _setup(self) -> None:
        """The subclass's own state, made once the options are checked."""

    @property
    def stopping(self) -> bool:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    # -- options --------------------------------------------------------------------------

    def _log_stopped(self) -> None:
        """The last line of a run: an operator reading a log after SIGTERM sees it drained."""
        left = len(self._held_now())
        log.info("worker stopped: %d messages processed, %d failed, %s", self.processed, self.failed,
                 "nothing left held" if not left else f"{left} still held (they come back after their timeout)")

    def _log_options(self) -> None:
        """One INFO line with the worker's options (one per queue follows)."""
        log.info("worker options: concurrency=%d retry_backoff=%s grace_period=%s heartbeat=%s "
                 "reap_on_start=%s visibility_timeout=%s", self.concurrency, number(self.retry_backoff),
                 number(self.grace_period), "on" if self.heartbeat else "off",
                 "on" if self.reap_on_start else "off",
                 "per queue" if self.visibility_timeout is None else number(self.visibility_timeout))

    def _check_eviction(self, client: Any) -> Any:
        """Warn unless the client's Redis has maxmemory-policy noeviction."""
        raise NotImplementedError

    def _read_settings(self, q: Any) -> Any:
        """The settings in force on ``q`` (read from Redis if need be)."""
        raise NotImplementedError

    def _reap(self, q: Any) -> Any:
        """One reap of ``q``, logged when it moved something; failures are logged too."""
        raise NotImplementedError

    def _start_steps(self) -> Steps[bool]:
        """Check Redis' eviction policy, log the options and each queue's settings in force,
        reap if ``reap_on_start``; each retried through outages. False when the worker
        was stopped before it could start. Starts serving the metrics first, if asked."""
        if self.metrics is not None:
            self.metrics.start()
        for client in {id(q.client): q.client for q in self.queues}.values():
            yield from retrying(functools.partial(self._check_eviction, client), "check Redis",
                                lambda: self.stopping)
        self._log_options()
        for priority, q in enumerate(self.queues, 1):
            s = yield from retrying(functools.partial(self._read_settings, q), f"read the settings of {q.name}",
                                    lambda: self.stopping)
            if s is None:  # stopped while Redis was unreachable
                return False
            log_queue_settings(priority, q, s, self.visibility_timeout)
        if self.reap_on_start:
            yield from self._reap_steps()
        return not self.stopping

    def _reap_steps(self) -> Steps[None]:
        for q in self.queues:
            yield functools.partial(self._reap, q)

    def _maintain_steps(self, until: Callable[[], bool]) -> Steps[None]:
        """Every TICK, the heartbeat; every REAP_INTERVAL (until the worker stops), a reap of
        every queue; all this until ``until()``."""
        next_reap = time.monotonic() + REAP_INTERVAL
        while True:
            yield Pause(TICK, interruptible=False)
            if until():
                return
            if self.heartbeat:
                yield from heartbeat(self._held_now(), self._timeout)
            if not self.stopping and time.monotonic() >= next_reap:
                yield from self._reap_steps()
                next_reap = time.monotonic() + REAP_INTERVAL

    def _timeout(self, q: Any) -> float:
        """The visibility timeout this worker claims and heartbeats with on ``q``."""
        return self.visibility_timeout or q.settings.visibility_timeout

    def _batch_size(self) -> int:
        return batch_size(self._avg_seconds, self.processed + self.failed)

    # -- held messages --------------------------------------------------------------------

    def _hold(self, q: Any, msgs: Sequence[Message]) -> list[Held]:
        timeout = self._timeout(q)
        held = [Held(m, q, timeout) for m in msgs]
        with self._lock:
            for h in held:
                self._held[id(h.message)] = h
        for m in msgs:
            log.debug("claimed queue=%s id=%s receives=%d", q.name, m.id, m.receives)
        return held

    def _held_now(self) -> list[Held]:
        with self._lock:
            return list(self._held.values())

    def _forget(self, done: list[Held]) -> None:
        with self._lock:
            for h in done:
                self._held.pop(id(h.message), None)

    # -- one batch: handle, ack -----------------------------------------------------------

    def _work_steps(self, batch: list[Held]) -> Steps[None]:
        """Handle a claimed batch in order, then ack what succeeded in one call per queue;
        once the worker stops, what was not started goes back to the queue at once."""
        done: list[Held] = []
        for i, h in enumerate(batch):
            if self.stopping:
                for rest in batch[i:]:
                    yield from give_back(rest)
                    self._forget([rest])
                break
            h.started = time.monotonic()
            outcome = yield functools.partial(self._invoke, h)
            if (yield from self._handled(h, outcome)):
                done.append(h)
        covered = yield from ack(done, lambda: self.stopping)
        self.processed += covered  # (not `+= yield from`: that reads processed before the ack)
        self._forget(done)

    def _invoke(self, h: Held) -> Any:
        """Run the handler on ``h.message``: None when it returned, else what it raised."""
        raise NotImplementedError

    def _handled(self, h: Held, outcome: BaseException | None) -> Steps[bool]:
        """What the handler's run leaves to do; True when it returned and left its message
        to the worker (the message is then to be acked with its batch)."""
        m, q = h.message, h.queue
        ok = False
        handler_seconds = time.monotonic() - (h.started or time.monotonic())
        result = "retry"  # what the message became, for the metrics
        if h.abandoned:  # given back meanwhile (grace period over, second signal)
            pass
        elif outcome is None:
            if m.settled is None:
                ok, result = True, "ok"
            else:  # the handler acked, released or dead-lettered it: taken at its word
                result = SETTLED_OUTCOME[m.settled]
                self.processed += 1
                log.debug("handler %s queue=%s id=%s receives=%d itself", SETTLED_PAST[m.settled],
                          q.name, m.id, m.receives)
                self._forget([h])
        else:  # the handler's failure, not ours: whatever it raised
            self.failed += 1
            result = yield from fail(h, outcome, self.retry_backoff)
            self._forget([h])
            if isinstance(outcome, STOPPING_EXCEPTIONS):
                self._stop_for(h, outcome)
        if self.metrics is not None:
            self.metrics.observe(q.name, result, handler_seconds)
        took = time.monotonic() - (h.started or time.monotonic())
        self._avg_seconds = took if not self._avg_seconds else 0.9 * self._avg_seconds + 0.1 * took
        return ok

    def _stop_metrics(self) -> None:
        """Stop serving the metrics (run() is over); they are served again by the next run."""
        if self.metrics is not None:
            self.metrics.stop()

    def _stop_for(self, h: Held, exc: BaseException) -> None:
        """A handler raised SystemExit or KeyboardInterrupt: stop gracefully, and let run()
        re-raise the first such exception."""
        log.error("handler raised %r on queue=%s id=%s; stopping", exc, h.queue.name, h.message.id)
        with self._lock:
            if self._fatal is None:
                self._fatal = exc
        self.stop()

    # -- heartbeats and the end -----------------------------------------------------------

    def _grace_over_steps(self) -> Steps[None]:
        """The grace period is over: release what is still held (handlers running or not)."""
        for h in self._held_now():
            log.warning("grace period over: releasing queue=%s id=%s receives=%d",
                        h.queue.name, h.message.id, h.message.receives)
            h.abandoned = True
            yield from give_back(h)
            self._forget([h])

    def _release_held_steps(self) -> Steps[int]:
        """Second signal: every held message back to waiting, no delay, running handlers or
        not; how many were released."""
        released = 0
        for h in self._held_now():
            h.abandoned = True
            released += yield from give_back(h, logging.ERROR)
            self._forget([h])
        return released


class StopSignals:
    """SIGINT/SIGTERM for a running worker. The first stops it (``stop()``: in-flight
    handlers get the grace period); the second releases every held message at once
    (``force()``), after which the worker's runner calls ``reraise()``: KeyboardInterrupt
    for SIGINT, SystemExit(128+n) for another signal; a third (should releasing hang) ends
    the process at once. It only logs and sets flags: with ``signal.signal`` it runs
    between two bytecodes of the main thread, which may hold a connection pool's lock."""

    def __init__(self, grace_period: float, stopping: Callable[[], bool], stop: Callable[[], None],
                 force: Callable[[], None] = lambda: None) -> None:
        self.grace_period = grace_period
        self.stopping, self.stop, self.force = stopping, stop, force
        self.forced: signal.Signals | None = None

    def __call__(self, sig: signal.Signals) -> None:
        if self.forced is not None:  # releasing hangs (Redis unreachable?): leave at once
            log.warning("third %s: exiting now; messages not yet released return after their "
                        "deadlines", sig.name)
            os._exit(128 + int(sig))
        if self.stopping():
            log.warning("second %s: releasing every held message now, then exiting", sig.name)
            self.forced = sig
            self.force()
            return
        log.info("%s: stopping; in-flight messages get %.0fs to finish", sig.name, self.grace_period)
        self.stop()

    def reraise(self) -> None:
        if self.forced == signal.SIGINT:
            raise KeyboardInterrupt
        if self.forced is not None:
            raise SystemExit(128 + int(self.forced))
