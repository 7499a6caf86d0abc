"""keyqueue.Worker: runs a handler on every message of one or more queues, in threads.

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

A handler still running ``timeout`` seconds after it started has its delivery failed (as
if it raised HandlerTimeout). Its thread cannot be stopped: the worker stops counting it
toward ``concurrency`` (what the rest of its batch was gets acked or given back, and a new
thread takes its place); once ``concurrency`` threads are stuck, the worker stops,
releases what it holds and run() raises SystemExit(3), for a supervisor to start a fresh
process.

What happens to a message once claimed is written once (base.py, steps.py) and shared
with the asyncio worker (tasks.py); this module has the threads, the claims and the
shutdown.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Sequence

from ..core.queue_core import WAIT_SLICE, list_queues_op
from ..errors import InvalidArgument
from ..face import QueueFace, claim_any_plan
from ..health import warn_unless_noeviction
from ..message import Message
from ..settings import QueueSettings
from ..transport.sync import run, run_plan
from .base import WorkerBase
from .reaping import reap_and_log
from .rules import EXIT_STUCK, RECOVERABLE, is_async
from .signals import StopSignals, on_stop_signals
from .steps import Held, Steps, ack, drive, give_back, outage_pause

log = logging.getLogger("keyqueue.worker")

Handler = Callable[[Message], Any]


class Worker(WorkerBase[QueueFace, Handler]):
    """Runs ``handler(message)`` for every message of ``queues`` (a Queue or a list in
    priority order: the first non-empty queue wins), in ``concurrency`` threads (default
    1; they share the queues' connection pools).

    ``Worker(queues, handler, *, concurrency=1, visibility_timeout=None, heartbeat=True,
    retry_backoff=1.0, reap_on_start=True, grace_period=30.0, timeout=None,
    metrics_port=None)``: the options are those of every worker
    (``keyqueue.worker.base.WorkerBase``).
    """

    awaited = False
    gives_up_lanes = True

    def _setup(self) -> None:
        if is_async(self.handler):  # called here, it would return an unawaited coroutine: acked unrun
            raise InvalidArgument(
                f"handler {getattr(self.handler, '__name__', self.handler)!r} is an "
                "async function: this Worker runs plain functions; run it with "
                "keyqueue.aio.Worker (or @aio_queue.worker) on a keyqueue.aio.Queue"
            )
        self._stopping = threading.Event()
        self._claiming: set[int] = set()  # threads inside a claim (it may return messages)
        self._over = threading.Event()  # (one per run(): set once in-flight handlers are over)
        #: The stop signals of the current run(); a second one releases what is held now.
        self._signals = StopSignals(self.grace_period, self._stopping.is_set, self.stop)
        self._burst = False
        self._lane_number = 0
        self._lanes: list[threading.Thread] = []  # the threads counted toward concurrency
        self._stuck: set[threading.Thread] = set()  # threads given up, in handlers past the timeout
        self._batches: dict[threading.Thread, list[Held]] = {}  # the batch each thread works on

    # -- control ------------------------------------------------------------------------

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def stop(self) -> None:
        """Stop claiming; run() returns once in-flight work is done or the grace period ends."""
        self._stopping.set()

    def run(self, *, burst: bool = False) -> None:
        """Process messages until stop() or SIGINT/SIGTERM (or, with burst, until idle).

        Raises the SystemExit or KeyboardInterrupt a handler raised (after a graceful stop),
        and, after a second SIGINT/SIGTERM, KeyboardInterrupt or SystemExit(143) once every
        held message is released."""
        self._fatal = None
        self._signals = StopSignals(self.grace_period, self._stopping.is_set, self.stop)
        self._burst, self._lanes, self._stuck, self._batches = burst, [], set(), {}
        self._over = threading.Event()  # set once in-flight handlers are over or given up
        restore = on_stop_signals(self._signals)
        try:
            self._drive(self._start_steps())
            with self._lock:
                first = [self._new_lane() for _ in range(self.concurrency)]
            for t in first:
                t.start()
            maintain = threading.Thread(target=self._maintain, name="keyqueue-maintain", daemon=True)
            maintain.start()
            while not self._stopping.is_set():
                with self._lock:
                    lanes = [t for t in self._lanes if t.is_alive()]
                if not lanes:
                    break
                lanes[0].join(0.1)  # short joins: the main thread stays free for signals
            self._stopping.set()
            with self._lock:
                lanes = list(self._lanes)  # (not the stuck threads: they may never end)
            self._shutdown(lanes, maintain)
        finally:
            self._stopping.set()
            self._over.set()
            restore()
            self._stop_metrics()
            self._log_stopped()
        self._signals.reraise()
        if self._fatal is not None:
            raise self._fatal

    def run_process(self, name: str, *, url: str | None = None, burst: bool = False, close: Sequence[Any] = ()) -> None:
        """run() as a process's main work (``keyqueue worker``): first a warning per queue
        nobody created yet and a line saying what runs where (``name``: the handler; ``url``:
        where, by default where the first queue's client connects); ``close``: clients to
        close once run() is over."""
        try:
            self._drive(self._announce_steps(name, url))
            self.run(burst=burst)
        finally:
            for client in close:
                client.close()

    def _drive(self, steps: Steps[Any]) -> Any:
        return drive(steps, self._stopping.wait)

    def _check_eviction(self, client: Any) -> None:
        warn_unless_noeviction(client, log)

    def _read_settings(self, q: Any) -> QueueSettings:
        return q.settings

    def _reap(self, q: Any) -> None:
        reap_and_log(q, log)

    def _queue_names(self, q: QueueFace) -> list[str]:
        return run(q.client, list_queues_op(q.prefix))

    # -- one thread: claim, handle, ack ---------------------------------------------------

    def _new_lane(self) -> threading.Thread:
        """A thread counted toward concurrency, to be started (the caller holds the lock)."""
        self._lane_number += 1
        t = threading.Thread(
            target=self._thread_loop, args=(self._burst,), daemon=True, name=f"keyqueue-worker-{self._lane_number}"
        )
        self._lanes.append(t)
        return t

    def _thread_loop(self, burst: bool) -> None:
        failures = 0
        waited_empty = False
        while not self._stopping.is_set():
            with self._lock:
                idle = not self._held
            try:
                # Burst ends once the queues are empty and nothing is in flight; otherwise
                # long-poll: the claim runs in Redis the moment a message arrives.
                held_back = burst and self._held_back()
                wait = 0.0 if burst and idle and not held_back else (0.05 if burst and not held_back else WAIT_SLICE)
                with self._lock:
                    self._claiming.add(threading.get_ident())
                try:
                    q, msgs = run_plan(
                        claim_any_plan(self.queues, self._batch_size(), self.visibility_timeout, wait, not waited_empty)
                    )
                    held = self._hold(q, msgs) if q is not None and msgs else []
                finally:
                    with self._lock:
                        self._claiming.discard(threading.get_ident())
                waited_empty = not msgs and wait > 0
                failures = 0
            except RECOVERABLE as exc:
                failures += 1
                self._stopping.wait(outage_pause(failures, f"claim failed: {exc}").seconds)
                continue
            if held:
                if self.timeout is not None:  # what a handler past its timeout leaves to settle
                    with self._lock:
                        self._batches[threading.current_thread()] = held
                self._drive(self._work_steps(held))
                if self.timeout is not None and self._given_up():
                    return
            elif burst and idle and not self._held_back():
                return

    def _given_up(self) -> bool:
        """This thread was given up (its handler ran past the timeout; another took its
        place): it ends, and no longer counts as stuck."""
        me = threading.current_thread()
        with self._lock:
            self._batches.pop(me, None)
            if me not in self._stuck:
                return False
            self._stuck.discard(me)
            if me in self._lanes:  # (returned while its place was being taken)
                self._lanes.remove(me)
        log.info("a handler past its timeout returned; its thread ends (another took its place)")
        return True

    def _timed_out_steps(self, h: Held) -> Steps[None]:
        """The thread running ``h``'s handler is stuck in it: count it out of concurrency,
        ack what its batch finished and give back what it did not start, and start a thread
        in its place; once every thread is stuck, stop (run() raises SystemExit(3))."""
        thread = h.task
        with self._lock:  # stuck from now on: should the handler return, its thread ends
            batch = [o for o in self._batches.pop(thread, []) if o is not h and id(o.message) in self._held]
            self._stuck.add(thread)
        for o in batch:
            if o.started is None:
                o.abandoned = True
                yield from give_back(o)
        covered = yield from ack([o for o in batch if o.started is not None], lambda: False)
        self.processed += covered
        self._forget(batch)
        replacement = None
        with self._lock:  # (the thread counted until now: run() never sees no thread at all)
            if thread in self._lanes:
                self._lanes.remove(thread)
            stuck = len(self._stuck)
            if stuck >= self.concurrency:
                self._fatal = self._fatal or SystemExit(EXIT_STUCK)
            elif not self.stopping:
                replacement = self._new_lane()
        if replacement is not None:
            log.warning(
                "%d of %d threads stuck in handlers past their timeout; starting another", stuck, self.concurrency
            )
            replacement.start()
        elif stuck >= self.concurrency:
            log.error(
                "all %d threads are stuck in handlers past their timeout: releasing what is held and exiting %d",
                stuck,
                EXIT_STUCK,
            )
            self.stop()

    def _invoke(self, h: Held) -> BaseException | None:
        h.task = threading.current_thread()
        try:
            message: Any = h.message  # a Queue's claims are Messages
            self.handler(message)
        except BaseException as exc:  # the handler's failure, not ours: whatever it raised
            return exc
        return None

    def _maintain(self) -> None:
        """Heartbeats, time limits and reaps, until in-flight handlers are over: through the
        grace period too, so a handler finishing then keeps its message (no reaps by then)."""
        drive(self._maintain_steps(until=self._over.is_set), self._over.wait)

    # -- shutdown -----------------------------------------------------------------------

    def _shutdown(self, lanes: list[threading.Thread], maintain: threading.Thread) -> None:
        end = time.monotonic() + self.grace_period
        while self._signals.forced is None:
            alive = [t for t in lanes if t.is_alive()]
            left = end - time.monotonic()
            if not alive or left <= 0:
                break
            alive[0].join(min(left, 0.1))  # short joins: a second signal is acted on at once
        self._over.set()  # no more heartbeats: what is still held is released below
        maintain.join(5.0)
        if self._signals.forced is not None:
            self._release_now()
            return
        self._drive(self._grace_over_steps())

    def _release_now(self) -> None:
        """Second signal: every held message back to waiting, no delay, running handlers or
        not. A claim under way may still bring messages: wait for those (at most one
        long-poll slice) and release them too."""
        released = self._drive(self._release_held_steps())
        end = time.monotonic() + WAIT_SLICE + 1.0
        while time.monotonic() < end:
            with self._lock:
                if not self._claiming:
                    break
            time.sleep(0.01)
        released += self._drive(self._release_held_steps())
        log.warning("released %d held messages", released)
