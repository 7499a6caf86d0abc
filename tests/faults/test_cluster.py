"""keyqueue on a real 3-node Redis Cluster: every queue lives in one slot, so every script
runs on one node, and queues spread over the nodes."""

from __future__ import annotations

import json
import socket
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Any, Iterator

import pytest
import redis
from redis.cluster import RedisCluster

from keyqueue import KeyQueueError, Queue, Worker, aio
from keyqueue.queue import claim_any
from keyqueue.server import free_port

from ..support.cluster import Cluster, spread_name
from ..support.helpers import wait_until
from ..support.processes import Procs, in_process


@pytest.fixture(scope="module")
def cluster_set() -> Iterator[Cluster]:
    c = Cluster()
    yield c
    c.stop()


@pytest.fixture(scope="module")
def cluster(cluster_set: Cluster) -> RedisCluster:
    return cluster_set.client


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
    first = q.enqueue("d", dedup_key="k")  # (a dedup record's SCAN goes to its slot's node)
    assert q.forget_dedup_keys() == 1 and q.enqueue("d", dedup_key="k") != first
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


def test_the_script_free_mode_is_refused_clearly_on_a_cluster(cluster_set: Cluster) -> None:
    from keyqueue import ConfigurationError

    for made in (
        lambda: Queue("q", client=cluster_set.client, scripting=False),
        lambda: Queue("q", url=cluster_set.url, scripting=False),
    ):
        with pytest.raises(ConfigurationError, match="script-free mode needs a single Redis server") as exc:
            made()
        assert "\n" not in str(exc.value)


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


# --- every entry point on a redis+cluster:// URL -----------------------------------------


def names_on_every_node_of(client: RedisCluster, count: int = 3) -> list[str]:
    """Queue names whose keys live on ``count`` different nodes."""
    seen: dict[str, str] = {}
    for i in range(1000):
        node = client.get_node_from_key(f"kq:{{n{i}}}:seq").name
        seen.setdefault(node, f"n{i}")
        if len(seen) == count:
            return list(seen.values())
    raise AssertionError("no names on every node")


def names_on_every_node(c: Cluster, count: int = 3) -> list[str]:
    return names_on_every_node_of(c.client, count)


def test_a_cluster_url_on_both_faces(cluster_set: Cluster) -> None:
    """Any seed (a dead one first), query options applied, queues on every node listed."""
    import asyncio

    from keyqueue import aio
    from keyqueue.queue import list_queues

    url = cluster_set.url.replace("://", "://127.0.0.1:1,") + "/?socket_timeout=5"
    names = names_on_every_node(cluster_set)
    queues = [Queue(n, url=url) for n in names]
    assert queues[0].client.nodes_manager.connection_kwargs["socket_timeout"] == 5.0
    for q in queues:
        q.enqueue(q.name)
    assert set(names) <= set(list_queues(queues[0].client))
    assert [q.claim().text for q in queues] == names  # type: ignore[union-attr]

    async def main() -> None:
        aqs = [aio.Queue(n, url=url) for n in names]
        try:
            for q in aqs:
                await q.enqueue("async " + q.name)
            assert set(names) <= set(await aio.list_queues(aqs[0].client))
            got = [await q.claim() for q in aqs]
            assert [m.text for m in got if m is not None] == ["async " + n for n in names]
        finally:
            for q in aqs:
                await q.client.aclose()

    asyncio.run(main())
    for q in queues:
        q.destroy()
        q.client.close()


@pytest.mark.parametrize(
    "url, why",
    [
        ("redis+cluster://", "bad cluster node address"),
        ("redis+cluster://u:s3cret@", "bad cluster node address"),
        ("redis+cluster://u:s3cret@127.0.0.1", "bad cluster node address"),
        ("redis+cluster://u:s3cret@127.0.0.1:99999", "bad port"),
        ("redis+cluster://u:s3cret@127.0.0.1:x", "bad cluster node address"),
        ("redis+cluster://u:s3cret@127.0.0.1:7000/1", "no databases"),
        ("rediss+cluster://u:s3cret@127.0.0.1:7000/?socket_timeout=soon", "socket_timeout"),
        ("redis+cluster://u:s3cret@127.0.0.1:7000/?bogus=1", "bogus"),
        ("redis+cluster://u:s3cret@127.0.0.1:7000/?ssl_ca_certs=/x", "needs TLS"),
    ],
)
def test_a_malformed_cluster_url_is_one_line_before_any_connection(url: str, why: str) -> None:
    """(Nothing listens on these ports: a connection tried would be a ConnectionError.)"""
    from keyqueue import ConfigurationError, aio

    for made in (lambda: Queue("q", url=url), lambda: aio.Queue("q", url=url)):
        with pytest.raises(ConfigurationError) as exc:
            made()
        text = str(exc.value)
        assert why in text and "\n" not in text and "s3cret" not in text
    done = cli(url, "ls")
    assert done.returncode == 2 and why in done.stderr and "s3cret" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_an_unreachable_cluster_fails_at_its_first_operation(tmp_path: Path) -> None:
    import asyncio

    import redis

    from keyqueue import aio

    url = f"redis+cluster://u:s3cret@127.0.0.1:{free_port()}"
    sync = Queue("q", url=url)  # made without I/O, as a module-level Queue is
    with pytest.raises(redis.ConnectionError) as exc:
        sync.enqueue("x")
    assert "s3cret" not in str(exc.value)
    q = aio.Queue("q", url=url)  # the asyncio client connects at its first command

    async def first() -> None:
        try:
            await q.enqueue("x")
        finally:
            await q.client.aclose()

    with pytest.raises(redis.ConnectionError):
        asyncio.run(first())
    done = cli(url, "ls")
    assert done.returncode == 1 and "s3cret" not in done.stderr and len(done.stderr.strip().splitlines()) == 1


def cli(url: str, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return in_process(args, url, stdin)


def test_the_cli_on_a_cluster_url(cluster_set: Cluster) -> None:
    names = names_on_every_node(cluster_set)
    for n in names:
        done = cli(cluster_set.url, "enqueue", n, "a", "b")
        assert done.returncode == 0, done.stderr
        assert done.stdout.split() == ["1", "2"]
    listed = cli(cluster_set.url, "ls")
    assert listed.returncode == 0 and set(names) <= set(listed.stdout.split()), listed.stderr
    stats = cli(cluster_set.url, "stats", names[2], "--json")
    assert stats.returncode == 0 and json.loads(stats.stdout)["waiting"] == 2, stats.stderr
    for n in names:
        Queue(n, client=cluster_set.client).destroy()


def test_worker_and_reaper_processes_on_a_cluster_url(cluster_set: Cluster, tmp_path: Path) -> None:
    from ..support.handlers import DONE

    procs = Procs(tmp_path)
    client = cluster_set.client
    names = names_on_every_node(cluster_set)
    queues = [Queue(n, client=client) for n in names]
    try:
        for q in queues:  # due in a moment: only a reap makes them waiting
            q.enqueue("later", delay=0.5)
        reaper = procs.spawn(cluster_set.url, "reaper", "--interval", "0.2")
        wait_until(lambda: all(q.stats().waiting == 1 for q in queues), timeout=60, interval=0.1)
        assert reaper.poll() is None, procs.log(reaper)
        client.delete(DONE)
        ids = queues[0].enqueue_many([f"m{i}" for i in range(20)])
        worker = procs.spawn(cluster_set.url, "worker", "tests.support.handlers:record", "-q", names[0])
        wanted = {i.encode() for i in ids}
        wait_until(lambda: wanted <= set(client.hgetall(DONE)), timeout=60, interval=0.1)
        assert queues[0].stats().waiting == 0  # the one the reaper released too
        assert worker.poll() is None, procs.log(worker)
    finally:
        for p in procs.started:
            p.terminate()
            p.wait(30)
        for q in queues:
            q.destroy()


def test_serve_on_a_cluster_url(cluster_set: Cluster) -> None:
    """The dashboard (its pages and API), /metrics and the SQS API over a cluster URL."""
    import boto3
    import httpx

    from keyqueue.web import create_app

    from ..support.web_support import Served

    names = names_on_every_node(cluster_set)
    for n in names:
        Queue(n, client=cluster_set.client).enqueue_many(["a", "b", "c"])
    served = Served(create_app(url=cluster_set.url, sqs=("AKID", "secret")))
    try:
        with httpx.Client(base_url=served.url, timeout=30) as c:
            listed = {row["name"]: row for row in c.get("/api/queues").json()}
            assert all(listed[n]["waiting"] == 3 for n in names)
            metrics = c.get("/metrics").text
            for n in names:
                assert f'keyqueue_messages{{queue="{n}",state="waiting"}} 3.0' in metrics
            assert c.get("/healthz").status_code == 200
            page = c.get("/")  # the dashboard's pages, as a person opens them
            assert page.status_code == 200 and all(n in page.text for n in names)
            one = c.get(f"/queues/{names[2]}")
            assert one.status_code == 200 and names[2] in one.text and "Waiting" in one.text, one.text[:500]
        sqs = boto3.client(
            "sqs",
            endpoint_url=served.url,
            region_name="us-east-1",
            aws_access_key_id="AKID",
            aws_secret_access_key="secret",
        )
        url = sqs.get_queue_url(QueueName=names[1])["QueueUrl"]
        sqs.send_message(QueueUrl=url, MessageBody="via sqs")
        got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
        assert [m["Body"] for m in got] == ["a", "b", "c", "via sqs"]
    finally:
        served.stop()
        for n in names:
            Queue(n, client=cluster_set.client).destroy()


def blocked_on_every_node(c: Cluster, names: list[str]) -> bool:
    """Whether each queue's node has a client blocked in a BLPOP of that queue's signal at
    this moment: all three waits open at once, not one wait and polls of the others."""
    for n in names:
        node = c.server_of(f"kq:{{{n}}}:seq")
        with redis.Redis(port=node.port) as r:
            clients = r.client_list()
        if not any(x["cmd"] == "blpop" and "b" in x["flags"] for x in clients):
            return False
    return True


def test_a_worker_on_three_nodes_wakes_for_any_of_them_at_once(cluster_set: Cluster) -> None:
    """Idle on three queues on three nodes, the worker waits on all three at once (one BLPOP
    per queue): a message to the last one is taken as it comes, on both faces. (The check is
    what each node sees, not a latency: a busy machine delays every wake alike.)"""
    import asyncio
    import threading

    names = names_on_every_node(cluster_set)
    queues = [Queue(n, client=cluster_set.client) for n in names]
    for q in queues:  # (the names are shared: a test before this one that failed may have left messages)
        q.purge(source="all")
    handled: list[str] = []
    worker = Worker(queues, lambda m: handled.append(m.text))
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        for i in range(3):
            wait_until(lambda: blocked_on_every_node(cluster_set, names), timeout=30)
            queues[2].enqueue(f"m{i}")
            wait_until(lambda: f"m{i}" in handled, timeout=30)
    finally:
        worker.stop()
        thread.join(30)
    assert handled == ["m0", "m1", "m2"]

    async def main() -> None:
        from redis.asyncio.cluster import RedisCluster as AsyncCluster

        node = cluster_set.client.get_default_node()
        client = AsyncCluster(host=node.host, port=node.port)
        aqs = [aio.Queue(n, client=client) for n in names]
        try:
            for i in range(3):
                # (a long wait: nothing but the message can end it within the test's time)
                waiter = asyncio.create_task(aio.claim_any(aqs, 1, wait=120))
                deadline = time.monotonic() + 30
                while not await asyncio.to_thread(blocked_on_every_node, cluster_set, names):
                    assert time.monotonic() < deadline, "the waits never stood on every node at once"
                    await asyncio.sleep(0.02)
                await aqs[2].enqueue(f"a{i}")
                q, got = await asyncio.wait_for(waiter, 30)
                assert q is aqs[2] and [m.text for m in got] == [f"a{i}"]
                await got[0].ack()
        finally:
            await client.aclose()

    asyncio.run(main())
    t0 = time.monotonic()  # and the blocking claim_any itself
    assert claim_any(queues, 1, wait=0.3) == (None, []) and time.monotonic() - t0 >= 0.3


@pytest.mark.timeout(400)
def test_a_primary_killed_under_a_producer_and_a_worker_loses_nothing_acknowledged(tmp_path: Path) -> None:
    """Three primaries with two replicas each; the queue's primary is SIGKILLed while two
    producers, blocking and asyncio, enqueue (min_replicas=1) and a worker process consumes: its replica is promoted, both
    carry on, and every enqueue that returned is handled. The seed given is a replica."""
    import asyncio
    import threading

    import redis

    from ..support.handlers import DONE

    c = Cluster(replicas=2, node_timeout_ms=1000)  # two each: the promoted one keeps a replica
    procs = Procs(tmp_path)
    stop = threading.Event()
    sent: list[str] = []
    sent_async: list[str] = []
    errors: list[str] = []
    try:
        done_node = c.client.get_node_from_key(DONE).name
        name = next(f"f{i}" for i in range(1000) if c.client.get_node_from_key(f"kq:{{f{i}}}:seq").name != done_node)
        victim = c.server_of(f"kq:{{{name}}}:seq")
        replica = next(
            n
            for n in c.nodes
            if n.port != victim.port and redis.Redis(port=n.port).info("replication")["role"] == "slave"
        )
        url = f"redis+cluster://127.0.0.1:{replica.port}"
        producer_q = Queue(name, url=url, min_replicas=1, replica_timeout=2)

        def produce() -> None:
            i = 0
            while not stop.is_set():
                try:
                    sent.append(producer_q.enqueue(f"m{i}"))
                    i += 1
                except (redis.RedisError, KeyQueueError) as exc:  # the failover: tried again
                    errors.append(repr(exc))
                    time.sleep(0.05)
                time.sleep(0.005)

        async def produce_async() -> None:
            aq = aio.Queue(name, url=url, min_replicas=1, replica_timeout=2)
            try:
                i = 0
                while not stop.is_set():
                    try:
                        sent_async.append(await aq.enqueue(f"a{i}"))
                        i += 1
                    except (redis.RedisError, KeyQueueError) as exc:
                        errors.append(repr(exc))
                        await asyncio.sleep(0.05)
                    await asyncio.sleep(0.005)
            finally:
                await aq.client.aclose()

        producer = threading.Thread(target=produce, daemon=True)
        producer.start()
        aproducer = threading.Thread(target=asyncio.run, args=(produce_async(),), daemon=True)
        aproducer.start()
        worker = procs.spawn(url, "--min-replicas", "1", "worker", "tests.support.handlers:record", "-q", name)
        wait_until(lambda: len(c.client.hgetall(DONE)) >= 50, timeout=60, interval=0.1)
        victim.kill()
        before, abefore = len(sent), len(sent_async)
        # both producers carry on against the promoted replica
        wait_until(lambda: len(sent) > before + 50 and len(sent_async) > abefore + 50, timeout=60, interval=0.1)
        stop.set()
        producer.join(30)
        aproducer.join(30)
        wanted = {i.encode() for i in sent + sent_async}
        assert len(wanted) == len(sent) + len(sent_async)
        wait_until(lambda: wanted <= set(c.client.hgetall(DONE)), timeout=120, interval=0.2)
        assert worker.poll() is None, procs.log(worker)
        c.client.nodes_manager.initialize()
        assert c.server_of(f"kq:{{{name}}}:seq").port != victim.port  # served by the promoted replica
        assert errors  # (the kill was felt)
    finally:
        stop.set()
        for p in procs.started:
            p.terminate()
            p.wait(30)
        c.stop()


def test_a_worker_started_before_its_cluster_waits_for_it(tmp_path: Path) -> None:
    """A cluster down when the worker starts is an outage it waits out, as a server's is."""
    from ..support.handlers import DONE

    ports = [free_port() for _ in range(3)]
    # Bound, not listening, until the cluster starts: the worker is refused as by a port
    # nothing has, and no other test's server takes one of them meanwhile.
    held = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in ports]
    for s, port in zip(held, ports):
        s.bind(("127.0.0.1", port))
    procs = Procs(tmp_path)
    url = "redis+cluster://" + ",".join(f"127.0.0.1:{p}" for p in ports)
    worker = procs.spawn(url, "worker", "tests.support.handlers:record", "-q", "early")
    c = None
    try:
        time.sleep(1)  # it tries, fails and backs off meanwhile
        assert worker.poll() is None, procs.log(worker)
        for s in held:
            s.close()
        c = Cluster(ports=ports)
        ids = Queue("early", client=c.client).enqueue_many(["a", "b"])
        wanted = {i.encode() for i in ids}
        wait_until(lambda: wanted <= set(c.client.hgetall(DONE)), timeout=90, interval=0.2)  # type: ignore[union-attr]
        assert worker.poll() is None, procs.log(worker)
    finally:
        for s in held:
            s.close()
        worker.terminate()
        worker.wait(30)
        if c is not None:
            c.stop()


def test_min_replicas_waits_on_the_queues_own_node(cluster_set: Cluster) -> None:
    """WAIT goes with each write to the node that holds the queue (these primaries have no
    replica: the write is refused as not replicated, and only that node saw WAIT)."""
    import redis

    from keyqueue import NotReplicated

    def waits(port: int) -> int:
        with redis.Redis(port=port) as r:
            return int(r.info("commandstats").get("cmdstat_wait", {}).get("calls", 0))

    names = names_on_every_node(cluster_set)
    for n in names:
        before = {node.port: waits(node.port) for node in cluster_set.nodes}
        q = Queue(n, url=cluster_set.url, min_replicas=1, replica_timeout=0.1)
        with pytest.raises(NotReplicated):
            q.enqueue("x")
        own = cluster_set.server_of(f"kq:{{{n}}}:seq").port
        grew = {port for port, count in before.items() if waits(port) > count}
        assert grew == {own}
        q.destroy()


def test_a_tls_cluster_url_sets_tls_on_both_faces_without_connecting() -> None:
    from keyqueue import aio

    url = f"rediss+cluster://u:s3cret@127.0.0.1:{free_port()}/?ssl_ca_certs=/etc/ca.pem&ssl_cert_reqs=required"
    sync = Queue("q", url=url).client
    kw = sync.kwargs
    assert (kw["ssl"], kw["ssl_ca_certs"], kw["password"], kw["username"]) == (True, "/etc/ca.pem", "s3cret", "u")
    (only,) = aio.Queue("q", url=url).client.nodes_manager.startup_nodes.values()
    assert only.connection_kwargs["ssl_ca_certs"] == "/etc/ca.pem" and only.connection_class.__name__ == "SSLConnection"


def test_a_sharded_queue_spreads_over_every_primary(cluster: RedisCluster) -> None:
    name = spread_name(cluster, 6)
    q = Queue(name, client=cluster, shards=6, visibility_timeout=5)
    ids = q.enqueue_many([f"m{i}" for i in range(120)]) + [q.enqueue(f"s{i}") for i in range(60)]
    by_shard = {int(i.split("#")[0]) for i in ids}
    assert by_shard == set(range(6))
    nodes = {cluster.get_node_from_key(f"kq:{{{name}#{s}}}:seq").name for s in by_shard}
    assert len(nodes) == len(cluster.get_primaries())
    per = q.shard_stats()
    assert all(s.waiting > 0 for s in per)
    on_node: dict[str, int] = {}  # the round robin gives each primary a third
    for shard, s in enumerate(per):
        node = cluster.get_node_from_key(f"kq:{{{name}#{shard}}}:seq").name
        on_node[node] = on_node.get(node, 0) + s.waiting
    assert sorted(on_node.values()) == [60, 60, 60], on_node
    assert q.stats().waiting == sum(s.waiting for s in per) == 180
    assert Queue(name, client=cluster).shards == 6
    seen: list[str] = []
    Worker(q, lambda m: seen.append(m.id), concurrency=4).run(burst=True)
    assert sorted(seen) == sorted(ids)
    assert q.counters()["acked"] == 180 and q.stats().processing == 0
    q.destroy()
    assert not any(cluster.scan_iter(f"kq:{{{name}*", target_nodes=RedisCluster.ALL_NODES))


def test_a_sharded_queue_on_a_cluster_from_asyncio(cluster_set: Cluster) -> None:
    import asyncio

    import redis.asyncio.cluster

    name = spread_name(cluster_set.client, 6)

    async def main() -> None:
        client = redis.asyncio.cluster.RedisCluster(host="127.0.0.1", port=cluster_set.nodes[0].port)
        try:
            q = aio.Queue(name, client=client, shards=6)
            ids = await q.enqueue_many([f"m{i}" for i in range(60)])
            waiter = asyncio.ensure_future(aio.Queue(name, client=client).claim_many(100, wait=5))
            got = await waiter
            assert got and all(m.id in ids for m in got)
            rest = []
            while len(got) + len(rest) < 60:
                more = await q.claim_many(100)
                assert more
                rest += more
            assert sorted(m.id for m in got + rest) == sorted(ids)
            assert await q.ack_many(got + rest) == 60
            stats = await q.shard_stats()
            assert sum(s.processing for s in stats) == (await q.stats()).processing == 0
            await q.destroy()
        finally:
            await client.aclose()

    asyncio.run(main())


def test_a_rate_limit_holds_for_a_sharded_queue_over_the_nodes(cluster: RedisCluster) -> None:
    """Each shard takes its part of every window (the parts sum to the limit), so 6 shards on
    three primaries at 12 a second deliver about 12 a second in all; a limit below the
    shard count reaches every shard in turn."""
    name = spread_name(cluster, 6)
    q = Queue(name, client=cluster, shards=6, rate_limit="12/1")
    q.enqueue_many([f"m{i}" for i in range(600)])
    got = 0
    start = time.monotonic()
    while time.monotonic() - start < 2.5:
        got += len(q.claim_many(100, wait=0.1))
    spent = time.monotonic() - start
    assert 12 <= got <= 12 * (int(spent) + 2), (got, spent)
    q.destroy()
    slow = Queue(name, client=cluster, shards=6, rate_limit="3/1")
    slow.enqueue_many([f"m{i}" for i in range(60)])
    shards: set[str] = set()
    got = 0
    start = time.monotonic()
    while len(shards) < 6 and time.monotonic() - start < 60:
        msgs = slow.claim_many(100, wait=0.5)
        got += len(msgs)
        shards |= {m.id.split("#")[0] for m in msgs}
    spent = time.monotonic() - start
    assert len(shards) == 6 and got <= 3 * (int(spent) + 2), (shards, got, spent)
    slow.destroy()


def test_max_in_flight_holds_for_a_sharded_queue_over_the_nodes(cluster_set: Cluster) -> None:
    """Each shard holds its part of the cap (the parts sum to it), so the queue never has
    more in flight than its cap whichever consumers claim; a cap below the shard count would
    leave a shard no slot, and is refused with nothing written."""
    cluster = cluster_set.client
    name = spread_name(cluster, 3, prefix="capped")
    q = Queue(name, client=cluster, shards=3, max_in_flight=7)
    other = Queue(name, client=cluster)
    q.enqueue_many([f"m{i}" for i in range(30)])
    got = other.claim_many(2) + q.claim_many(30) + other.claim_many(30)
    assert len(got) == 7 and q.rate_state().in_flight == 7
    parts = Counter(m.id.split("#")[0] for m in got)
    assert sorted(parts.values()) == [2, 2, 3], parts
    q.ack(got[0])
    assert len(q.claim_many(30)) == 1 and other.claim_many(30) == []
    refused = cli(cluster_set.url, "config", name, "--set", "max_in_flight=2")
    assert refused.returncode == 2 and refused.stderr.startswith("Error: max_in_flight=2 is below the 3 shards")
    assert len(refused.stderr.strip().splitlines()) == 1 and Queue(name, client=cluster).settings.max_in_flight == 7
    q.destroy()
    keys_before = sorted(k for node in cluster.get_primaries() for k in cluster.keys(target_nodes=node))
    with pytest.raises(KeyQueueError, match="max_in_flight=2 is below the 3 shards"):
        Queue(f"{name}x", client=cluster, shards=3, max_in_flight=2)
    assert sorted(k for node in cluster.get_primaries() for k in cluster.keys(target_nodes=node)) == keys_before


def test_a_stored_cap_below_the_shard_count_stops_claims_loudly_until_raised(cluster_set: Cluster) -> None:
    """A cap stored where no check saw it (a queue moved from one server, where it is
    allowed, or written by an older client) would leave some shards no slot: claims raise
    a ConfigurationError saying how to fix it; reads go on; a raised cap claims again."""
    cluster = cluster_set.client
    name = spread_name(cluster, 3, prefix="stored")
    q = Queue(name, client=cluster, shards=3)
    q.enqueue_many([f"m{i}" for i in range(6)])
    for i in range(3):
        cluster.hset(f"kq:{{{name}#{i}}}:config", "max_in_flight", 2)
    stale = Queue(name, client=cluster)
    assert stale.stats().waiting == 6
    for claim in (lambda: stale.claim_many(6), lambda: claim_any([stale], count=6)):
        with pytest.raises(KeyQueueError, match="max_in_flight=2, below its 3 shards.*--set max_in_flight=3"):
            claim()
    assert stale.stats().waiting == 6  # nothing taken
    done = cli(cluster_set.url, "config", name, "--set", "max_in_flight=3")
    assert done.returncode == 0, done.stderr
    assert len(Queue(name, client=cluster).claim_many(6)) == 3
    q.destroy()


def test_a_primary_no_shard_falls_on_is_named_in_a_warning(
    cluster: RedisCluster, caplog: pytest.LogCaptureFixture
) -> None:
    """(3 shards on 3 primaries miss one for about half the names; 6 never do.)"""
    primaries = {n.name for n in cluster.get_primaries()}

    def nodes(name: str) -> set[str]:
        return {cluster.get_node_from_key(f"kq:{{{name}#{s}}}:seq").name for s in range(3)}

    lopsided = next(f"lop{i}" for i in range(1000) if len(nodes(f"lop{i}")) < 3)
    empty = sorted(primaries - nodes(lopsided))
    with caplog.at_level("WARNING", logger="keyqueue.queue"):
        q = Queue(lopsided, client=cluster, shards=3)
        even = Queue(spread_name(cluster, 3), client=cluster, shards=3)
    warned = [r.getMessage() for r in caplog.records if "shards fall on" in r.getMessage()]
    assert len(warned) == 1 and lopsided in warned[0] and all(e in warned[0] for e in empty), warned
    q.destroy()
    even.destroy()


def test_sharded_queues_made_at_once_on_a_cluster_agree_on_one_count(cluster: RedisCluster) -> None:
    import threading

    for round_ in range(5):
        name = f"{spread_name(cluster, 6)}-race{round_}"
        counts = [None, 2, 3, 6]
        outcomes: list[object] = [None] * len(counts)
        start = threading.Barrier(len(counts))

        def make(i: int) -> None:
            start.wait()
            try:
                q = Queue(name, client=cluster, shards=counts[i], visibility_timeout=9)
                outcomes[i] = (q, q.enqueue(f"from {counts[i]}"))
            except KeyQueueError as exc:
                outcomes[i] = exc

        threads = [threading.Thread(target=make, args=(i,)) for i in range(len(counts))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        made = [o for o in outcomes if isinstance(o, tuple)]
        assert made and all(isinstance(o, tuple) or "\n" not in str(o) for o in outcomes), outcomes
        assert len({q.shards for q, _ in made}) == 1, outcomes
        got = [m.id for m in Queue(name, client=cluster).claim_many(100)]
        assert sorted(got) == sorted(i for _, i in made), outcomes
        made[0][0].destroy()


def test_a_sharded_batch_is_one_write_to_each_primary(cluster: RedisCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    from keyqueue.transport import sync

    name = spread_name(cluster, 6)
    q = Queue(name, client=cluster, shards=6)
    q.enqueue_many(
        [f"w{i}" for i in range(12)], shard_keys=[f"k{i}" for i in range(12)]
    )  # (scripts loaded, the shards registered)
    writes: list[int] = []
    pack = sync.pack
    monkeypatch.setattr(sync, "pack", lambda conn, cmds: (writes.append(len(cmds)), pack(conn, cmds))[1])
    ids = q.enqueue_many([f"m{i}" for i in range(60)], shard_keys=[f"k{i % 12}" for i in range(60)])
    assert len(writes) == len(cluster.get_primaries()) and sum(writes) >= 6, writes
    got = [m for m in q.claim_many(100) if m.text.startswith("m")]
    assert sorted(m.id for m in got) == sorted(ids)
    for k in range(12):  # each key's messages in their order on their shard
        assert [m.text for m in got if m.id in ids[k::12]] == [f"m{i}" for i in range(k, 60, 12)]
    q.destroy()


def test_a_cluster_refusing_the_credentials_is_a_refusal_not_an_outage(cluster_set: Cluster, tmp_path: Path) -> None:
    """Seeds that refuse the password: the library raises the refusal (both faces), and a
    worker or reaper exits 78 with one line, the password never shown, as on one server."""
    import asyncio

    import redis

    url = cluster_set.url.replace("://", "://nobody:wrong-s3cret@")
    with pytest.raises(redis.AuthenticationError):
        Queue("q", url=url).enqueue("x")

    async def main() -> None:
        q = aio.Queue("q", url=url)
        try:
            with pytest.raises(redis.AuthenticationError):
                await q.enqueue("x")
        finally:
            await q.aclose()

    asyncio.run(main())
    procs = Procs(tmp_path)
    try:
        for command in (["worker", "tests.support.handlers:record", "-q", "q"], ["reaper"]):
            p = procs.spawn(url, *command)
            assert p.wait(60) == 78, procs.log(p)
            log = procs.log(p)
            errors = [line for line in log.splitlines() if line.startswith("Error:")]
            assert len(errors) == 1 and errors[0].startswith("Error: Redis refused the credentials: "), log
            assert "retrying" not in log and "Traceback" not in log and "wrong-s3cret" not in log
    finally:
        for p in procs.started:
            if p.poll() is None:
                p.kill()
            p.wait()


def test_a_wait_goes_to_the_node_of_the_write_it_follows(cluster: RedisCluster) -> None:
    """One round trip over several nodes (a sharded batch with min_replicas): each write's
    WAIT is sent to that write's node, and a MULTI to the node of what follows it."""
    from keyqueue.core.roundtrip import node_groups

    names = names_on_every_node_of(cluster)
    commands: list[tuple[Any, ...]] = []
    for name in names + names[:1]:
        commands += [("MULTI",), ("SET", f"{{{name}}}:k", 1), ("EXEC",), ("WAIT", 1, 100)]
    groups = node_groups(cluster, commands)
    assert len(groups) == 3
    for node, indexes in groups:
        for i in indexes:  # every keyless command sits with the SET it belongs to
            write = commands[4 * (i // 4) + 1]
            assert cluster.get_node_from_key(write[1]).name == node.name, (commands[i], write)


def _move_slot(c: Cluster, slot: int, source: redis.Redis, target: redis.Redis, target_port: int) -> None:
    """Move ``slot`` from ``source`` to ``target`` as ``redis-cli --cluster reshard`` does:
    importing/migrating, its keys MIGRATEd, then every node told the new owner."""
    source_id, target_id = source.execute_command("CLUSTER MYID"), target.execute_command("CLUSTER MYID")
    target.execute_command("CLUSTER SETSLOT", slot, "IMPORTING", source_id)
    source.execute_command("CLUSTER SETSLOT", slot, "MIGRATING", target_id)
    while keys := source.execute_command("CLUSTER GETKEYSINSLOT", slot, 100):
        source.execute_command("MIGRATE", "127.0.0.1", target_port, "", 0, 5000, "KEYS", *keys)
    for node in c.nodes:
        redis.Redis(port=node.port).execute_command("CLUSTER SETSLOT", slot, "NODE", target_id)


@pytest.mark.parametrize("face", ["sync", "asyncio"])
def test_a_sharded_batch_sent_on_a_stale_slot_map_enqueues_each_part_once(face: str) -> None:
    """A slot moved since the client learnt the map (a managed cluster rebalancing): the
    node answers MOVED for the shard whose slot left it, and only that shard's part is sent
    again, to its new node; the other shard's part, already enqueued, is not."""
    import asyncio

    import redis.asyncio.cluster

    c = Cluster()
    try:
        client = c.client
        name = next(
            f"moved{i}"
            for i in range(1000)
            if client.get_node_from_key(f"kq:{{moved{i}#0}}:seq").name
            == client.get_node_from_key(f"kq:{{moved{i}#1}}:seq").name
        )
        here = client.get_node_from_key(f"kq:{{{name}#1}}:seq")
        there = next(n for n in client.get_primaries() if n.name != here.name)
        slot = client.keyslot(f"kq:{{{name}#1}}:seq")
        bodies = [f"m{i}" for i in range(10)]

        def move() -> None:
            _move_slot(c, slot, redis.Redis(port=here.port), redis.Redis(port=there.port), there.port)

        if face == "sync":
            q = Queue(name, client=client, shards=2)
            q.enqueue_many(["warm0", "warm1"])  # (the map learnt, then the slot moves)
            move()
            assert len(q.enqueue_many(bodies)) == 10
        else:

            async def main() -> None:
                aclient = redis.asyncio.cluster.RedisCluster(host="127.0.0.1", port=c.nodes[0].port)
                try:
                    aq = aio.Queue(name, client=aclient, shards=2)
                    await aq.enqueue_many(["warm0", "warm1"])
                    move()
                    assert len(await aq.enqueue_many(bodies)) == 10
                finally:
                    await aclient.aclose()

            asyncio.run(main())
        fresh = Queue(name, client=RedisCluster(host="127.0.0.1", port=c.nodes[0].port))
        assert sorted(m.text for m in fresh.peek(100)) == sorted(["warm0", "warm1", *bodies])  # each once
    finally:
        c.stop()


def test_round_robin_gives_every_primary_its_share_however_the_shards_fell(cluster: RedisCluster) -> None:
    """6 shards whose slots fall unevenly over the 3 primaries (3, 2 and 1, say): the round
    robin takes the nodes in turn, then each node's shards, so each primary gets a third of
    the messages (its Redis work with them), not a share of its shards."""
    from collections import Counter

    def nodes_of(name: str) -> list[str]:
        return [cluster.get_node_from_key(f"kq:{{{name}#{i}}}:seq").name for i in range(6)]

    name = next(
        f"uneven{i}"
        for i in range(1000)
        if len(set(nodes_of(f"uneven{i}"))) == 3 and len(set(Counter(nodes_of(f"uneven{i}")).values())) > 1
    )
    placed = nodes_of(name)
    q = Queue(name, client=cluster, shards=6)
    ids = [q.enqueue(f"m{i}") for i in range(300)] + q.enqueue_many([f"b{i}" for i in range(300)])
    per_node = Counter(placed[int(i.partition("#")[0])] for i in ids)
    assert sorted(per_node.values()) == [200, 200, 200], (Counter(placed), per_node)
    assert len(q) == 600


def errors_of(node: redis.Redis) -> int:
    """Error replies the node has sent (INFO errorstats)."""
    return sum(int(v.get("count", 0)) for v in node.info("errorstats").values())


def test_a_queue_works_on_through_a_real_slot_migration(monkeypatch: pytest.MonkeyPatch) -> None:
    """Its slot migrating to another primary (MIGRATING/IMPORTING, its keys moved, then the
    slot given to the new node), a queue keeps working. Before its keys move, an enqueue
    meets the old node's refusals (TRYAGAIN: some of its keys missing there) and is sent
    again until they have moved; then the old node answers ASK, and keyqueue's calls follow
    it (scripts not loaded there yet included); a claim, whose script names keys that do not
    exist yet, meets TRYAGAIN on the new node until the slot is handed over (the asyncio
    face); then MOVED teaches the client the new map. Nothing is lost or delivered twice.
    (The migration is held open for as long as the test needs: the round trips' wait is
    made long, as a busy machine may take a while between the steps.)"""
    import asyncio
    import threading

    from keyqueue.core import roundtrip

    monkeypatch.setattr(roundtrip, "CLUSTER_MIGRATION_WAIT", 60.0)
    c = Cluster()
    try:
        cluster = c.client
        q = Queue("moving", client=cluster, visibility_timeout=30)
        q.enqueue_many([f"m{i}" for i in range(6)])
        first = q.claim_many(2)
        slot = cluster.keyslot(q.keys.seq)
        source = c.server_of(q.keys.seq)
        target = next(n for n in c.nodes if n is not source)
        src, dst = redis.Redis(port=source.port), redis.Redis(port=target.port)
        src_id, dst_id = src.execute_command("CLUSTER MYID"), dst.execute_command("CLUSTER MYID")
        dst.execute_command("CLUSTER SETSLOT", slot, "IMPORTING", src_id)
        src.execute_command("CLUSTER SETSLOT", slot, "MIGRATING", dst_id)
        refused = errors_of(src)
        early: list[str] = []
        producer = threading.Thread(target=lambda: early.append(q.enqueue("early")))
        producer.start()
        wait_until(lambda: errors_of(src) >= refused + 3, timeout=30)  # refused, sent again
        assert early == []
        keys = src.execute_command("CLUSTER GETKEYSINSLOT", slot, 1000)
        assert len(keys) > 5
        dst.script_flush()
        src.execute_command("MIGRATE", "127.0.0.1", target.port, "", 0, 5000, "KEYS", *keys)
        producer.join(timeout=30)
        assert len(early) == 1

        def asked() -> int:
            return int(dst.info("commandstats").get("cmdstat_asking", {}).get("calls", 0))

        def tried_again() -> int:
            return int(dst.info("errorstats").get("errorstat_TRYAGAIN", {}).get("count", 0))

        before = asked()
        # the client still maps the slot to the source, which answers ASK for every key
        q.enqueue("during")
        assert q.ack_many(first) == 2 and asked() > before
        claimed: list[list[str]] = []

        async def claim() -> None:
            aq = aio.Queue("moving", url=f"redis+cluster://127.0.0.1:{source.port}")
            try:
                claimed.append([m.text for m in await aq.claim_many(10)])
            finally:
                await aq.client.aclose()

        tries = tried_again()
        claimer = threading.Thread(target=lambda: asyncio.run(claim()))
        claimer.start()
        wait_until(lambda: tried_again() >= tries + 3, timeout=30)
        assert claimed == []  # held off while the slot migrates
        for node in c.nodes:
            redis.Redis(port=node.port).execute_command("CLUSTER SETSLOT", slot, "NODE", dst_id)
        claimer.join(timeout=30)
        assert claimed and sorted(claimed[0]) == ["during", "early", "m2", "m3", "m4", "m5"], claimed
        # now the source answers MOVED; the map read again sends everything to the target
        q.enqueue("after")
        assert len(q.peek(10, source="processing")) == 6
        (last,) = q.claim_many(10)
        assert last.text == "after" and q.ack(last)
        assert q.stats().waiting == 0 and q.stats().processing == 6 and q.counters()["acked"] == 3
        assert cluster.get_node_from_key(q.keys.seq).port == target.port
        q.destroy()
        src.close()
        dst.close()
    finally:
        c.stop()
