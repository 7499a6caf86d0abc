"""One reap of a queue, logged: what workers (every second) and the Reaper (every pass)
share, here so that neither imports the other."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from ..errors import KeyQueueError
from .rules import RECOVERABLE

if TYPE_CHECKING:
    from ..core.results import ReapResult


def reap_and_log(q: Any, logger: logging.Logger, *, refresh: bool = False) -> ReapResult | None:
    """One reap of ``q`` (after re-reading its settings with ``refresh``), logged; None when
    it failed, which is logged too: reaping goes on."""
    try:
        if refresh:
            q.refresh_settings()
        outcome: ReapResult | Exception = q.reap()
    except RECOVERABLE as exc:
        outcome = exc
    return log_reap(q.name, outcome, logger)


def log_reap(name: str, outcome: ReapResult | Exception, logger: logging.Logger) -> ReapResult | None:
    """Log one reap's outcome (what it moved, or why it failed: reaping goes on), for a
    blocking or an asyncio caller alike; None when it failed."""
    if isinstance(outcome, KeyQueueError):
        logger.error("reap of queue=%s: %s", name, outcome)
        return None
    if isinstance(outcome, Exception):
        logger.warning("reap of queue=%s failed: %s; retrying next pass", name, outcome)
        return None
    if outcome.total:
        logger.info(
            "reaped queue=%s requeued=%d dead_lettered=%d delayed_released=%d expired=%d",
            name,
            outcome.requeued,
            outcome.dead_lettered,
            outcome.delayed_released,
            outcome.expired,
        )
    return outcome
