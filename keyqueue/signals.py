"""SIGINT/SIGTERM routing for the blocking run() of workers and reapers."""

from __future__ import annotations

import signal
import threading
from typing import Any, Callable

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
