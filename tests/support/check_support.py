"""What the fsck tests (sync and async) share: the keys of queue "q", a report's findings
as dicts, a repair that finds its id changed since the check, and delivering what is left."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from keyqueue import Queue
from keyqueue.fsck import CheckReport
from keyqueue.fsck import repair as fsck_repair

BASE = "kq:{q}:"
PROCESSING, ITEMS, QUEUE, DEAD, TIMERS = (BASE + n for n in ("processing", "items", "queue", "dead", "timers"))


def item(i: str) -> str:
    return f"{BASE}item:{i}"


def problems(report: CheckReport) -> dict[str, list[str]]:
    return {p.kind: p.ids for p in report.problems}


def notes(report: CheckReport) -> dict[str, list[str]]:
    return {p.kind: p.ids for p in report.notes}


def acked_before_the_repair_looks(monkeypatch: pytest.MonkeyPatch, r: redis.Redis, msg_id: str) -> None:
    """Someone else acks ``msg_id`` right before the repair re-reads it."""
    real = fsck_repair.read_view

    def meanwhile(*args: Any, **kw: Any) -> Any:
        r.delete(item(msg_id))
        return real(*args, **kw)

    monkeypatch.setattr(fsck_repair, "read_view", meanwhile)


def claim_and_ack_all(q: Queue) -> list[str]:
    """Claim and ack until nothing is visible; the ids delivered, in order."""
    got: list[str] = []
    while batch := q.claim_many(100):
        got += [m.id for m in batch]
        assert q.ack_many(batch) == len(batch)
    return got
