"""keyqueue.aio.Worker: ``async def`` handlers, ``concurrency`` at once on one event loop,
doing all the thread worker does (what happens to a claimed message is written once, in
base.py and steps.py).

Each of ``concurrency`` lanes (tasks) claims (queues in priority order), handles and acks
its own batches, as the thread worker's threads do, batches adapting to how long handlers
take. The lanes take turns to claim, so an idle worker holds one long-poll, whatever its
concurrency. Each handler runs in a task of its own: whatever it raises (any BaseException,
a CancelledError too) fails its delivery, and a SystemExit or KeyboardInterrupt then stops
the worker and run() re-raises it. A heartbeat extends what is held (also through the grace
period), the worker reaps its queues every second, and Redis outages are logged and waited
out. A handler still running ``timeout`` seconds after it started has its delivery failed
(as if it raised HandlerTimeout) and its task cancelled; its lane goes on with its batch.

``stop()`` is a plain call (from the loop or any thread): claims under way are cancelled (one
cancelled while it waits takes nothing; one cancelled as Redis hands it messages leaves them
to return at their deadline), claimed messages not yet started go back at once, running
handlers get ``grace_period``; then their tasks are cancelled and their messages released.
``stop(now=True)`` releases every held message at once. run() installs no signal handlers
(the application owns its loop); ``run_process`` does, for ``keyqueue worker``.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from typing import Any, Awaitable, Callable, Sequence, TypeVar

import redis

from ..aio.message import Message
from ..core.queue_core import WAIT_SLICE, list_queues_op
from ..face import QueueFace, claim_any_plan
from ..health import judge_eviction
from ..settings import QueueSettings
from ..transport.aio import run, run_plan
from .base import WorkerBase
from .reaping import log_reap
from .rules import RECOVERABLE
from .signals import StopSignals, on_loop_stop_signals
from .steps import End, Held, Pause, Steps, outage_pause, resume

log = logging.getLogger("keyqueue.worker")

T = TypeVar("T")
Handler = Callable[[Message], Awaitable[Any]]

#: Seconds the handler tasks cancelled at the end (grace period over, stop(now=True)) get to
#: end before run() stops waiting for them.
CANCEL_WAIT = 1.0


def run_leaving_deaf_tasks(main: Awaitable[None]) -> None:
    """``asyncio.run(main)``, but for its end: the tasks still running (a handler that caught
    its cancellation and went on) are cancelled and given CANCEL_WAIT, then left behind with
    the loop, where asyncio.run would wait for them without end (the process then outlives
    its grace period while its message, released, runs elsewhere)."""
    loop = asyncio.new_event_loop()
    try:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(main)
    finally:
        left = [t for t in asyncio.all_tasks(loop) if not t.done()]
        for t in left:
            t.cancel()
        if left:
            loop.run_until_complete(asyncio.wait(left, timeout=CANCEL_WAIT))
        deaf = [t for t in left if not t.done()]
        if deaf:
            log.warning("%d task(s) went on after their cancellation: the worker exits without them", len(deaf))
            for t in deaf:  # (said once here: not again as "destroyed but pending" at exit)
                t._log_destroy_pending = False  # type: ignore[attr-defined]
        else:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
        asyncio.set_event_loop(None)
        loop.close()


async def _first(*aws: Awaitable[Any]) -> None:
    """Wait until one of ``aws`` is done; cancel the others."""
    tasks = [asyncio.ensure_future(a) for a in aws]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in tasks:
            t.cancel()


class Worker(WorkerBase[QueueFace, Handler]):
    """Runs ``await handler(message)`` for every message of ``queues`` (a
    ``keyqueue.aio.Queue`` or a list of them in priority order: the first non-empty queue
    wins), ``concurrency`` handlers at once (default 10) as tasks on the running loop.

    ``Worker(queues, handler, *, concurrency=10, visibility_timeout=None, heartbeat=True,
    retry_backoff=1.0, reap_on_start=True, grace_period=30.0, timeout=None,
    metrics_port=None)``: the options of ``keyqueue.Worker``
    (``keyqueue.worker.base.WorkerBase``).
    """

    awaited = True
    kind, queue_kind = "keyqueue.aio.Worker", "keyqueue.aio.Queue"
    default_concurrency = 10

    def _setup(self) -> None:
        self._stopping = self._now = self._finished = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_event: asyncio.Event | None = None  # set on the loop once stop() was called
        self._now_event: asyncio.Event | None = None  # ... and stop(now=True)
        self._claim_lock: asyncio.Lock | None = None  # one claim at a time
        self._claims: set[asyncio.Future[tuple[list[Held], bool]]] = set()  # claims under way
        self._waited_empty = False  # the last claim long-polled and found nothing
        self._warned_plain = False

    # -- control ------------------------------------------------------------------------

    @property
    def stopping(self) -> bool:
        return self._stopping

    def stop(self, *, now: bool = False) -> None:
        """Stop claiming; run() returns once in-flight handlers are done, or the grace
        period is over (their tasks are then cancelled and their messages released).
        ``now``: release every held message at once (what a second SIGINT does). A plain
        call, from the loop or from any thread."""
        self._stopping = True
        self._now = self._now or now
        loop = self._loop
        if loop is not None:
            try:
                loop.call_soon_threadsafe(self._wake)
            except RuntimeError:  # the loop closed meanwhile: nothing runs to be woken
                pass

    def _wake(self) -> None:
        """On the loop: let the waits see stop(); cancel the claims under way."""
        if self._stopping and self._stop_event is not None:
            self._stop_event.set()
            for claim in list(self._claims):
                claim.cancel()
        if self._now and self._now_event is not None:
            self._now_event.set()

    async def run(self, *, burst: bool = False) -> None:
        """Process messages until stop() (or, with burst, until the queues are empty and
        nothing is in flight). Raises the SystemExit or KeyboardInterrupt a handler raised,
        after a graceful stop. Cancelled, it releases what it holds, then re-raises."""
        if self._finished:  # a worker may run again once a run is over
            self._stopping = self._now = self._finished = False
        self._loop = asyncio.get_running_loop()
        self._stop_event, self._now_event = asyncio.Event(), asyncio.Event()
        self._claim_lock = asyncio.Lock()
        self._fatal = None
        self._wake()  # a stop() before run()
        lanes: list[asyncio.Task[None]] = []
        maintain: asyncio.Future[None] | None = None
        try:
            if await self._drive(self._start_steps()):
                lanes = [asyncio.ensure_future(self._lane(burst)) for _ in range(self.concurrency)]
                for lane in lanes:
                    lane.add_done_callback(self._lane_done)
                maintain = asyncio.ensure_future(self._drive(self._maintain_steps(until=lambda: False)))
                await _first(asyncio.wait(lanes), self._stop_event.wait())
            self.stop()
            await self._shutdown(lanes)
        except asyncio.CancelledError:  # the application is ending: give back what is held
            self.stop(now=True)
            await self._shutdown(lanes)
            raise
        finally:
            self._stopping = self._finished = True
            left = [t for t in [*lanes, maintain] if t is not None and not t.done()]
            for t in left:
                t.cancel()
            if left:
                await asyncio.wait(left, timeout=CANCEL_WAIT)
            self._loop = None
            if self.metrics is not None:  # (its shutdown waits for the server's poll)
                await asyncio.to_thread(self._stop_metrics)
            self._log_stopped()
        if self._fatal is not None:
            raise self._fatal

    def run_process(self, name: str, *, url: str | None = None, burst: bool = False, close: Sequence[Any] = ()) -> None:
        """run() as a process's main work (``keyqueue worker``), with ``asyncio.run``: first a
        warning per queue nobody created yet and a line saying what runs where (``name``:
        the handler; ``url``: where, by default where the first queue's client connects).
        SIGINT/SIGTERM are handled on the loop as the thread worker handles them: the first
        stops it (in-flight handlers get the grace period, return), a second releases what
        is held at once (KeyboardInterrupt for SIGINT, SystemExit(143) for SIGTERM), a third
        exits at once. At the end the queues close the clients they made, and ``close``
        (clients) is closed, on the loop they ran on."""
        signals = StopSignals(self.grace_period, lambda: self.stopping, self.stop, lambda: self.stop(now=True))

        async def main() -> None:
            restore = on_loop_stop_signals(asyncio.get_running_loop(), signals)
            try:
                try:
                    await self._drive(self._announce_steps(name, url))
                    await self.run(burst=burst)
                finally:
                    restore()
            finally:
                served: list[Any] = list(self.queues)  # keyqueue.aio.Queues (awaited)
                for q in served:
                    await q.aclose()
                for client in close:
                    await client.aclose()

        run_leaving_deaf_tasks(main())
        signals.reraise()

    def _lane_done(self, lane: asyncio.Task[None]) -> None:
        """A lane that ended on an error (a bug: lanes handle Redis' errors) stops the worker,
        and run() raises the error."""
        exc = None if lane.cancelled() else lane.exception()
        if exc is not None:
            log.error("worker task failed: %r; stopping", exc, exc_info=exc)
            with self._lock:
                self._fatal = self._fatal or exc
            self.stop()

    async def _drive(self, steps: Steps[T]) -> T:
        """Run shared steps on the loop: await each call, wait out each Pause (as
        ``steps.drive`` runs them in a thread)."""
        reply: Any = None
        error: Exception | None = None
        while not isinstance(step := resume(steps, reply, error), End):
            try:
                reply, error = await (self._pause(step) if isinstance(step, Pause) else step()), None
            except Exception as exc:
                reply, error = None, exc
        return step.result

    async def _pause(self, pause: Pause) -> None:
        if not pause.interruptible:
            await asyncio.sleep(pause.seconds)
        elif not self._stopping:
            assert self._stop_event is not None
            await _first(asyncio.sleep(pause.seconds), self._stop_event.wait())

    async def _check_eviction(self, client: Any) -> None:
        try:
            reply = await client.config_get("maxmemory-policy")
        except redis.ResponseError as exc:  # CONFIG disabled: the helper says what to check
            reply = exc
        judge_eviction(reply, log)

    async def _read_settings(self, q: Any) -> QueueSettings:
        return await q.load()

    async def _reap(self, q: Any) -> None:
        reply: Any
        try:
            reply = await q.reap()
        except RECOVERABLE as exc:
            reply = exc
        log_reap(q.name, reply, log)

    async def _queue_names(self, q: QueueFace) -> list[str]:
        return await run(q.client, list_queues_op(q.prefix))

    # -- one lane: claim, handle, ack -----------------------------------------------------

    async def _lane(self, burst: bool) -> None:
        failures = 0
        while not self._stopping:
            claim = asyncio.ensure_future(self._claim(burst))
            self._claims.add(claim)
            try:
                held, idle = await claim
            except asyncio.CancelledError:
                if self._stopping:  # stop() cancelled the claim: it took nothing
                    return
                raise
            except RECOVERABLE as exc:
                failures += 1
                await self._pause(outage_pause(failures, f"claim failed: {exc}"))
                continue
            finally:
                self._claims.discard(claim)
            failures = 0
            if held:
                await self._drive(self._work_steps(held))
            elif burst and idle:
                return

    async def _claim(self, burst: bool) -> tuple[list[Held], bool]:
        """One claim: waiting messages at once; otherwise a long-poll, the lanes taking
        turns (one long-poll at a time, whatever the concurrency). Also says whether the
        worker was idle (nothing held) as it claimed."""
        held = await self._claim_now(0.0, poll_first=True)
        if held or self._stopping or (burst and not self._held and not self._held_back()):
            return held, not self._held
        assert self._claim_lock is not None
        async with self._claim_lock:
            idle = not self._held
            if self._stopping:
                return [], idle
            # Burst ends once the queues are empty and nothing is in flight; otherwise
            # long-poll: the claim runs in Redis the moment a message arrives.
            held_back = burst and self._held_back()
            wait = 0.0 if burst and idle and not held_back else (0.05 if burst and not held_back else WAIT_SLICE)
            held = await self._claim_now(wait, poll_first=not self._waited_empty)
            self._waited_empty = not held and wait > 0
            return held, idle and not self._held_back()

    async def _claim_now(self, wait: float, poll_first: bool) -> list[Held]:
        """Claim a batch, held (for heartbeats and release) the moment it arrives."""
        q, msgs = await run_plan(
            claim_any_plan(self.queues, self._batch_size(), self.visibility_timeout, wait, poll_first)
        )
        return self._hold(q, msgs) if q is not None and msgs else []

    async def _invoke(self, h: Held) -> BaseException | None:
        """The handler in a task of its own (the worker may cancel it at the end of the
        grace period): None when it returned, else what it raised."""
        task = h.task = asyncio.ensure_future(self._call(h.message))
        await asyncio.wait([task])  # (not `await task`: that would hand a cancellation on)
        return asyncio.CancelledError() if task.cancelled() else task.result()

    def _timed_out_steps(self, h: Held) -> Steps[None]:
        """Cancel the handler's task (its lane goes on); a handler that swallows the
        cancellation holds its lane until it returns, but no longer its message."""
        if h.task is not None:
            h.task.cancel()
        return
        yield  # (a generator)

    async def _call(self, m: Any) -> BaseException | None:
        try:
            result = self.handler(m)
            if inspect.isawaitable(result):
                await result
            elif not self._warned_plain:
                self._warned_plain = True
                log.warning(
                    "handler %s returned %r, not an awaitable: it ran on the event loop, "
                    "blocking it; keyqueue.aio.Worker runs `async def` handlers "
                    "(keyqueue.Worker runs plain functions, in threads)",
                    getattr(self.handler, "__name__", repr(self.handler)),
                    result,
                )
        except BaseException as exc:  # the handler's failure, not ours: whatever it raised
            return exc
        return None

    # -- shutdown -----------------------------------------------------------------------

    async def _shutdown(self, lanes: list[asyncio.Task[None]]) -> None:
        """Running handlers get the grace period (cut short by stop(now=True)); what is held
        after it is released and its handler's task cancelled."""
        assert self._now_event is not None
        await self._end_claims()
        if lanes and not self._now:
            await _first(asyncio.wait(lanes, timeout=self.grace_period), self._now_event.wait())
        running = [h.task for h in self._held_now() if h.task is not None]
        released = 0
        if self._now:
            released = await self._drive(self._release_held_steps())
        else:
            await self._drive(self._grace_over_steps())
        for task in running:
            task.cancel()
        if lanes:
            await asyncio.wait(lanes, timeout=CANCEL_WAIT)
        if self._now:
            released += await self._drive(self._release_held_steps())
            log.warning("released %d held messages", released)

    async def _end_claims(self) -> None:
        """Cancel the claims under way (see the module docstring) and wait until
        they end: what one took meanwhile is held, to be given back. On Python 3.11 a
        cancellation can be lost (asyncio.wait_for, inside redis-py, swallows one that comes
        as a command is sent, and the long-poll goes on): so cancel again until they end,
        at most a long-poll slice and a second."""
        end = time.monotonic() + WAIT_SLICE + 1.0
        while time.monotonic() < end:
            pending = [claim for claim in self._claims if not claim.done()]
            if not pending:
                return
            for claim in pending:
                claim.cancel()
            await asyncio.wait(pending, timeout=0.05)
