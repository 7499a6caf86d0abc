"""What happens to a message once claimed (handle, fail, ack, give back, heartbeat),
written once for both workers, as generators in the style of ``keyqueue.core``.

A step yields a call to make (a ``functools.partial`` of a queue method, or of the
worker's own ``_invoke``) or a ``Pause``, and is sent back the call's result; a Redis
error the call raised is thrown back into it, so an outage is handled once too. The thread
worker makes the calls (``drive``), the asyncio worker awaits them; both walk the steps
with a ``Walker``.
"""

from __future__ import annotations

import functools
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Generator, TypeVar, Union

from ..connection import TRANSIENT, outage_delay
from ..errors import KeyQueueError
from .rules import RECOVERABLE, SETTLED_OUTCOME, SETTLED_PAST, backoff, describe

if TYPE_CHECKING:
    from ..message import BaseMessage

log = logging.getLogger("keyqueue.worker")

T = TypeVar("T")


@dataclass(frozen=True)
class Pause:
    """A step: wait this long; ``interruptible``: cut short when the worker stops."""

    seconds: float
    interruptible: bool = True


Step = Union[Callable[[], Any], Pause]
Steps = Generator[Step, Any, T]


def drive(steps: Steps[T], pause: Callable[[float], Any]) -> T:
    """Run ``steps`` in this thread: make each call, wait out each Pause with ``pause``
    (``threading.Event.wait``: cut short once the worker stops). A call's Exception goes
    back into the steps, which handle Redis' errors; a BaseException ends the run. Written
    as one loop (no iterator, no context manager): it runs twice per message."""
    reply: Any = None
    error: Exception | None = None
    while not isinstance(step := resume(steps, reply, error), End):
        try:
            reply, error = pause(step.seconds) if isinstance(step, Pause) else step(), None
        except Exception as exc:
            reply, error = None, exc
    return step.result


class End:
    """What ``resume`` returns once the steps are over: ``result`` is what they returned."""

    __slots__ = ("result",)

    def __init__(self, result: Any) -> None:
        self.result = result


def resume(steps: Steps[Any], reply: Any, error: Exception | None) -> Step | End:
    """The next step, given the last one's reply or the error its call raised (thrown into
    the steps); an ``End`` once they return."""
    try:
        return steps.send(reply) if error is None else steps.throw(error)
    except StopIteration as stop:
        return End(stop.value)


def outage_pause(failures: int, why: str) -> Pause:
    """The wait after the ``failures``-th failure in a row (0.1 s doubling to 5 s), logged."""
    delay = outage_delay(failures)
    log.warning("%s; retrying in %.1fs", why, delay)
    return Pause(delay)


def retrying(
    fn: Callable[[], Any],
    what: str,
    stopping: Callable[[], bool],
    attempts: int | None = None,
    fatal: tuple[type[Exception], ...] = (),
) -> Steps[Any]:
    """fn(), retried with backoff through Redis outages; None if it never succeeded (or,
    with no limit of attempts, once the worker stops). ``fatal``: errors raised as they come
    (``REFUSED`` at start: a wrong password must fail, not wait forever)."""
    failures = 0
    while attempts is None or failures < attempts:
        try:
            return (yield fn)
        except fatal:
            raise
        except TRANSIENT as exc:
            failures += 1
            if stopping() and attempts is None:
                return None
            yield outage_pause(failures, f"{what} failed: {exc}")
        except KeyQueueError as exc:  # e.g. a key overwritten meanwhile: never kill the thread
            log.error("%s failed: %s", what, exc)
            return None
    return None


class Held:
    """A claimed message, with where the worker believes its deadline is.

    ``due`` is that deadline on this process's monotonic clock, so heartbeats never depend
    on the skew between this host's clock and Redis'. ``seen`` is ``message.deadline`` (the
    server's clock) as of ``due``: when the handler moves the deadline (``msg.extend``), the
    heartbeat shifts ``due`` by the same amount. ``abandoned``: given back by the worker
    while its handler ran (grace period over, second signal, timeout); ``ended``: its
    handler is over; ``task``: what runs its handler (an asyncio task, or a thread)."""

    __slots__ = ("message", "queue", "due", "seen", "started", "ended", "abandoned", "task")

    def __init__(self, message: BaseMessage, queue: Any, due: float) -> None:
        self.message = message
        self.queue = queue
        self.due = due
        self.seen = message.deadline
        self.started: float | None = None
        self.ended = False
        self.abandoned = False
        self.task: Any = None

    def sync_deadline(self) -> None:
        """Take in a deadline someone else (the handler) set on the message."""
        current = self.message.deadline
        if current is not None and self.seen is not None and current != self.seen:
            self.due += current - self.seen
        self.seen = current


def fail(h: Held, exc: BaseException, retry_backoff: float) -> Steps[str]:
    """A handler raised: release the message with backoff and the error as last_error, or
    dead-letter it when it is out of receives; a message the handler settled stays so.
    Returns the outcome for the worker's metrics: "retry" or "dead"."""
    m, q = h.message, h.queue
    error = describe(exc)
    if m.settled is not None:
        log.warning(
            "failed queue=%s id=%s receives=%d: %s; the handler had %s it already, so it is not released",
            q.name,
            m.id,
            m.receives,
            error,
            SETTLED_PAST[m.settled],
        )
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
            log.warning("failed queue=%s id=%s receives=%d: %s; retry in %.1fs", q.name, m.id, m.receives, error, delay)
        if not ok:
            log.warning("queue=%s id=%s was redelivered meanwhile; its new delivery decides", q.name, m.id)
    except RECOVERABLE as exc2:
        log.error("could not release queue=%s id=%s (%s); it returns after its deadline", q.name, m.id, exc2)
    return outcome


def throttled(h: Held, seconds: float) -> Steps[str]:
    """A handler raised ``Throttle``: throttle its queue and give the message back at once
    without using up a receive (unless the handler settled it). Logged at DEBUG: a throttled
    queue is flow control, not a failure. The outcome for the metrics: "retry"."""
    m, q = h.message, h.queue
    if m.settled is not None:
        try:
            yield functools.partial(q.throttle, seconds)
        except RECOVERABLE as exc:
            log.error("could not throttle queue=%s (%s)", q.name, exc)
        return SETTLED_OUTCOME[m.settled]
    try:
        ok = yield functools.partial(q.release_throttled, m, seconds)
        log.debug("throttled queue=%s for %.3fs; id=%s given back", q.name, seconds, m.id)
        if not ok:
            log.warning("queue=%s id=%s was redelivered meanwhile; its new delivery decides", q.name, m.id)
    except RECOVERABLE as exc:
        log.error("could not throttle queue=%s id=%s (%s); it returns after its deadline", q.name, m.id, exc)
    return "retry"


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
        acked = yield from retrying(
            functools.partial(q.ack_many, msgs), f"ack of {len(msgs)} on {q.name}", stopping, attempts=8
        )
        covered += len(msgs)
        if acked is None:
            log.error("could not ack %d messages of %s; they will be redelivered", len(msgs), q.name)
        elif acked < len(msgs):
            log.warning(
                "queue=%s: %d of %d acks were stale (redelivered meanwhile)", q.name, len(msgs) - acked, len(msgs)
            )
        if log.isEnabledFor(logging.DEBUG):
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
        log.log(
            level,
            "could not release queue=%s id=%s (%s); it returns after its deadline",
            h.queue.name,
            h.message.id,
            exc,
        )
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
