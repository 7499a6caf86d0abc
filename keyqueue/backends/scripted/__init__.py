"""The scripted mode: every operation is one Lua script (``keyqueue/lua``). One module per
group of operations, mirroring ``backends/commands``; each method returns a core operation
(a generator of round trips) with a typed result (``core/results.py``)."""

from __future__ import annotations

from .consume import Consume
from .inspect import Inspect
from .maintain import Maintain
from .produce import Produce
from .schedule import Schedules
from .scripts import SCRIPT_NAMES, script_sha, script_source
from .settle import Settle

__all__ = ["ScriptOps", "SCRIPT_NAMES", "script_sha", "script_source"]


class ScriptOps(Produce, Consume, Settle, Maintain, Inspect, Schedules):
    """The operations of one queue as scripts. ``clock`` (tests only) replaces Redis TIME."""
