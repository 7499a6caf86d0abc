"""Claiming from several queues in priority order (a Worker's loop), written once as a
plan over the queues' operations: the transports run each step on its queue's client."""

from __future__ import annotations

import time
from typing import Any, Sequence

from .queue_core import QueueCore
from .results import Fields
from .roundtrip import Plan

#: Without one connection for all (several clients, or a cluster), the first queue is
#: watched in slices this long and the others polled between them.
POLL_SLICE = 0.25


def claim_any(
    targets: Sequence[tuple[Any, QueueCore]],
    count: int,
    visibility_timeout: float | None,
    wait: float,
    poll_first: bool,
    one_connection: bool,
) -> Plan[tuple[int | None, list[Fields]]]:
    """Claim from the first non-empty queue, long-polling all of them for up to ``wait``
    seconds: (index of the queue the messages came from, its messages). ``poll_first=False``
    skips the first plain claim of the first queue (the caller's last wait just claimed it)."""
    deadline = time.monotonic() + wait
    skip_first = not poll_first
    while True:
        for i, (target, core) in enumerate(targets):
            if i == 0 and skip_first:
                continue
            got = yield target, core.claim(count, visibility_timeout, 0.0)
            if got:
                return i, got
        skip_first = True  # every later pass follows a wait that claimed the first queue
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return None, []
        target, first = targets[0]
        if one_connection:  # one BLPOP watches every queue; the claim runs as it wakes
            signals = [core.keys.signal for _, core in targets]
        else:
            signals, remaining = [first.keys.signal], min(remaining, POLL_SLICE)
        got = yield target, first.wait_then_claim(signals, remaining, count, visibility_timeout)
        if got:
            return 0, got
