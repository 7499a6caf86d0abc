"""Run an operation on redis.asyncio: the same round trips as ``sync.py``, awaited. A task
cancelled mid-operation drops its connection, so nothing it sent runs for it later (a
cancelled long-poll's claim is discarded with the connection)."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Sequence

from redis.exceptions import ConnectionError, RedisClusterException, ResponseError, TimeoutError

from ..clusters import unreachable
from ..core.roundtrip import (
    Command,
    Op,
    Plan,
    Race,
    Resends,
    Sleep,
    Stepper,
    T,
    cluster_sends,
    to_resend,
)
from .sync import is_cluster, log, pack


async def round_trip(conn: Any, commands: Sequence[Command]) -> list[Any]:
    """Send ``commands`` in one write; their replies in order, an error reply in its place."""
    await conn.send_packed_command(pack(conn, commands))
    out: list[Any] = []
    for _ in commands:
        try:
            out.append(await conn.read_response())
        except ResponseError as exc:
            out.append(exc)
    return out


async def learn_slots(client: Any) -> None:
    """The cluster's slot map, learnt once (a no-op afterwards); no seed answering is redis'
    ConnectionError, as a single server down is (redis-py says RedisClusterException); the
    seeds' refusal of the credentials is theirs."""
    try:
        await client.initialize()
    except RedisClusterException as exc:
        raise unreachable(exc) from None


class Pinned:
    """The connections one operation holds (see sync.Pinned); asyncio cluster nodes hand
    out connections themselves."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.held: dict[str, tuple[Any, Any]] = {}

    async def _conn(self, node: Any) -> Any:
        name = "" if node is None else node.name
        if name not in self.held:
            if node is None:
                pool = self.client.connection_pool
                self.held[name] = (pool, await pool.get_connection())
            else:
                self.held[name] = (node, node.acquire_connection())
        return self.held[name][1]

    async def round_trip(self, commands: list[Command]) -> list[Any]:
        if not is_cluster(self.client):
            return await round_trip(await self._conn(None), commands)
        await learn_slots(self.client)
        try:
            return await self._cluster_round_trip(commands)
        except (ConnectionError, TimeoutError):
            try:
                await self.client.nodes_manager.initialize()  # see sync.forget_slots
            except Exception:
                log.debug("cluster slot map not refreshed", exc_info=True)
            raise

    async def _cluster_round_trip(self, commands: list[Command]) -> list[Any]:
        """One write per node, all sent before any reply is read (the nodes work at once);
        what a node answered MOVED, ASK or TRYAGAIN is sent again, alone (``to_resend``)."""
        out: list[Any] = [None] * len(commands)
        todo = list(range(len(commands)))
        resends = Resends()
        while True:
            sends = cluster_sends(self.client, commands, todo, out)
            for node, cmds, _ in sends:
                conn = await self._conn(node)
                await conn.send_packed_command(pack(conn, cmds))
            for node, _, wheres in sends:
                conn = await self._conn(node)
                for where in wheres:
                    reply = await _read(conn)
                    if where is not None:
                        out[where] = reply
            todo = to_resend(commands, [wheres for _, _, wheres in sends], out)
            pause = resends.pause(time.monotonic(), out, todo)
            if pause is None:
                return out
            await asyncio.sleep(pause)
            if resends.remap(out, todo):
                await self.client.nodes_manager.initialize()

    async def release(self, clean: bool) -> None:
        """Back to their pools (dropped first when the operation failed). A task being
        cancelled (anyio cancels again at every await) hands the work to a shielded task:
        cut short, it would leave a connection open and its pool turn taken for good."""
        held, self.held = list(self.held.values()), {}
        if not held:
            return
        cancelling = getattr(asyncio.current_task(), "cancelling", None)
        if not clean or (cancelling is not None and cancelling()):
            await asyncio.shield(self._give_back(held, clean))
        else:
            await self._give_back(held, clean)

    async def _give_back(self, held: list[tuple[Any, Any]], clean: bool) -> None:
        for owner, conn in held:
            try:
                if not clean:
                    await conn.disconnect()
            finally:
                if is_cluster(self.client):
                    owner.release(conn)
                else:
                    await owner.release(conn)


async def _read(conn: Any) -> Any:
    try:
        return await conn.read_response()
    except ResponseError as exc:
        return exc


def _cancel_requests() -> int:
    """How many cancels of the running task are pending (``Task.cancelling``)."""
    cancelling = getattr(asyncio.current_task(), "cancelling", None)
    return cancelling() if cancelling is not None else 0


def _raise_if_cancelled(before: int) -> None:
    """A cancel that redis-py swallowed mid-command (its internal wait_for can, on Python
    3.11) still ends the operation at the next step, before anything more is sent; the
    connection is then dropped, so nothing it sent runs for it later. Only a cancel asked
    for since the operation began (``before`` pending then): one the caller caught and went
    on from is not raised again at each operation after it (which had done its writes)."""
    if _cancel_requests() > before:
        raise asyncio.CancelledError


async def run(client: Any, op: Op[T]) -> T:
    """Drive ``op`` to its result on an asyncio client."""
    step = Stepper(op)
    pinned = Pinned(client)
    before = _cancel_requests()
    try:
        while not step.done:
            if isinstance(step.next, Sleep):
                await asyncio.sleep(step.next.seconds)
                step.send([])
            else:
                replies = await pinned.round_trip(step.next)
                _raise_if_cancelled(before)
                step.send(replies)
                if step.between_waits:
                    await pinned.release(True)
        return step.result
    finally:
        await pinned.release(step.clean)


def _one(command: Command) -> Op[Any]:
    (reply,) = yield [command]
    return reply


async def race(r: Race) -> list[Any]:
    """Each wait a task on a connection of its own; the first to answer wins and the others
    are cancelled, which drops their connections (see ``Race``)."""
    tasks = [asyncio.ensure_future(run(target, _one(command))) for target, command in r.waits]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return [t.result() if t.done() and not t.cancelled() else None for t in tasks]


async def run_plan(plan: Plan[T]) -> T:
    """Drive a plan: each (client, op) it yields runs on that client; a Race races."""
    try:
        step = next(plan)
        while True:
            try:
                got = await race(step) if isinstance(step, Race) else await run(*step)
            except Exception as exc:  # (the plan's to handle: one queue of several failing)
                step = plan.throw(exc)
                continue
            step = plan.send(got)
    except StopIteration as stop:
        return stop.value
