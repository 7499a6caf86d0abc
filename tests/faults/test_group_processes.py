"""Message groups across real `keyqueue worker` processes: 20 groups of 100 messages under
three worker processes with random handler times, one of them SIGKILLed in the middle of a
message. Each group's handlers run one at a time, in enqueue order, and every message is
handled once (the killed delivery comes back after its visibility timeout, before the next of
its group). The script-free mode refuses groups: there, the refusal."""

from __future__ import annotations

import signal
from collections import defaultdict

import pytest
import redis

from keyqueue import ConfigurationError, Queue

from ..support.handlers import DONE, GROUP_LOG
from ..support.helpers import snapshot, wait_until
from ..support.processes import Procs

GROUPS, EACH = 20, 100


def test_groups_keep_their_order_across_worker_processes_and_a_kill(
    redis_server, r: redis.Redis, procs: Procs, scripting: bool
) -> None:
    q = Queue("q", client=r, scripting=scripting, visibility_timeout=3, bucket_seconds=1)
    if not scripting:
        before = snapshot(r)
        with pytest.raises(ConfigurationError):
            q.enqueue_many(["x"], group="g0")
        assert snapshot(r) == before
        return
    sent: dict[str, list[str]] = {}
    for g in range(GROUPS):  # the groups' batches interleaved in the list as they go
        bodies = ["hang" if (g, i) == (7, 10) else f"{g}-{i}" for i in range(EACH)]
        sent[f"g{g}"] = q.enqueue_many(bodies, group=f"g{g}")
    workers = [procs.worker(redis_server.url, "grouped", "-c", "4") for _ in range(3)]
    hung = sent["g7"][10]

    def hanging_pid() -> int | None:
        for entry in r.lrange(GROUP_LOG, 0, -1):
            kind, _, mid, pid, _ = entry.decode().split()
            if kind == "start" and mid == hung:
                return int(pid)
        return None

    pid = wait_until(hanging_pid, timeout=120)
    victim = next(p for p in workers if p.pid == pid)
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    wait_until(lambda: r.hlen(DONE) == GROUPS * EACH, timeout=240)
    for p in workers:
        if p is not victim:
            p.send_signal(signal.SIGTERM)
    for p in workers:
        if p is not victim:
            assert p.wait(60) == 0, procs.log(p)

    assert all(int(n) == 1 for n in r.hvals(DONE))
    events: dict[str, list[tuple[str, str, int]]] = defaultdict(list)
    for entry in r.lrange(GROUP_LOG, 0, -1):
        kind, group, mid, p, _ = entry.decode().split()
        events[group].append((kind, mid, int(p)))
    assert sorted(events) == sorted(sent)
    for group, seen in events.items():
        ended = [mid for kind, mid, _ in seen if kind == "end"]
        assert ended == sent[group], group  # in enqueue order, each once
        running: tuple[str, int] | None = None  # the delivery whose handler runs now
        for kind, mid, p in seen:
            if kind == "start":
                # no overlap: the one before ended, or died with the killed process (any of its
                # threads' messages) and comes back before the next
                assert running is None or (running == (mid, pid)), (group, running, mid)
                running = (mid, p)
            else:
                assert running == (mid, p), (group, running, mid)
                running = None
    assert [kind for kind, mid, _ in events["g7"] if mid == hung] == ["start", "start", "end"]
    assert q.groups() == [] and len(q) == 0 and r.keys("kq:{q}:group*") == []
