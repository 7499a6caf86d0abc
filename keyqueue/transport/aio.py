"""Run an operation on redis.asyncio: the same round trips as ``sync.py``, awaited. A task
cancelled mid-operation drops its connection, so nothing it sent runs for it later (a
cancelled long-poll's claim is discarded with the connection)."""

from __future__ import annotations

import asyncio
from typing import Any, Sequence

from redis.exceptions import AskError, MovedError, ResponseError

from ..core.roundtrip import Command, Op, Plan, Sleep, T, routing_key, still_watching
from .sync import is_cluster, node_groups


async def round_trip(conn: Any, commands: Sequence[Command]) -> list[Any]:
    """Send ``commands`` in one write; their replies in order, an error reply in its place."""
    await conn.send_packed_command(conn.pack_commands(commands))
    out: list[Any] = []
    for _ in commands:
        try:
            out.append(await conn.read_response())
        except ResponseError as exc:
            out.append(exc)
    return out


async def run(client: Any, op: Op[T]) -> T:
    """Drive ``op`` to its result on an asyncio client."""
    try:
        commands = next(op)
    except StopIteration as stop:
        return stop.value
    if is_cluster(client):
        await client.initialize()  # learns the slot map once (a no-op afterwards)
        return await _run_on_cluster(client, op, commands)
    pool = client.connection_pool
    conn = await pool.get_connection()
    clean, watching = False, False
    try:
        while True:
            if isinstance(commands, Sleep):
                await asyncio.sleep(commands.seconds)
                replies: list[Any] = []
            else:
                replies = await round_trip(conn, commands)
                watching = still_watching(commands, watching)
            try:
                commands = op.send(replies)
            except StopIteration as stop:
                clean = not watching
                return stop.value
    finally:
        if not clean:
            await conn.disconnect()
        await pool.release(conn)


async def run_plan(plan: Plan[T]) -> T:
    """Drive a plan: each (client, op) it yields runs on that client."""
    try:
        target, op = next(plan)
        while True:
            target, op = plan.send(await run(target, op))
    except StopIteration as stop:
        return stop.value


async def _run_on_cluster(client: Any, op: Op[T], commands: list[Command] | Sleep) -> T:
    held: dict[str, tuple[Any, Any]] = {}
    clean, watching = False, False
    try:
        while True:
            if isinstance(commands, Sleep):
                await asyncio.sleep(commands.seconds)
                replies: list[Any] = []
            else:
                replies = await _cluster_round_trip(client, commands, held)
                watching = still_watching(commands, watching)
            try:
                commands = op.send(replies)
            except StopIteration as stop:
                clean = not watching
                return stop.value
    finally:
        for node, conn in held.values():
            if not clean:
                await conn.disconnect()
            node.release(conn)


async def _cluster_round_trip(client: Any, commands: Sequence[Command],
                              held: dict[str, tuple[Any, Any]]) -> list[Any]:
    out: list[Any] = [None] * len(commands)
    for node, idx in node_groups(client, commands):
        for attempt in range(2):
            if node.name not in held:
                held[node.name] = (node, node.acquire_connection())
            replies = await round_trip(held[node.name][1], [commands[i] for i in idx])
            if attempt == 0 and any(isinstance(r, (MovedError, AskError)) for r in replies):
                await client.nodes_manager.initialize()  # slots moved: learn the new map, send again
                node = client.get_node_from_key(routing_key(commands[idx[-1]]) or b"")
                continue
            break
        for i, r in zip(idx, replies):
            out[i] = r
    return out
