"""A real local Redis Cluster for the tests: redis-server processes in cluster mode, joined
by ``redis-cli --cluster create`` (primaries, and replicas when asked)."""

from __future__ import annotations

import shutil
import subprocess
import time

import redis
from redis.cluster import RedisCluster

from keyqueue.errors import KeyQueueError
from keyqueue.server import RedisServer, free_port


class Cluster:
    """``primaries`` primaries and ``replicas`` replicas of each (on ``ports`` when given); a
    node is considered failed after ``node_timeout_ms``: Redis's own 15 s, so that a node a
    busy machine starves for seconds is not failed (and the whole cluster with it); a
    failover test passes a small one."""

    def __init__(
        self, primaries: int = 3, replicas: int = 0, node_timeout_ms: int = 15000, ports: list[int] | None = None
    ) -> None:
        count = primaries * (1 + replicas)
        self.node_timeout_ms = node_timeout_ms
        self.nodes: list[RedisServer] = []
        try:
            for i in range(count):
                self.nodes.append(self._node(ports[i] if ports else None))
            cli = shutil.which("redis-cli")
            assert cli, "redis-cli is needed to form the cluster"
            subprocess.run(
                [cli, "--cluster", "create", *self.addresses, "--cluster-replicas", str(replicas), "--cluster-yes"],
                check=True,
                capture_output=True,
                timeout=60,
            )
            self.client = RedisCluster(host="127.0.0.1", port=self.nodes[0].port)
            self.wait_ok(primaries * (1 + replicas))
        except BaseException:
            self.stop()
            raise

    def _node(self, port: int | None) -> RedisServer:
        """A started node; tried again when another process took its bus port (or the port
        of its own choosing) between the choice and the start: a given port stays."""
        for attempt in range(5):
            node = RedisServer(
                [
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-node-timeout",
                    str(self.node_timeout_ms),
                    "--cluster-port",
                    str(free_port()),
                ],
                port=port,
            )
            try:
                return node.start()
            except KeyQueueError:
                node.cleanup()
                if attempt == 4:
                    raise
        raise AssertionError("unreachable")

    @property
    def addresses(self) -> list[str]:
        return [f"127.0.0.1:{n.port}" for n in self.nodes]

    @property
    def url(self) -> str:
        return "redis+cluster://" + ",".join(self.addresses)

    def wait_ok(self, known: int, timeout: float = 60) -> None:
        """Until every node says the cluster is ok and knows ``known`` nodes."""
        end = time.monotonic() + timeout
        while True:
            try:
                infos = [_info(n) for n in self.nodes if n.proc is not None]
                if all(i.get("cluster_state") == "ok" and int(i.get("cluster_known_nodes", 0)) >= known for i in infos):
                    self.client.nodes_manager.initialize()
                    return
            except Exception:  # a node still starting, or one just failed
                pass
            assert time.monotonic() < end, "the cluster did not come up"
            time.sleep(0.1)

    def server_of(self, key: str) -> RedisServer:
        """The node serving ``key``'s slot now."""
        port = self.client.get_node_from_key(key).port
        return next(n for n in self.nodes if n.port == port)

    def stop(self) -> None:
        if getattr(self, "client", None) is not None:
            self.client.close()
        for n in self.nodes:
            n.cleanup()


def _info(node: RedisServer) -> dict[str, str]:
    with redis.Redis(port=node.port, socket_timeout=2) as r:
        raw = r.execute_command("CLUSTER INFO")
    return {str(k): str(v) for k, v in raw.items()}


def spread_name(cluster: RedisCluster, shards: int, prefix: str = "sharded") -> str:
    """A queue name whose shards' slots fall on every primary (shards follow their slots):
    with fewer shards than primaries, or an unlucky name, some primary holds none."""
    primaries = {n.name for n in cluster.get_primaries()}
    for i in range(1000):
        name = f"{prefix}{i}"
        if {cluster.get_node_from_key(f"kq:{{{name}#{s}}}:seq").name for s in range(shards)} == primaries:
            return name
    raise AssertionError("no name spreads over every primary")
