"""Claiming from several queues in priority order (a Worker's loop), written once as a
plan over the queues' operations: the transports run each step on its queue's client."""

from __future__ import annotations

import logging
import math
import time
from typing import Any, Sequence

from ..connection import TRANSIENT
from .queue_core import HELD_BACK_POLL, QueueCore
from .replies import error_for
from .results import Fields
from .roundtrip import Plan, Race, must_resend

log = logging.getLogger("keyqueue.queue")


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
    skip: int | None = None if poll_first else 0  # the queue the last wait just claimed
    looked = False
    refused: set[int] = set()  # the queues whose refusal by their limits this call has counted
    while True:
        failed: list[Exception] = []
        for i, (target, core) in enumerate(targets):
            # A queue its limits held back is claimed once a call (as a single queue's claim
            # is: a slot may have freed elsewhere), then not until they may let one through.
            if looked and core.limited_until > time.monotonic():
                continue
            try:
                # The queue the last wait just claimed is claimed again only if a reap due
                # since (its timers) moved messages back.
                if i == skip and not (yield target, core.reap_if_due()):
                    continue
                got = yield target, core.claim(count, visibility_timeout, 0.0, i in refused)
            except TRANSIENT as exc:
                if len(targets) == 1:
                    raise
                # Its node down or its slot migrating: the other queues are served meanwhile,
                # and this one is held back as by a limit, for a while.
                failed.append(exc)
                core.limited_until = time.monotonic() + HELD_BACK_POLL
                if not core.out_of_reach:
                    log.warning("queue %s out of reach (%s); serving the others meanwhile", core.name, exc)
                core.out_of_reach = True
                continue
            if core.refused:
                refused.add(i)
            if core.out_of_reach:
                log.warning("queue %s within reach again", core.name)
                core.out_of_reach = False
            if got:
                return i, got
        if len(failed) == len(targets):
            raise failed[0]  # (every queue is out of reach: the caller's outage)
        looked = True
        now = time.monotonic()
        remaining = deadline - now
        if remaining <= 0:
            return None, []
        open_ = [i for i, (_, core) in enumerate(targets) if core.limited_until <= now]
        held = [core.limited_until - now for _, core in targets if core.limited_until > now]
        if not open_:  # every queue held back: sleep until the first may let a claim through
            target, core = targets[0]
            yield target, core.held_back(min(remaining, min(held)))
            skip = None
            continue
        if held:  # wake when a held-back queue may take claims again
            remaining = min(remaining, min(held))
        # ... and when a queue's timer falls due or a schedule fires (expired and due delayed
        # messages, and fires, signal nobody), as a single queue's claim does
        # (a queue held back is neither claimed nor reaped here: its timers wait for its limits)
        due = min(
            (min(targets[i][1].next_reap(), targets[i][1].fire_wake) for i in open_ if targets[i][1].claim_reaping),
            default=math.inf,
        )
        remaining = min(remaining, max(due - now, 0.01))
        if len(open_) > 1 and not one_connection:
            # Queues one BLPOP cannot watch together (several clients, or several cluster
            # slots): one BLPOP each, all at once; whichever wakes, every queue is claimed
            # again in order (a woken one's message may be in any of them by then).
            seconds = targets[open_[0]][1].slice(remaining)
            waits = [(targets[i][0], ("BLPOP", targets[i][1].keys.signal, seconds)) for i in open_]
            replies = yield Race(waits)
            for (_, command), reply in zip(waits, replies):
                if isinstance(reply, Exception) and not must_resend([reply]):  # (a moved slot: the claims follow it)
                    raise error_for(reply, command[1])
            skip = None
            continue
        skip = open_[0]
        target, first = targets[skip]
        # one BLPOP watches every open queue; the claim runs as it wakes
        signals = [targets[i][1].keys.signal for i in open_]
        got = yield target, first.wait_then_claim(signals, remaining, count, visibility_timeout, skip in refused)
        if first.refused:
            refused.add(skip)
        if got:
            return skip, got
