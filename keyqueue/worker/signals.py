"""SIGINT/SIGTERM for whatever runs until stopped (workers, the reaper, ``keyqueue
serve``): installers for a blocking run and for an asyncio loop, and ``StopSignals``, what
a first, second and third signal do to a worker."""

from __future__ import annotations

import logging
import os
import signal
import threading
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    import asyncio

log = logging.getLogger("keyqueue.worker")

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def on_stop_signals(callback: Callable[[signal.Signals], None]) -> Callable[[], None]:
    """Send SIGINT/SIGTERM to ``callback`` and return a function that restores the old
    handlers. Python only lets the main thread install handlers; elsewhere this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = {s: signal.getsignal(s) for s in STOP_SIGNALS}

    def handler(signum: int, frame: Any) -> None:
        callback(signal.Signals(signum))

    for s in STOP_SIGNALS:
        signal.signal(s, handler)

    def restore() -> None:
        for s, h in previous.items():
            signal.signal(s, h)

    return restore


def on_loop_stop_signals(
    loop: asyncio.AbstractEventLoop, callback: Callable[[signal.Signals], None]
) -> Callable[[], None]:
    """``on_stop_signals`` for a loop (the main thread's, Unix): ``callback`` runs on the
    loop, between two callbacks, rather than between two bytecodes."""
    for s in STOP_SIGNALS:
        loop.add_signal_handler(s, callback, s)

    def restore() -> None:
        for s in STOP_SIGNALS:
            loop.remove_signal_handler(s)

    return restore


class StopSignals:
    """SIGINT/SIGTERM for a running worker. The first stops it (``stop()``: in-flight
    handlers get the grace period); the second releases every held message at once
    (``force()``), after which the worker's runner calls ``reraise()``: KeyboardInterrupt
    for SIGINT, SystemExit(128+n) for another signal; a third (should releasing hang) ends
    the process at once. It only logs and sets flags: with ``signal.signal`` it runs
    between two bytecodes of the main thread, which may hold a connection pool's lock."""

    def __init__(
        self,
        grace_period: float,
        stopping: Callable[[], bool],
        stop: Callable[[], None],
        force: Callable[[], None] = lambda: None,
    ) -> None:
        self.grace_period = grace_period
        self.stopping, self.stop, self.force = stopping, stop, force
        self.forced: signal.Signals | None = None

    def __call__(self, sig: signal.Signals) -> None:
        if self.forced is not None:  # releasing hangs (Redis unreachable?): leave at once
            log.warning("third %s: exiting now; messages not yet released return after their deadlines", sig.name)
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
