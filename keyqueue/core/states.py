"""What the reaper does with one id found in a due timer set, as a pure decision.

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
    KEEP = "keep"          # leave the entry; look again at `timer`
    DROP = "drop"          # the entry is stale: remove it
    EXPIRE = "expire"      # an expired delivery: back to waiting, or dead when out of receives
    RELEASE = "release"    # to waiting: a due delayed message, an abandoned claim, an orphan
    FORGET = "forget"      # no message behind the id: remove it from every set
    ASK_DEAD = "ask_dead"  # decide again once we know whether the id is in the dead list


@dataclass(frozen=True)
class Seen:
    """What one read of an id showed."""

    exists: bool
    receipt: bool
    timer: int | None          # d, ms
    processing: bool
    waiting: bool              # in the items set
    dead: bool | None = None   # in the dead list; None = not looked up


@dataclass(frozen=True)
class Decision:
    act: Act
    timer: int | None = None   # KEEP: when to look again
    unclaim: bool = False      # also take the id out of processing (an abandoned claim)


def decide(s: Seen, now: int, bucket_end: int) -> Decision:
    """The rule for one id in a timer set whose bucket ends at ``bucket_end`` (ms)."""
    settled = now >= bucket_end
    if not s.exists:
        return Decision(Act.FORGET) if settled else Decision(Act.KEEP, bucket_end)
    if s.processing and s.receipt and s.timer is not None:
        return Decision(Act.KEEP, s.timer) if s.timer > now else Decision(Act.EXPIRE)
    if s.processing:  # owned, but the claim never wrote its receipt
        if not settled:
            return Decision(Act.KEEP, bucket_end)
        if s.waiting:  # died between SADD processing and SREM items: still waiting
            return Decision(Act.DROP, unclaim=True)
        if s.timer is not None:  # a delayed message a stale claim touched
            d = _delayed(s.timer, now)
            return Decision(d.act, d.timer, unclaim=True)
        if s.dead is None:
            return Decision(Act.ASK_DEAD)
        return Decision(Act.DROP if s.dead else Act.RELEASE, unclaim=True)
    if s.waiting:
        return Decision(Act.DROP) if settled else Decision(Act.KEEP, bucket_end)
    if s.timer is not None:
        return _delayed(s.timer, now)
    # In no set and without a timer: dead, or a message nothing refers to any more.
    if not settled:
        return Decision(Act.KEEP, bucket_end)
    if s.dead is None:
        return Decision(Act.ASK_DEAD)
    return Decision(Act.DROP) if s.dead else Decision(Act.RELEASE)


def _delayed(timer: int, now: int) -> Decision:
    return Decision(Act.KEEP, timer) if timer > now else Decision(Act.RELEASE)
