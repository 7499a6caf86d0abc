"""Reaper: an APScheduler interval job that reaps queues, so expired messages come back and
delayed ones become visible even where no worker runs. Several reapers may run at once:
every reap step is one atomic script, so they never double-deliver.

Quiet by default: APScheduler's own per-run lines are silenced, a pass logs a line (per
queue) only when it moved messages, and a summary of the passes comes every
SUMMARY_INTERVAL seconds; every pass is logged at DEBUG."""

from __future__ import annotations

import logging
import signal
import threading
import time
from datetime import datetime, timedelta, timezone
from typing import Any, Iterable

import redis

from .connection import REFUSED, TRANSIENT, outage_delay, resolve_client
from .core.replication import Replication
from .core.results import ReapResult
from .errors import KeyQueueError, MissingDependency
from .health import warn_unless_noeviction
from .keys import validate_prefix
from .queue import Queue, list_queues
from .settings import check_seconds
from .worker.reaping import reap_and_log
from .worker.signals import on_stop_signals

log = logging.getLogger("keyqueue.reaper")

#: Seconds between the reaper's INFO summaries (passes, and what they moved).
SUMMARY_INTERVAL = 300.0
#: APScheduler loggers that log every run of a job at INFO ("Running job ...", "... executed
#: successfully") and the scheduler's own chatter: set to WARNING unless the application
#: gave them a level itself.
CHATTY_LOGGERS = ("apscheduler.executors.default", "apscheduler.scheduler")


class _PassOverran(logging.Filter):
    """Drops APScheduler's warning that a reaper pass was skipped because the last one still
    ran: passes are coalesced on purpose (the next one covers the skipped one), and on a
    busy machine it would otherwise warn every interval."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not ("Reaper.reap_once" in message and "maximum number of running instances" in message)


_PASS_OVERRAN = _PassOverran()


def quiet_apscheduler() -> None:
    """Silence APScheduler's per-run INFO lines (a reaper runs every second), unless the
    application set these loggers' levels itself, and its warnings about coalesced passes."""
    for name in CHATTY_LOGGERS:
        logger = logging.getLogger(name)
        if logger.level == logging.NOTSET:
            logger.setLevel(logging.WARNING)
    logging.getLogger("apscheduler.scheduler").addFilter(_PASS_OVERRAN)  # (once: filters are a set)


def _scheduler_classes() -> tuple[type, type]:
    try:
        from apscheduler.schedulers.background import BackgroundScheduler
        from apscheduler.schedulers.blocking import BlockingScheduler
    except ImportError as exc:  # pragma: no cover - apscheduler is a dependency
        raise MissingDependency("the Reaper needs APScheduler: pip install 'apscheduler>=3.10,<4'") from exc
    return BlockingScheduler, BackgroundScheduler


class Reaper:
    """Reaps ``queues`` (Queue objects, which keep their own mode, or names) every
    ``interval`` seconds; ``queues=None`` reaps every queue registered under the prefix."""

    def __init__(
        self,
        queues: Queue | str | Iterable[Queue | str] | None = None,
        *,
        client: redis.Redis | None = None,
        url: str | None = None,
        prefix: str = "kq",
        interval: float = 1.0,
        scripting: bool = True,
        min_replicas: int = 0,
        replica_timeout: float = 1.0,
    ) -> None:
        self.interval = check_seconds("interval", interval, allow_zero=False)
        self.prefix = validate_prefix(prefix)
        self.scripting = scripting
        self.replication: dict[str, Any] = dict(min_replicas=min_replicas, replica_timeout=replica_timeout)
        Replication.of(min_replicas, replica_timeout)  # checked now, before any I/O
        given = None if queues is None else ([queues] if isinstance(queues, (Queue, str)) else list(queues))
        needs_client = given is None or any(isinstance(q, str) for q in given)
        self.client = resolve_client(client, url) if needs_client else None
        self._fixed: list[Queue] | None = None
        self._names: list[str] | None = None
        if given is not None:
            self._fixed = [q for q in given if isinstance(q, Queue)]
            self._names = [q for q in given if isinstance(q, str)]
        self._cache: dict[str, Queue] = {}
        self._scheduler: Any = None  # APScheduler's (untyped)
        self._blocking = False  # run() rather than start()
        self._checked = False
        self.passes = 0
        #: Seconds between INFO summaries; what the passes since the last one did.
        self.summary_interval = SUMMARY_INTERVAL
        self._summary_at = time.monotonic()
        self._since = ReapResult()
        self._passes_since = 0
        self._failed_since = 0
        self.moved = ReapResult()  # what every pass of this run did
        self._outages = 0  # failures to reach Redis in a row: the wait before the next pass grows
        #: What Redis refused before the first pass (credentials, ACL): run() raises it.
        self.refused: Exception | None = None
        #: Held through each pass: the last line waits for a pass still running at the stop.
        self._passing = threading.Lock()

    def queues(self) -> list[Queue]:
        """The queues of this pass: found again each time when reaping every queue."""
        if self._fixed is not None and not self._names:
            return list(self._fixed)
        assert self.client is not None
        if self._names is not None:
            names = self._names
        else:
            names = list_queues(self.client, self.prefix)
        out = list(self._fixed or [])
        for name in names:
            q = self._cache.get(name)
            if q is None:
                try:
                    q = self._cache[name] = Queue(
                        name, client=self.client, prefix=self.prefix, scripting=self.scripting, **self.replication
                    )
                except KeyQueueError as exc:  # one corrupt queue must not stop the others
                    log.error("cannot reap queue=%s: %s", name, exc)
                    continue
            out.append(q)
        return out

    def reap_once(self) -> dict[str, ReapResult]:
        """One pass over every queue; errors are logged per queue and never stop the reaper,
        but for Redis refusing the credentials or the ACL before any pass succeeded: a
        typo in the URL stops it (``refused``) rather than being waited out."""
        with self._passing:
            return self._pass()

    def _pass(self) -> dict[str, ReapResult]:
        results: dict[str, ReapResult] = {}
        try:
            if not self._checked:
                for client in {id(q.client): q.client for q in self.queues()}.values():
                    warn_unless_noeviction(client, log)
                self._checked = True
            queues = self.queues()
        except REFUSED as exc:
            if not self.passes:
                self.refused = exc
                if not self._blocking:  # (run() raises it: its caller says it in one line)
                    log.error("Redis refused the reaper: %s; stopping", exc)
                threading.Thread(target=self.shutdown, kwargs={"wait": False}).start()
                return results
            self._outage(exc)
            return results
        except TRANSIENT as exc:
            self._outage(exc)
            return results
        except KeyQueueError as exc:  # e.g. the registry overwritten: one line, not a traceback
            log.error("reaper cannot list the queues: %s; retrying next pass", exc)
            self._failed_since += 1
            self._summarize()
            return results
        self._outages = 0
        moved = ReapResult()
        for q in queues:
            r = reap_and_log(q, log, refresh=True)
            if r is not None:
                results[q.name] = r
                moved = moved + r
        self.passes += 1
        self._passes_since += 1
        self._since = self._since + moved
        self.moved = self.moved + moved
        log.debug(
            "pass %d over %d queues: requeued=%d dead_lettered=%d delayed_released=%d expired=%d",
            self.passes,
            len(queues),
            moved.requeued,
            moved.dead_lettered,
            moved.delayed_released,
            moved.expired,
        )
        self._summarize()
        return results

    def _outage(self, exc: Exception) -> None:
        """A pass that could not reach Redis: the next one after the outage backoff."""
        self._outages += 1
        delay = outage_delay(self._outages)
        log.warning("reaper cannot reach Redis: %s; retrying in %.1fs", exc, delay)
        self._put_off(delay)
        self._failed_since += 1
        self._summarize()

    def _put_off(self, seconds: float) -> None:
        """The next pass in ``seconds`` rather than at the next interval."""
        scheduler = self._scheduler
        if scheduler is not None and scheduler.running:
            scheduler.modify_job(JOB_ID, next_run_time=_now() + timedelta(seconds=seconds))

    def _summarize(self) -> None:
        """Every summary_interval: one INFO line with what the passes since the last did."""
        now = time.monotonic()
        if now - self._summary_at < self.summary_interval:
            return
        s = self._since
        failed = f", {self._failed_since} failed (Redis unreachable)" if self._failed_since else ""
        log.info(
            "reaper: %d passes in the last %.0fs%s; requeued=%d dead_lettered=%d delayed_released=%d expired=%d",
            self._passes_since,
            now - self._summary_at,
            failed,
            s.requeued,
            s.dead_lettered,
            s.delayed_released,
            s.expired,
        )
        self._summary_at = now
        self._since = ReapResult()
        self._passes_since = self._failed_since = 0

    def _schedule(self, blocking: bool) -> Any:
        blocking_cls, background_cls = _scheduler_classes()
        quiet_apscheduler()
        scheduler = (blocking_cls if blocking else background_cls)()
        self._blocking = blocking
        scheduler.add_job(
            self.reap_once,
            "interval",
            seconds=self.interval,
            id=JOB_ID,
            coalesce=True,
            max_instances=1,
            next_run_time=_now(),
        )
        self._scheduler = scheduler
        return scheduler

    def run(self) -> None:
        """Reap until shutdown() (from another thread) or SIGINT/SIGTERM in the main thread;
        raises what Redis refused before the first pass (``refused``: credentials, ACL)."""
        scheduler = self._schedule(blocking=True)
        restore = on_stop_signals(self._on_signal)
        try:
            scheduler.start()
        finally:
            restore()
        if self.refused is not None:
            raise self.refused
        with self._passing:  # (shutdown does not wait for a pass under way: this does)
            m = self.moved
        log.info(
            "reaper stopped after %d passes: requeued=%d dead_lettered=%d delayed_released=%d expired=%d",
            self.passes,
            m.requeued,
            m.dead_lettered,
            m.delayed_released,
            m.expired,
        )

    def start(self) -> None:
        """Reap in a background thread."""
        self._schedule(blocking=False).start()

    def shutdown(self, wait: bool = True) -> None:
        scheduler = self._scheduler
        if scheduler is not None and scheduler.running:
            scheduler.shutdown(wait=wait)

    def _on_signal(self, sig: signal.Signals) -> None:
        log.info("%s: reaper stopping", sig.name)
        threading.Thread(target=self.shutdown, kwargs={"wait": False}).start()


JOB_ID = "keyqueue-reap"


def _now() -> datetime:

    return datetime.now(timezone.utc)
