"""The script-free mode: every operation with plain commands, for servers that deny EVAL.

It follows the ownership protocol of the "Redis Queue System (ex Amazon SQS)" thread: a
claimer reads the head of the list (LINDEX, LRANGE for a batch), SADDs the id to
``processing`` (1 = no other claimer holds it), SREMs it from ``items`` (1 = it was still
waiting: we own it), then writes the delivery and LREMs the list entry. Each later state
change of a message (ack, extend, release, dead letter, reap, requeue) is one MULTI/EXEC,
made conditional on the message's hash by WATCH, so it applies whole or not at all.

What makes it safe when a client dies between two commands: before an operation takes an
id from one state towards another, the id is in a timer set (a claim adds its *intent*
first), so the reaper meets it again and settles it by the rules of ``core/states.py``. A round
trip is a batch of commands; every operation costs a fixed number of them.

One module per group of operations, mirroring ``backends/scripted``.
"""

from __future__ import annotations

from .base import PURGE_VISIBILITY_MS, WATCH_CHUNK
from .consume import Consume
from .expire import Expire
from .inspect import Inspect
from .maintain import Maintain
from .produce import Produce
from .schedule import Schedules
from .settle import Settle

__all__ = ["CommandOps", "PURGE_VISIBILITY_MS", "WATCH_CHUNK"]


class CommandOps(Produce, Expire, Maintain, Consume, Settle, Inspect, Schedules):
    """The operations of one queue with plain commands (the same methods as ScriptOps)."""
