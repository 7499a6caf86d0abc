"""The rules every worker applies, free of I/O: how long a failed message waits, how many
messages one claim takes, how an error and a setting read in the log."""

from __future__ import annotations

import inspect

from ..connection import TRANSIENT
from ..core.queue_core import bounded_error
from ..errors import KeyQueueError

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
#: The exit status of a thread worker whose every thread is stuck in a handler past its
#: timeout (run() raises SystemExit with it): its supervisor starts a fresh process.
EXIT_STUCK = 3
#: Exceptions from a handler that stop the worker (after failing the delivery).
STOPPING_EXCEPTIONS = (SystemExit, KeyboardInterrupt)


def is_async(handler: object) -> bool:
    """An ``async def`` function, a callable object with one as ``__call__``, or a partial of one."""
    return any(
        inspect.iscoroutinefunction(f)
        for f in (handler, getattr(handler, "__call__", None), getattr(handler, "func", None))
    )


def backoff(retry_backoff: float, receives: int) -> float:
    """Delay before a failed message is retried: doubles with every receive, capped."""
    return min(retry_backoff * 2 ** max(receives - 1, 0), MAX_BACKOFF)


def describe(exc: BaseException) -> str:
    """``RuntimeError: boom`` (the type alone when there is no text), as last_error keeps it
    (so the log line shows what the message keeps)."""
    detail = str(exc)
    return bounded_error(f"{type(exc).__name__}: {detail}" if detail else type(exc).__name__)


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
