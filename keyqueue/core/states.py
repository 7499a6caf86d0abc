"""The id-state rules, once: which state an id is in or is owed (``owed``), used by the
reaper of the script-free mode (``decide``; ``reap.lua`` applies the same rules) and by the
fsck (``check.plan``).

The script-free mode changes state over several round trips, so a client that dies midway
can leave an id between two states. Every operation first puts the id in a timer set (an
*intent*), so the reaper's timer-driven sweep always meets such an id again, and these
rules settle it. ``reap.lua`` applies the same rules atomically.

An id is judged by its item hash (does it exist, has it a receipt ``c``, a timer ``d``),
its membership of ``processing`` and ``items``, and, only when that is still ambiguous,
whether it is in the dead list. States that a live operation passes through on its way
(an id owned with no receipt yet, a timer entry it no longer needs) are left alone until
the bucket holding the entry has fully passed: the operation that wrote the entry wanted
a timer no later than that, so a client still inside it after that has lost its lease.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Act(Enum):
    KEEP = "keep"  # leave the entry; look again at `timer`
    DROP = "drop"  # the entry is stale: remove it
    EXPIRE = "expire"  # an expired delivery: back to waiting, or dead when out of receives
    RELEASE = "release"  # to waiting: a due delayed message, an abandoned claim, an orphan
    FORGET = "forget"  # no message behind the id: remove it from every set
    ASK_DEAD = "ask_dead"  # decide again once we know whether the id is in the dead list


@dataclass(frozen=True)
class Seen:
    """What one read of an id showed."""

    exists: bool
    receipt: bool
    timer: int | None  # d, ms
    processing: bool
    waiting: bool  # in the items set
    dead: bool | None = None  # in the dead list; None = not looked up
    timed: bool = True  # in the timer set of its own bucket (the reaper: the set it examines is that one)


def owed(s: Seen, settled: bool) -> tuple[str | None, bool]:
    """The state an id is in, or is owed back to after an operation died midway, and
    whether it must also leave ``processing``. States: gone, claiming (owned, no delivery
    written yet, its claim may still be running: ``settled`` says the bucket of its intent
    has passed), processing, waiting, delayed, dead; None when only the dead list can tell."""
    if not s.exists:
        return "gone", False
    if s.processing and not s.receipt and not settled:
        return "claiming", False
    if s.processing and s.waiting:  # a claim died between SADD processing and SREM items
        return "waiting", True
    if s.processing and s.receipt and s.timer is not None:
        return "processing", False
    if s.processing:  # an abandoned claim: back to where it came from
        if s.timer is not None:
            return "delayed", True
        return (None if s.dead is None else "dead" if s.dead else "waiting"), True
    if s.waiting:
        return "waiting", False
    if s.timer is not None:
        if s.timed:
            return "delayed", False
        return (None if s.dead is None else "dead" if s.dead else "delayed"), False
    return (None if s.dead is None else "dead" if s.dead else "waiting"), False


@dataclass(frozen=True)
class Decision:
    act: Act
    timer: int | None = None  # KEEP: when to look again
    unclaim: bool = False  # also take the id out of processing (an abandoned claim)


def decide(s: Seen, now: int, bucket_end: int) -> Decision:
    """The reaper's rule for one id in a timer set whose bucket ends at ``bucket_end`` (ms):
    a live delivery expires at its deadline and a delayed message is released at its time;
    anything else waits until the bucket has fully passed, then goes where ``owed`` says."""
    settled = now >= bucket_end
    state, unclaim = owed(s, settled)
    if state == "gone":
        return Decision(Act.FORGET) if settled else Decision(Act.KEEP, bucket_end)
    if state == "processing":
        assert s.timer is not None
        return Decision(Act.KEEP, s.timer) if s.timer > now else Decision(Act.EXPIRE)
    if state == "delayed":
        assert s.timer is not None
        d = _delayed(s.timer, now)
        return Decision(d.act, d.timer, unclaim=unclaim)
    if not settled:  # claiming, a stale entry, dead or an orphan: once the bucket has passed
        return Decision(Act.KEEP, bucket_end)
    if state is None:
        return Decision(Act.ASK_DEAD)
    if state == "waiting" and not s.waiting:  # an abandoned claim or an orphan
        return Decision(Act.RELEASE, unclaim=unclaim)
    return Decision(Act.DROP, unclaim=unclaim)  # already waiting, or dead: the entry is stale


def _delayed(timer: int, now: int) -> Decision:
    return Decision(Act.KEEP, timer) if timer > now else Decision(Act.RELEASE)
