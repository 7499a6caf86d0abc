"""Message groups across real `keyqueue worker` processes with random handler times: 50
groups of 200 messages under three processes, one of them SIGKILLed in the middle of a
message, and groups under two processes while Redis is stopped and started again from its
AOF. Each group's handlers run one at a time, in enqueue order, and every message is handled
(once, where nothing failed; a delivery cut short comes back before the next of its group).
The script-free mode refuses groups: there, the refusal."""

from __future__ import annotations

import signal
from collections import defaultdict

import pytest
import redis

from keyqueue import ConfigurationError, Queue
from keyqueue.server import RedisServer

from ..support.handlers import DONE, GROUP_LOG, LOG_URL
from ..support.helpers import snapshot, wait_until
from ..support.processes import Procs

#: The script-free mode refuses groups (the first test shows it): a test of groups alone runs scripted.
BEFORE_ANY_MODE = pytest.mark.parametrize("scripting", [True], ids=["scripted"])

GROUPS, EACH = 50, 200


@pytest.mark.timeout(300)  # worker processes and a kill: 22 s on one starved core
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

    events = in_order_one_at_a_time(r, sent, died=pid)
    # Handled twice: only what the killed process handled and had not acked yet (a thread
    # acks its batch at its end), each handled again before the next of its group.
    again = {mid.decode() for mid, n in r.hgetall(DONE).items() if int(n) != 1}
    first_end = {}
    for seen in events.values():
        for kind, mid, p in seen:
            if kind == "end":
                first_end.setdefault(mid, p)
    assert all(first_end[mid] == pid for mid in again) and all(int(n) <= 2 for n in r.hvals(DONE))
    assert [kind for kind, mid, _ in events["g7"] if mid == hung] == ["start", "start", "end"]
    assert q.groups() == [] and len(q) == 0 and r.keys("kq:{q}:group*") == []


def in_order_one_at_a_time(
    log: redis.Redis, sent: dict[str, list[str]], died: int | None = None
) -> dict[str, list[tuple[str, str, int]]]:
    """Each group's handlers, from GROUP_LOG: ended in enqueue order (a delivery that ended
    and then came back, its ack lost, ends again at once: before the next of its group), and
    one at a time: a handler starts only once the one before ended, or once one that never
    ended (its process ``died``, or it failed as Redis went away) comes back. The events by group."""
    events: dict[str, list[tuple[str, str, int]]] = defaultdict(list)
    for entry in log.lrange(GROUP_LOG, 0, -1):
        kind, group, mid, p, _ = entry.decode().split()
        events[group].append((kind, mid, int(p)))
    assert sorted(events) == sorted(sent)
    for group, seen in events.items():
        ended = [mid for kind, mid, _ in seen if kind == "end"]
        assert [mid for i, mid in enumerate(ended) if i == 0 or ended[i - 1] != mid] == sent[group], group
        running: tuple[str, int] | None = None  # the delivery whose handler runs now
        for kind, mid, p in seen:
            if kind == "start":
                assert running is None or running[0] == mid and (died is None or running[1] == died), (
                    group,
                    running,
                    mid,
                )
                running = (mid, p)
            else:
                assert running == (mid, p), (group, running, mid)
                running = None
    return events


@BEFORE_ANY_MODE
def test_groups_keep_their_order_through_a_redis_restart_from_its_aof(
    durable: RedisServer, redis_server: RedisServer, procs: Procs, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The handlers log to another Redis (the session's), which stays up."""
    log = redis.Redis(port=redis_server.port)
    log.delete(GROUP_LOG, DONE)
    r = redis.Redis(port=durable.port)
    q = Queue("q", client=r, visibility_timeout=3, bucket_seconds=1)
    sent = {f"g{g}": q.enqueue_many([f"{g}-{i}" for i in range(50)], group=f"g{g}") for g in range(20)}
    monkeypatch.setenv(LOG_URL, redis_server.url)
    workers = [procs.worker(durable.url, "grouped", "-c", "4") for _ in range(2)]
    wait_until(lambda: log.hlen(DONE) >= 200)
    durable.stop()  # SIGTERM: every acknowledged write is in the AOF
    wait_until(lambda: all("retrying" in procs.log(w) for w in workers))
    durable.start()
    wait_until(lambda: log.hlen(DONE) == 1000 and q.stats().processing == 0 and len(q) == 0, timeout=120)
    for w in workers:
        w.send_signal(signal.SIGTERM)
    for w in workers:
        assert w.wait(60) == 0, procs.log(w)
    in_order_one_at_a_time(log, sent)
    assert q.groups() == [] and r.keys("kq:{q}:group*") == [] and not r.exists("kq:{q}:held")
    r.close()
    log.close()
