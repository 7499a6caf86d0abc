"""Run an operation on a blocking redis-py client: one pinned connection per operation (one
per node on a cluster), each round trip one packed write and its replies."""

from __future__ import annotations

import time
from typing import Any, Sequence

import redis
from redis.exceptions import ResponseError

from ..core.roundtrip import (CLUSTER_ATTEMPTS, CLUSTER_RETRY_PAUSE, Command, Op, Plan, Sleep, Stepper, T,
                              must_resend, node_groups, routing_key)


def is_cluster(client: Any) -> bool:
    return type(client).__name__ == "RedisCluster"


def round_trip(conn: Any, commands: Sequence[Command]) -> list[Any]:
    """Send ``commands`` in one write; their replies in order, an error reply in its place."""
    conn.send_packed_command(conn.pack_commands(commands))
    out: list[Any] = []
    for _ in commands:
        try:
            out.append(conn.read_response())
        except ResponseError as exc:
            out.append(exc)
    return out


class Pinned:
    """The connections one operation holds: one from the client's pool, or one per cluster
    node it touched, so a WATCH and its EXEC share a connection."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.held: dict[str, tuple[Any, Any]] = {}

    def _conn(self, node: Any) -> Any:
        name = "" if node is None else node.name
        if name not in self.held:
            pool = (self.client if node is None else self.client.get_redis_connection(node)).connection_pool
            self.held[name] = (pool, pool.get_connection())
        return self.held[name][1]

    def round_trip(self, commands: list[Command]) -> list[Any]:
        if not is_cluster(self.client):
            return round_trip(self._conn(None), commands)
        out: list[Any] = [None] * len(commands)
        for node, idx in node_groups(self.client, commands):
            replies = round_trip(self._conn(node), [commands[i] for i in idx])
            for _ in range(CLUSTER_ATTEMPTS - 1):
                if not must_resend(replies):
                    break
                time.sleep(CLUSTER_RETRY_PAUSE)
                self.client.nodes_manager.initialize()
                node = self.client.get_node_from_key(routing_key(commands[idx[-1]]) or b"")
                replies = round_trip(self._conn(node), [commands[i] for i in idx])
            for i, r in zip(idx, replies):
                out[i] = r
        return out

    def release(self, clean: bool) -> None:
        """Back to their pools; dropped when the operation failed or left a WATCH pending."""
        for pool, conn in self.held.values():
            if not clean:
                conn.disconnect()
            pool.release(conn)


def run(client: redis.Redis, op: Op[T]) -> T:
    """Drive ``op`` to its result."""
    step = Stepper(op)
    pinned = Pinned(client)
    try:
        while not step.done:
            if isinstance(step.next, Sleep):
                time.sleep(step.next.seconds)
                step.send([])
            else:
                step.send(pinned.round_trip(step.next))
        return step.result
    finally:
        pinned.release(step.clean)


def run_plan(plan: Plan[T]) -> T:
    """Drive a plan: each (client, op) it yields runs on that client."""
    try:
        target, op = next(plan)
        while True:
            target, op = plan.send(run(target, op))
    except StopIteration as stop:
        return stop.value
