"""keyqueue on a real 3-node Redis Cluster: every queue lives in one slot, so every script
runs on one node, and queues spread over the nodes."""

from __future__ import annotations

import shutil
import subprocess
import time
from typing import Iterator

import pytest
from redis.cluster import RedisCluster

from keyqueue import Queue, Worker
from keyqueue.server import RedisServer, free_port


@pytest.fixture(scope="module")
def cluster() -> Iterator[RedisCluster]:
    nodes = [
        RedisServer(
            [
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-node-timeout",
                "2000",
                "--cluster-port",
                str(free_port()),
            ]
        )
        for _ in range(3)
    ]
    try:
        for n in nodes:
            n.start()
        cli = shutil.which("redis-cli")
        assert cli, "redis-cli is needed to form the cluster"
        addrs = [f"127.0.0.1:{n.port}" for n in nodes]
        subprocess.run(
            [cli, "--cluster", "create", *addrs, "--cluster-yes"], check=True, capture_output=True, timeout=60
        )
        client = RedisCluster(host="127.0.0.1", port=nodes[0].port)
        end = time.monotonic() + 30
        while client.cluster_info().get("cluster_state") != "ok":
            assert time.monotonic() < end, "cluster did not come up"
            time.sleep(0.1)
        yield client
        client.close()
    finally:
        for n in nodes:
            n.cleanup()


def test_queues_work_on_a_cluster_and_spread_over_nodes(cluster: RedisCluster) -> None:
    names = [f"q{i}" for i in range(12)]
    queues = [Queue(n, client=cluster, visibility_timeout=5, bucket_seconds=1) for n in names]
    for q in queues:
        q.enqueue_many([f"{q.name}-{i}" for i in range(20)])
    owners = {cluster.get_node_from_key(q.keys.seq).name for q in queues}
    assert len(owners) == 3  # the queues spread over all three nodes
    for q in queues:
        got = q.claim_many(5)
        assert [m.text for m in got] == [f"{q.name}-{i}" for i in range(5)]
        assert q.ack_many(got) == 5
        assert q.release(q.claim(), delay=0)
        q.dead_letter(q.claim(), "x")
        assert q.requeue() == 1
    for q in queues:  # (after the claims: a claim reaps, and would release it when due)
        q.enqueue("later", delay=0.2)
    time.sleep(0.25)  # every one due
    for q in queues:
        assert q.reap().delayed_released == 1
        assert q.stats().waiting == 16 and len(q.peek(100)) == 16


def test_long_poll_and_worker_on_a_cluster(cluster: RedisCluster) -> None:
    q = Queue("polled", client=cluster)
    t0 = time.monotonic()
    assert q.claim(wait=0.3) is None and time.monotonic() - t0 >= 0.3
    q.enqueue_many(["a", "b", "c"])
    seen: list[str] = []
    Worker(q, lambda m: seen.append(m.text)).run(burst=True)
    assert seen == ["a", "b", "c"]
    q.destroy()
    assert q.stats().waiting == 0 and not cluster.keys("kq:{polled}:*", target_nodes=RedisCluster.ALL_NODES)


def test_a_decoding_cluster_client_is_refused_clearly(cluster: RedisCluster) -> None:
    from keyqueue import ConfigurationError

    node = cluster.get_default_node()
    decoding = RedisCluster(host=node.host, port=node.port, decode_responses=True)
    try:
        with pytest.raises(ConfigurationError, match="decode_responses=False"):
            Queue("q", client=decoding)
    finally:
        decoding.close()


def test_the_script_free_mode_is_refused_clearly_on_a_cluster(cluster: RedisCluster) -> None:
    from keyqueue import ConfigurationError

    with pytest.raises(ConfigurationError, match="script-free mode needs a single Redis server"):
        Queue("q", client=cluster, scripting=False)


def test_the_async_queue_on_a_cluster(cluster: RedisCluster) -> None:
    import asyncio

    from redis.asyncio.cluster import RedisCluster as AsyncCluster

    from keyqueue import aio

    node = cluster.get_default_node()

    async def main() -> None:
        client = AsyncCluster(host=node.host, port=node.port)
        try:
            queues = [aio.Queue(f"aq{i}", client=client, visibility_timeout=5) for i in range(6)]
            for q in queues:
                assert await q.enqueue_many(["a", "b"]) == ["1", "2"]
            for q in queues:
                got = await q.claim_many(5)
                assert [m.text for m in got] == ["a", "b"] and await q.ack_many(got) == 2
            t0 = asyncio.get_running_loop().time()
            waiter = asyncio.create_task(queues[0].claim(wait=5))
            await asyncio.sleep(0.2)
            await queues[0].enqueue("late")
            m = await waiter
            assert m is not None and m.text == "late" and asyncio.get_running_loop().time() - t0 < 4
            report = await queues[0].check(repair=True, settle=0)
            assert report.consistent
            await queues[1].destroy()
            names = await aio.list_queues(client)
            assert "aq1" not in names and {f"aq{i}" for i in (0, 2, 3, 4, 5)} <= set(names)
        finally:
            await client.aclose()

    asyncio.run(main())
    assert len({cluster.keyslot(f"kq:{{aq{i}}}:seq") for i in range(6)}) == 6


def test_schedules_on_a_cluster(cluster: RedisCluster) -> None:
    """Upsert, fire by claims and by a reap, fire now, pause, check and unschedule, on queues
    in different slots."""
    queues = [Queue(f"sq{i}", client=cluster) for i in range(3)]
    for q in queues:
        q.schedule("tick", every=1, body=q.name)
    for q in queues:
        end = time.monotonic() + 30
        msg = None
        while msg is None:
            assert time.monotonic() < end, f"{q.name} never fired"
            msg = q.claim(wait=0.5)
        assert msg.text == q.name and msg.scheduled_for is not None and msg.ack()
        q.reap()
        assert q.fire_schedule("tick")
        assert q.pause_schedule("tick") and q.schedules()[0].paused
        assert q.check(settle=0).consistent
        assert q.unschedule("tick") and q.schedules() == []


def test_flow_control_on_a_cluster(cluster: RedisCluster) -> None:
    q = Queue("limited", client=cluster, rate_limit="2/3600", max_in_flight=5)
    q.enqueue_many(["a", "b", "c"])
    assert [m.text for m in q.claim_many(5)] == ["a", "b"]
    assert q.claim() is None
    state = q.rate_state()
    assert (state.limit, state.used, state.in_flight) == (2, 2, 2)
    assert q.throttle(30) == 30 and q.rate_state().throttled_for > 29
    assert q.counters()["throttled"] == 2
    q.destroy()
