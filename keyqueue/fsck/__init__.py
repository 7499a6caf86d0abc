"""An fsck for one queue: find messages that are not in exactly one state, and repair them.

It uses plain commands only (no Lua), so it works where the server denies EVAL. Its reads
are not atomic and the queue may be live, so a finding counts only when a second look
``settle`` seconds later sees it too, and every repair is a small WATCH/MULTI/EXEC
transaction that re-reads its id and acts only if what it finds is what was confirmed:
a message is never lost or owned twice because of a repair.

The whole check is one operation of the I/O-free core (``check_op``): its reads are round
trips, its wait a ``Sleep``, so ``Queue.check`` and ``keyqueue.aio.Queue.check`` run the
same code; every round trip goes to one connection, which WATCH/MULTI/EXEC needs.

One room a step: ``scan`` reads the queue's keys, ``analyse`` finds what is wrong,
``repair`` fixes what was confirmed, ``report`` says what was found (text and JSON).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..core.roundtrip import Op, Sleep
from ..core.shards import ShardedCore, tag
from ..keys import QueueKeys
from ..settings import QueueSettings, check_seconds
from .analyse import (
    BAD_FLOW,
    CLAIMING,
    DEAD_DUPLICATE,
    EMPTY_INDEX,
    GROUP_COUNT,
    GROUP_ENTRY,
    GROUP_MARK,
    HELD_COUNT,
    KINDS,
    MISSING_HASH,
    NOTE_KINDS,
    ORPHAN,
    OWNED_AND_WAITING,
    STALE_LIST,
    STALE_TIMER,
    STRAY_FIELDS,
    TIMER_INDEX,
    UNLISTED,
    UNTIMED,
    WRONG_TYPE,
    findings,
)
from .repair import Repairer
from .report import CheckReport, Problem
from .scan import read_snapshot

if TYPE_CHECKING:
    from ..core.queue_core import QueueCore

__all__ = [
    # the check
    "check_op",
    "check_queue",
    # what it reports
    "CheckReport",
    "Problem",
    "KINDS",
    "NOTE_KINDS",
    # the kinds of finding: problems, then notes
    "OWNED_AND_WAITING",
    "UNTIMED",
    "ORPHAN",
    "MISSING_HASH",
    "UNLISTED",
    "TIMER_INDEX",
    "DEAD_DUPLICATE",
    "WRONG_TYPE",
    "STRAY_FIELDS",
    "STALE_LIST",
    "STALE_TIMER",
    "EMPTY_INDEX",
    "BAD_FLOW",
    "GROUP_COUNT",
    "GROUP_ENTRY",
    "HELD_COUNT",
    "GROUP_MARK",
    "CLAIMING",
]


def check_op(core: QueueCore | ShardedCore, *, repair: bool, settle: float) -> Op[CheckReport]:
    """Check every message of the queue is in exactly one state; with ``repair``, fix what
    is not. Only findings still there after ``settle`` seconds count: a live operation
    passes through some of these states for a round trip or two. One operation: every
    round trip on one connection, the wait a ``Sleep`` (so it runs sync or on asyncio)."""
    check_seconds("settle", settle)  # before any I/O
    if isinstance(core, ShardedCore):
        return _check_shards(core, repair, settle)
    return _check(core, repair, settle)


def _check_shards(core: ShardedCore, repair: bool, settle: float) -> Op[CheckReport]:
    """Every shard's check, in one report of the logical queue (message ids as the queue
    gives them: ``<shard>#<id>``)."""
    yield from core.ready()
    total = CheckReport(core.name)
    for shard, one in enumerate(core.cores):
        part = yield from _check(one, repair, settle)
        for mine, theirs in ((total.problems, part.problems), (total.notes, part.notes)):
            mine += [replace(p, ids=[tag(shard, i) if i.isdigit() else i for i in p.ids]) for p in theirs]
        total.waiting += part.waiting
        total.processing += part.processing
        total.delayed += part.delayed
        total.dead += part.dead
        total.keys += part.keys
        total.complete = total.complete and part.complete
    # the logical queue's own keys: its count, and the rate-limit counters its shards share
    assert core.settings is not None
    own = yield from _check_keys(core.name, core.keys, core.settings, repair, settle)
    total.problems += own.problems
    total.notes += own.notes
    total.keys += own.keys
    return total


def _check(core: QueueCore, repair: bool, settle: float) -> Op[CheckReport]:
    settings = yield from core.ready()
    return (yield from _check_keys(core.name, core.keys, settings, repair, settle))


def _check_keys(name: str, k: QueueKeys, settings: QueueSettings, repair: bool, settle: float) -> Op[CheckReport]:
    bucket_ms, limit = settings.bucket_ms, settings.group_concurrency
    snap = yield from read_snapshot(k)
    found, states = findings(snap, k, bucket_ms, limit)
    if found and settle > 0:
        yield Sleep(settle)
        first = set(found)
        snap = yield from read_snapshot(k)
        again, states = findings(snap, k, bucket_ms, limit)
        found = [f for f in again if f in first]
    repaired = (yield from Repairer(k, bucket_ms, snap, limit).run(found)) if repair else set()
    return CheckReport.of(name, found, repaired, states, keys=len(snap.types), complete=snap.complete(k))


def check_queue(queue: Any, *, repair: bool = False, settle: float = 1.0) -> CheckReport:
    """``queue.check(...)``: the check of a blocking Queue (``check_op`` run on its client)."""
    return queue.check(repair=repair, settle=settle)
