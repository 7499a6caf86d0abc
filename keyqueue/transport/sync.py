"""Run an operation on a blocking redis-py client: one pinned connection per operation (a
node's connections on a cluster), each round trip one packed write and its replies."""

from __future__ import annotations

import time
from typing import Any, Sequence

import redis
from redis.exceptions import AskError, MovedError, ResponseError

from ..core.roundtrip import Command, Op, Plan, Sleep, T, routing_key, still_watching


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


def run(client: redis.Redis, op: Op[T]) -> T:
    """Drive ``op`` to its result. A connection left mid-transaction, or by an error, is
    dropped rather than reused."""
    try:
        commands = next(op)
    except StopIteration as stop:
        return stop.value
    if is_cluster(client):
        return _run_on_cluster(client, op, commands)
    pool = client.connection_pool
    conn = pool.get_connection()
    clean, watching = False, False
    try:
        while True:
            if isinstance(commands, Sleep):
                time.sleep(commands.seconds)
                replies: list[Any] = []
            else:
                replies = round_trip(conn, commands)
                watching = still_watching(commands, watching)
            try:
                commands = op.send(replies)
            except StopIteration as stop:
                clean = not watching
                return stop.value
    finally:
        if not clean:
            conn.disconnect()
        pool.release(conn)


def run_plan(plan: Plan[T]) -> T:
    """Drive a plan: each (client, op) it yields runs on that client."""
    try:
        target, op = next(plan)
        while True:
            target, op = plan.send(run(target, op))
    except StopIteration as stop:
        return stop.value


def _run_on_cluster(client: Any, op: Op[T], commands: list[Command] | Sleep) -> T:
    """Each round trip's commands go to the nodes owning their keys, on one connection per
    node for the whole operation (a WATCH and its EXEC share it, as on a single server)."""
    held: dict[str, tuple[Any, Any]] = {}
    clean, watching = False, False
    try:
        while True:
            if isinstance(commands, Sleep):
                time.sleep(commands.seconds)
                replies: list[Any] = []
            else:
                replies = _cluster_round_trip(client, commands, held)
                watching = still_watching(commands, watching)
            try:
                commands = op.send(replies)
            except StopIteration as stop:
                clean = not watching
                return stop.value
    finally:
        for pool, conn in held.values():
            if not clean:
                conn.disconnect()
            pool.release(conn)


def node_groups(client: Any, commands: Sequence[Command]) -> list[tuple[Any, list[int]]]:
    """Consecutive commands grouped by the node of their keys (a keyless command goes with
    the keyed one after it, or before it at the end)."""
    keys = [routing_key(c) for c in commands]
    for i in range(len(keys) - 2, -1, -1):
        if keys[i] is None:
            keys[i] = keys[i + 1]
    for i in range(1, len(keys)):
        if keys[i] is None:
            keys[i] = keys[i - 1]
    groups: list[tuple[Any, list[int]]] = []
    for i, key in enumerate(keys):
        node = client.get_node_from_key(key) if key is not None else client.get_default_node()
        if groups and groups[-1][0] is node:
            groups[-1][1].append(i)
        else:
            groups.append((node, [i]))
    return groups


def _cluster_round_trip(client: Any, commands: Sequence[Command], held: dict[str, tuple[Any, Any]]) -> list[Any]:
    out: list[Any] = [None] * len(commands)
    for node, idx in node_groups(client, commands):
        for attempt in range(2):
            if node.name not in held:
                pool = client.get_redis_connection(node).connection_pool
                held[node.name] = (pool, pool.get_connection())
            replies = round_trip(held[node.name][1], [commands[i] for i in idx])
            if attempt == 0 and any(isinstance(r, (MovedError, AskError)) for r in replies):
                client.nodes_manager.initialize()  # slots moved: learn the new map, send again
                node = client.get_node_from_key(routing_key(commands[idx[-1]]) or b"")
                continue
            break
        for i, r in zip(idx, replies):
            out[i] = r
    return out
