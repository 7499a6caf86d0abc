"""What both workers are: their options, the messages they hold and the order of their
steps (start, work a batch, maintain, stop). A subclass only claims, runs its handlers
(threads or tasks) and shuts down its own way."""

from __future__ import annotations

import functools
import logging
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Generic, Iterable, Sequence, TypeVar

from ..connection import REFUSED, TRANSIENT, connection_kwargs
from ..errors import HandlerTimeout, InvalidArgument, Throttle
from ..face import QueueFace
from ..keys import closest
from ..settings import QueueSettings, check_seconds, whole_number
from .metrics import METRICS_HOST, WorkerMetrics
from .rules import REAP_INTERVAL, SETTLED_OUTCOME, SETTLED_PAST, STOPPING_EXCEPTIONS, TICK, batch_size, number
from .steps import Held, Pause, Steps, ack, fail, give_back, heartbeat, retrying, throttled

if TYPE_CHECKING:
    from ..message import BaseMessage

log = logging.getLogger("keyqueue.worker")

QueueT = TypeVar("QueueT", bound=QueueFace)
HandlerT = TypeVar("HandlerT")
W = TypeVar("W", bound="WorkerBase[Any, Any]")


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
        timeout: seconds a handler may run; one still running then no longer holds its
            message: its delivery is failed as if the handler had raised HandlerTimeout
            (the asyncio worker cancels its task; a thread cannot be stopped, so the thread
            worker stops counting it toward ``concurrency``). None: no limit.
        metrics_port: serve ``keyqueue_worker_handled_total{queue,outcome}`` and
            ``keyqueue_worker_handler_seconds{queue}`` on this port (0: any free one) while
            run() runs, on ``metrics_host`` (loopback by default); needs prometheus_client.
    """

    #: The queues it serves, and what it and they are called in error messages.
    #: Whether it serves keyqueue.aio.Queues (and awaits handlers) or blocking Queues.
    awaited: bool
    kind, queue_kind = "Worker", "Queue"
    default_concurrency = 1
    #: Whether a handler past its timeout keeps what runs it (a thread that cannot be
    #: stopped): its batch is then taken over and the claims go on elsewhere.
    gives_up_lanes = False

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
        timeout: float | None = None,
        metrics_port: int | None = None,
        metrics_host: str = METRICS_HOST,
    ) -> None:
        many = isinstance(queues, Iterable) and not isinstance(queues, QueueFace)  # (a queue of the other kind)
        items: list[Any] = list(queues) if many else [queues]  # type: ignore[arg-type]
        self.queues: list[QueueT] = items
        if not self.queues or not all(isinstance(q, QueueFace) and q.awaited == self.awaited for q in self.queues):
            raise InvalidArgument(f"a {self.kind} needs a {self.queue_kind} or a non-empty list of them")
        if not callable(handler):
            raise InvalidArgument(f"handler must be callable, not {handler!r}")
        self.handler = handler
        self.concurrency = whole_number(
            "concurrency", self.default_concurrency if concurrency is None else concurrency, 1
        )
        self.visibility_timeout = (
            None
            if visibility_timeout is None
            else check_seconds("visibility_timeout", visibility_timeout, allow_zero=False)
        )
        self.heartbeat = heartbeat
        self.retry_backoff = check_seconds("retry_backoff", retry_backoff)
        self.reap_on_start = reap_on_start
        self.grace_period = check_seconds("grace_period", grace_period)
        self.timeout = None if timeout is None else check_seconds("timeout", timeout, allow_zero=False)
        self.metrics = None if metrics_port is None else WorkerMetrics(metrics_port, metrics_host)

        self._lock = threading.Lock()
        self._held: dict[int, Held] = {}  # every claimed, unfinished message, for heartbeats
        self._avg_seconds = 0.0  # moving average of handler time
        #: A SystemExit/KeyboardInterrupt a handler raised: run() re-raises it.
        self._fatal: BaseException | None = None
        self.processed = 0
        self.failed = 0
        self._setup()

    # -- options --------------------------------------------------------------------------

    def options(self) -> dict[str, Any]:
        """The keyword options this worker runs with (no metrics: no metrics host either)."""
        return dict(
            concurrency=self.concurrency,
            visibility_timeout=self.visibility_timeout,
            heartbeat=self.heartbeat,
            retry_backoff=self.retry_backoff,
            reap_on_start=self.reap_on_start,
            grace_period=self.grace_period,
            timeout=self.timeout,
            metrics_port=None if self.metrics is None else self.metrics.port,
            metrics_host=METRICS_HOST if self.metrics is None else self.metrics.host,
        )

    def with_options(self: W, **changes: Any) -> W:
        """A new worker of this class, with this one's queues, handler and options but for
        ``changes`` (``queues=``, ``handler=`` or any option): how ``keyqueue worker``
        lets its command line override a worker made with ``@queue.worker``."""
        return type(self)(**{"queues": self.queues, "handler": self.handler, **self.options(), **changes})

    # -- what a subclass provides ---------------------------------------------------------

    def _setup(self) -> None:
        """The subclass's own state, made once the options are checked."""

    @property
    def stopping(self) -> bool:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def run_process(self, name: str, *, url: str | None = None, burst: bool = False, close: Sequence[Any] = ()) -> None:
        """Run the worker as a process's main work (``keyqueue worker``), saying first what
        runs where; ``close``: clients to close at the end."""
        raise NotImplementedError

    def _check_eviction(self, client: Any) -> Any:
        """Warn unless the client's Redis has maxmemory-policy noeviction."""
        raise NotImplementedError

    def _read_settings(self, q: Any) -> Any:
        """The settings in force on ``q`` (read from Redis if need be)."""
        raise NotImplementedError

    def _reap(self, q: Any) -> Any:
        """One reap of ``q``, logged when it moved something; failures are logged too."""
        raise NotImplementedError

    def _queue_names(self, q: Any) -> Any:
        """The names registered where ``q`` lives (its client, its prefix)."""
        raise NotImplementedError

    def _invoke(self, h: Held) -> Any:
        """Run the handler on ``h.message``: None when it returned, else what it raised."""
        raise NotImplementedError

    def _timed_out_steps(self, h: Held) -> Steps[None]:
        """``h``'s handler ran past the timeout and its delivery was failed: stop or give up
        what runs it."""
        raise NotImplementedError
        yield  # (a generator)

    # -- the log --------------------------------------------------------------------------

    def _log_stopped(self) -> None:
        """The last line of a run: an operator reading a log after SIGTERM sees it drained."""
        left = len(self._held_now())
        log.info(
            "worker stopped: %d messages processed, %d failed, %s",
            self.processed,
            self.failed,
            "nothing left held" if not left else f"{left} still held (they come back after their timeout)",
        )

    def _log_options(self) -> None:
        """One INFO line with the worker's options (one per queue follows)."""
        log.info(
            "worker options: concurrency=%d retry_backoff=%s grace_period=%s heartbeat=%s "
            "reap_on_start=%s visibility_timeout=%s timeout=%s",
            self.concurrency,
            number(self.retry_backoff),
            number(self.grace_period),
            "on" if self.heartbeat else "off",
            "on" if self.reap_on_start else "off",
            "per queue" if self.visibility_timeout is None else number(self.visibility_timeout),
            number(self.timeout),
        )

    def _announce_steps(self, name: str, url: str | None) -> Steps[None]:
        """Before a process runs the worker (``run_process``): a warning per queue nobody has
        created yet (a typo, or producers to come), then what runs where (``url``: where the
        first queue's client connects). Redis unreachable: no warning yet (the worker waits
        for it, as through any outage); Redis refusing the credentials or the ACL: raised."""
        known: dict[tuple[int, str], list[str]] = {}
        try:
            for q in self.queues:
                key = (id(q.client), q.prefix)
                if key not in known:
                    known[key] = yield functools.partial(self._queue_names, q)
                if q.name not in known[key]:
                    log.warning(
                        "queue %r does not exist yet under prefix %r at %s%s; waiting for producers",
                        q.name,
                        q.prefix,
                        client_url(q.client),
                        closest(q.name, known[key]),
                    )
        except REFUSED:
            raise
        except TRANSIENT:
            pass
        log.info(
            "worker %s on %s at %s, concurrency %d",
            name,
            ", ".join(q.name for q in self.queues),
            url or client_url(self.queues[0].client),
            self.concurrency,
        )

    # -- start and maintain ---------------------------------------------------------------

    def _start_steps(self) -> Steps[bool]:
        """Check Redis' eviction policy, log the options and each queue's settings in force,
        reap if ``reap_on_start``; each retried through outages, while Redis refusing the
        credentials or the ACL is raised. False when the worker was stopped before it could
        start. Starts serving the metrics first, if asked."""
        if self.metrics is not None:
            self.metrics.start()
        for client in {id(q.client): q.client for q in self.queues}.values():
            yield from retrying(
                functools.partial(self._check_eviction, client), "check Redis", lambda: self.stopping, fatal=REFUSED
            )
        self._log_options()
        for priority, q in enumerate(self.queues, 1):
            s = yield from retrying(
                functools.partial(self._read_settings, q),
                f"read the settings of {q.name}",
                lambda: self.stopping,
                fatal=REFUSED,
            )
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
        """Every TICK, the handlers past the timeout and the heartbeat; every REAP_INTERVAL
        (until the worker stops), a reap of every queue; all this until ``until()``."""
        next_reap = time.monotonic() + REAP_INTERVAL
        while True:
            yield Pause(TICK, interruptible=False)
            if until():
                return
            if self.timeout is not None:
                yield from self._expire_steps(self.timeout)
            if self.heartbeat:
                yield from heartbeat(self._held_now(), self._timeout)
            if not self.stopping and time.monotonic() >= next_reap:
                yield from self._reap_steps()
                next_reap = time.monotonic() + REAP_INTERVAL

    def _expire_steps(self, timeout: float) -> Steps[None]:
        """Fail each delivery whose handler has run ``timeout`` seconds, as if it had raised
        HandlerTimeout (no more heartbeats for it); then the subclass stops or gives up what
        runs the handler, whose return or ack later changes nothing."""
        now = time.monotonic()
        for h in self._held_now():
            if h.started is None or now - h.started < timeout or not self._take(h):
                continue
            m, q = h.message, h.queue
            log.error(
                "handler still running after its timeout of %ss on queue=%s id=%s receives=%d; failing the delivery",
                number(timeout),
                q.name,
                m.id,
                m.receives,
            )
            self.failed += 1
            error = HandlerTimeout(f"the handler was still running after the worker's timeout of {number(timeout)}s")
            result = yield from fail(h, error, self.retry_backoff)
            self._forget([h])
            if self.metrics is not None:
                self.metrics.observe(q.name, result, now - h.started)
            yield from self._timed_out_steps(h)

    def _take(self, h: Held) -> bool:
        """The timeout takes ``h`` from its handler, unless the handler ended first (or the
        worker gave the message back meanwhile)."""
        with self._lock:
            if h.ended or h.abandoned:
                return False
            h.abandoned = True
            return True

    def _ended(self, h: Held) -> bool:
        """``h``'s handler is over: False when the timeout took its message meanwhile."""
        with self._lock:
            h.ended = True
            return not h.abandoned

    def _timeout(self, q: Any) -> float:
        """The visibility timeout this worker claims and heartbeats with on ``q``."""
        return self.visibility_timeout or q.settings.visibility_timeout

    def _held_back(self) -> bool:
        """Whether a queue's limits hold its claims back (messages wait that a rate limit,
        max_in_flight or a throttle keeps for later): a burst run waits for them, sleeping."""
        now = time.monotonic()
        return any(q._core.limited_until > now for q in self.queues)

    def _batch_size(self) -> int:
        return batch_size(self._avg_seconds, self.processed + self.failed)

    # -- held messages --------------------------------------------------------------------

    def _hold(self, q: Any, msgs: Sequence[BaseMessage]) -> list[Held]:
        due = time.monotonic() + self._timeout(q)
        held = [Held(m, q, due) for m in msgs]
        with self._lock:
            for h in held:
                self._held[id(h.message)] = h
        if log.isEnabledFor(logging.DEBUG):
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
            if self.timeout is not None and not self._ended(h):  # failed for its timeout meanwhile
                if self.gives_up_lanes:  # (the rest of the batch was taken over too)
                    return
                continue
            if outcome is None and not h.abandoned and h.message.settled is None and self.metrics is None:
                self._took(time.monotonic() - h.started)  # the common case, without a generator
                done.append(h)
            elif (yield from self._handled(h, outcome)):
                done.append(h)
        covered = yield from ack(done, lambda: self.stopping)
        self.processed += covered  # (not `+= yield from`: that reads processed before the ack)
        self._forget(done)

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
                log.debug(
                    "handler %s queue=%s id=%s receives=%d itself", SETTLED_PAST[m.settled], q.name, m.id, m.receives
                )
                self._forget([h])
        elif isinstance(outcome, Throttle):  # flow control: not a failure
            result = yield from throttled(h, outcome.seconds)
            self._forget([h])
        else:  # the handler's failure, not ours: whatever it raised
            self.failed += 1
            result = yield from fail(h, outcome, self.retry_backoff)
            self._forget([h])
            if isinstance(outcome, STOPPING_EXCEPTIONS):
                self._stop_for(h, outcome)
        if self.metrics is not None:
            self.metrics.observe(q.name, result, handler_seconds)
        self._took(time.monotonic() - (h.started or time.monotonic()))
        return ok

    def _took(self, seconds: float) -> None:
        """A handler's time, into the moving average that sizes the claims."""
        self._avg_seconds = seconds if not self._avg_seconds else 0.9 * self._avg_seconds + 0.1 * seconds

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

    # -- the end --------------------------------------------------------------------------

    def _grace_over_steps(self) -> Steps[None]:
        """The grace period is over: release what is still held (handlers running or not)."""
        for h in self._held_now():
            log.warning(
                "grace period over: releasing queue=%s id=%s receives=%d",
                h.queue.name,
                h.message.id,
                h.message.receives,
            )
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


def log_queue_settings(priority: int, q: Any, s: QueueSettings, visibility_timeout: float | None) -> None:
    """The start-up line of one queue: its priority and the settings in force."""
    vis = number(s.visibility_timeout)
    if visibility_timeout is not None:
        vis = f"{number(visibility_timeout)} (worker; queue's {vis})"
    log.info(
        "queue=%s priority=%d visibility_timeout=%s max_receives=%s bucket_seconds=%s "
        "max_body_bytes=%d dedup_window=%s retention=%s dead_retention=%s rate_limit=%s max_in_flight=%s mode=%s",
        q.name,
        priority,
        vis,
        number(s.max_receives),
        number(s.bucket_seconds),
        s.max_body_bytes,
        number(s.dedup_window),
        number(s.retention),
        number(s.dead_retention),
        s.rate_limit or "none",  # (as loaded: claims read the limits in force every time)
        number(s.max_in_flight),
        "scripted" if q.scripting else "script-free",
    )


def client_url(client: Any) -> str:
    """Where a client connects, without its password (for a log line)."""
    kw = connection_kwargs(client)
    if kw.get("path"):
        return f"unix://{kw['path']}"
    return f"redis://{kw.get('host', 'localhost')}:{kw.get('port', 6379)}/{kw.get('db', 0)}"
