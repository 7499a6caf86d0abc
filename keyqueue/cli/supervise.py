"""``keyqueue worker --processes N``: a supervisor of N worker processes, as Dramatiq's and
Celery's main processes are. It runs no handler: each child is the same ``keyqueue
worker`` command line with ``--processes 1``, in a session of its own (a Ctrl-C in the
terminal reaches the supervisor alone, which passes it on once). A child that exits
abnormally or is killed is replaced (its messages come back after their visibility
timeout, as after any crash); a child that exits 0 (``--burst``: the queues are empty) is
not, nor one that Redis refused (exit 78: credentials or ACL, which no restart fixes).
SIGINT/SIGTERM are passed on to every child and the supervisor exits once all have:
0 when each drained, 130 (SIGINT) or 143 (SIGTERM) after a second signal, as one worker
does. A child that finds its supervisor gone stops as on SIGTERM."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter

from ..worker.signals import on_stop_signals
from .group import EXIT_REFUSED

log = logging.getLogger("keyqueue.supervisor")

#: Seconds between two looks at the children (and at the signals received).
POLL = 0.1
#: A slot starts at most one child this often: a child that fails at start must not spin.
RESTART_EVERY = 1.0
#: Seconds past the grace period after which a child that has not drained is SIGKILLed.
KILL_AFTER = 15.0
#: Seconds between two looks of a child at its supervisor.
WATCH_EVERY = 1.0


def exit_text(code: int) -> str:
    """How a child ended, for the log."""
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with {code}"


def ended(codes: list[int]) -> str:
    """How the children ended, for the supervisor's last line."""
    if not codes:
        return "no worker process ended"
    if all(code == 0 for code in codes):
        return f"all {len(codes)} worker processes drained and exited 0"
    counts = Counter(codes)
    return "worker processes: " + ", ".join(f"{n} {exit_text(code)}" for code, n in sorted(counts.items()))


def child_command(argv: list[str], supervisor: int) -> list[str]:
    """The command line of a child: the supervisor's own, run as one process (click takes
    an option's last value), watching the supervisor's pid."""
    extra = ["--processes", "1", "--supervisor-pid", str(supervisor)]
    cut = argv.index("--") if "--" in argv else len(argv)
    return [sys.executable, "-m", "keyqueue", *argv[:cut], *extra, *argv[cut:]]


class Supervisor:
    """Runs ``processes`` children of ``command`` (see ``child_command``) until a stop signal
    and every child has exited; ``grace``: the children's grace period."""

    def __init__(self, command: list[str], processes: int, grace: float) -> None:
        self.command, self.processes, self.grace = command, processes, grace
        self.children: list[subprocess.Popen[bytes] | None] = [None] * processes
        self.started = [0.0] * processes
        self.codes: list[int] = []  # how each child ended (not those replaced)
        self.waiting: dict[int, float] = {}  # slot -> when its replacement starts

    def run(self) -> int:
        """Supervise until every child has exited; the exit status of the whole."""
        received: list[signal.Signals] = []  # appended by the handler, acted on by the loop
        restore = on_stop_signals(received.append)
        try:
            log.info("supervising %d worker processes (pid %d)", self.processes, os.getpid())
            for slot in range(self.processes):
                self._start(slot)
            code = self._loop(received)
        finally:
            restore()
        log.info("supervisor stopped: %s; exit %d", ended(self.codes), code)
        return code

    def _loop(self, received: list[signal.Signals]) -> int:
        acted = 0
        kill_at = None
        while True:
            while acted < len(received):
                sig = received[acted]
                acted += 1
                if acted == 1:
                    log.info("%s: passing it on to the worker processes; each drains within %gs", sig.name, self.grace)
                    kill_at = time.monotonic() + self.grace + KILL_AFTER
                elif acted == 2:
                    log.warning("second %s: passing it on; the workers release what they hold now", sig.name)
                else:
                    log.warning("third %s: passing it on and exiting now", sig.name)
                    self._signal_all(sig)
                    return 128 + int(sig)
                self._signal_all(sig)
            self._reap(stopping=acted > 0)
            if all(p is None for p in self.children) and (acted > 0 or not self.waiting):
                break
            if kill_at is not None and time.monotonic() > kill_at:
                for p in self._alive():
                    log.error("worker process %d did not drain in time: killing it", p.pid)
                    p.kill()
                kill_at = None
            time.sleep(POLL)
        if acted >= 2:
            return 128 + int(received[1])
        if acted == 0 and EXIT_REFUSED in self.codes:
            return EXIT_REFUSED
        clean = acted > 0 and all(code in (0, -int(received[0]), 128 + int(received[0])) for code in self.codes)
        return 0 if clean or (acted == 0 and all(code == 0 for code in self.codes)) else 1

    def _start(self, slot: int) -> None:
        p = subprocess.Popen(self.command, stdin=subprocess.DEVNULL, start_new_session=True)
        self.children[slot], self.started[slot] = p, time.monotonic()
        log.info("started worker process %d", p.pid)

    def _reap(self, stopping: bool) -> None:
        """Note the children that ended; replace those that failed, unless stopping."""
        for slot, p in enumerate(self.children):
            if p is None:
                if not stopping and slot in self.waiting and time.monotonic() >= self.waiting[slot]:
                    del self.waiting[slot]
                    self._start(slot)
                continue
            code = p.poll()
            if code is None:
                continue
            self.children[slot] = None
            self.codes.append(code)
            if stopping:
                log.info("worker process %d %s", p.pid, exit_text(code))
            elif code == 0:
                log.info("worker process %d finished (exit 0)", p.pid)
            elif code == EXIT_REFUSED:
                log.error("worker process %d %s: Redis refused it, so it is not replaced", p.pid, exit_text(code))
            else:
                log.warning("worker process %d %s: starting another", p.pid, exit_text(code))
                self.codes.pop()  # (replaced: not the outcome of the whole)
                self.waiting[slot] = self.started[slot] + RESTART_EVERY
                if time.monotonic() >= self.waiting[slot]:
                    del self.waiting[slot]
                    self._start(slot)

    def _alive(self) -> list[subprocess.Popen[bytes]]:
        return [p for p in self.children if p is not None and p.poll() is None]

    def _signal_all(self, sig: signal.Signals) -> None:
        for p in self._alive():
            try:
                p.send_signal(sig)
            except ProcessLookupError:  # ended meanwhile
                pass


def watch_supervisor(pid: int) -> None:
    """In a child: once the supervisor ``pid`` is gone (SIGKILLed: it passes nothing on), stop
    this worker as SIGTERM does, so no orphan works on unsupervised."""

    def watch() -> None:
        while os.getppid() == pid:
            time.sleep(WATCH_EVERY)
        log.warning("the supervisor (pid %d) is gone: stopping", pid)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="keyqueue-supervisor-watch", daemon=True).start()
