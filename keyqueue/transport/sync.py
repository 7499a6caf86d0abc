"""Run an operation on a blocking redis-py client: one pinned connection per operation (one
per node on a cluster), each round trip one packed write and its replies."""

from __future__ import annotations

import logging
import selectors
import time
from typing import Any, Sequence

import redis
import redis.asyncio.connection
from redis.exceptions import ResponseError

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
    routing_key,
    to_resend,
)
from . import spares

log = logging.getLogger("keyqueue.transport")

#: redis-py's own pack_commands (a connection class overriding it keeps it: it may count or log)
_STOCK_PACKERS = {
    redis.connection.AbstractConnection.pack_commands,
    redis.asyncio.connection.AbstractConnection.pack_commands,
}
_pack_command: Any
try:
    from hiredis import pack_command as _pack_command
except ImportError:  # redis-py without hiredis: its own packer
    _pack_command = None


def is_cluster(client: Any) -> bool:
    return type(client).__name__ == "RedisCluster"


def pack(conn: Any, commands: Sequence[Command]) -> Any:
    """The commands in RESP, by hiredis directly when the connection packs with it (redis-py's
    own wrapper around it costs more than the packing: 1-2 us per command)."""
    if (
        _pack_command is not None
        and type(conn).pack_commands in _STOCK_PACKERS
        and type(getattr(conn, "_command_packer", None)).__name__ == "HiredisRespSerializer"
    ):
        try:
            return [
                b"".join([_pack_command(tuple(c[0].split()) + tuple(c[1:]) if " " in c[0] else c) for c in commands])
            ]
        except TypeError:  # an argument hiredis does not take (memoryview, ...): redis-py's way
            pass
    return conn.pack_commands(commands)


def round_trip(conn: Any, commands: Sequence[Command]) -> list[Any]:
    """Send ``commands`` in one write; their replies in order, an error reply in its place."""
    conn.send_packed_command(pack(conn, commands))
    out: list[Any] = []
    for _ in commands:
        try:
            out.append(conn.read_response())
        except ResponseError as exc:
            out.append(exc)
    return out


def forget_slots(client: Any) -> None:
    """Learn a cluster's slot map again after a node failed to answer: the next operation
    goes to whichever node serves the slot by then (a replica promoted in its place)."""
    if not client.__dict__.get("_kq_ready", True):  # (a keyqueue client that never connected)
        return
    try:
        client.nodes_manager.initialize()
    except Exception:  # no node answers now: the next operation tries again
        log.debug("cluster slot map not refreshed", exc_info=True)


class Pinned:
    """The connections one operation holds: one from the client's pool, or one per cluster
    node it touched, so a WATCH and its EXEC share a connection."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.held: dict[str, tuple[Any, Any]] = {}

    def _conn(self, node: Any) -> Any:
        name = "" if node is None else node.name
        if name not in self.held:
            if node is None:
                pool = self.client.connection_pool
                self.held[name] = (pool, spares.take(pool) or pool.get_connection())
            else:
                pool = self.client.get_redis_connection(node).connection_pool
                self.held[name] = (pool, pool.get_connection())
        return self.held[name][1]

    def round_trip(self, commands: list[Command]) -> list[Any]:
        if not is_cluster(self.client):
            return round_trip(self._conn(None), commands)
        try:
            return self._cluster_round_trip(commands)
        except (redis.ConnectionError, redis.TimeoutError):
            forget_slots(self.client)
            raise

    def _cluster_round_trip(self, commands: list[Command]) -> list[Any]:
        """One write per node, all sent before any reply is read (the nodes work at once);
        what a node answered MOVED, ASK or TRYAGAIN is sent again, alone (``to_resend``)."""
        out: list[Any] = [None] * len(commands)
        todo = list(range(len(commands)))
        resends = Resends()
        while True:
            sends = cluster_sends(self.client, commands, todo, out)
            for node, cmds, _ in sends:
                conn = self._conn(node)
                conn.send_packed_command(pack(conn, cmds))
            for node, _, wheres in sends:
                conn = self._conn(node)
                for where in wheres:
                    reply = _read(conn)
                    if where is not None:
                        out[where] = reply
            todo = to_resend(commands, [wheres for _, _, wheres in sends], out)
            pause = resends.pause(time.monotonic(), out, todo)
            if pause is None:
                return out
            time.sleep(pause)
            if resends.remap(out, todo):
                self.client.nodes_manager.initialize()

    def release(self, clean: bool) -> None:
        """Back to their pools; dropped when the operation failed or left a WATCH pending."""
        for name, (pool, conn) in self.held.items():
            if not clean:
                conn.disconnect()
            elif name == "" and spares.keep(pool, conn):
                continue  # kept for this process' next operation
            pool.release(conn)
        self.held.clear()


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
                if step.between_waits:
                    pinned.release(True)
        return step.result
    finally:
        pinned.release(step.clean)


#: Seconds a race waits past its commands' own timeout before it calls the servers silent.
RACE_GRACE = 5.0


def race(r: Race) -> list[Any]:
    """Send each wait on a connection of its own, then wait on all the sockets at once: the
    replies that came first are read, the other connections dropped (see ``Race``)."""
    held: list[tuple[Pinned, Any]] = []
    replies: list[Any] = [None] * len(r.waits)
    answered: set[int] = set()
    try:
        for target, command in r.waits:
            pinned = Pinned(target)
            held.append((pinned, None))
            node = target.get_node_from_key(routing_key(command) or b"") if is_cluster(target) else None
            conn = pinned._conn(node)
            held[-1] = (pinned, conn)
            conn.send_packed_command(pack(conn, [command]))
        with selectors.DefaultSelector() as sel:
            for i, (_, conn) in enumerate(held):
                sel.register(conn._sock, selectors.EVENT_READ, i)
            ready = sel.select(max(float(c[-1]) for _, c in r.waits) + RACE_GRACE)
        if not ready:
            raise redis.TimeoutError("no reply to a blocking wait in time")
        for key, _ in ready:
            replies[key.data] = _read(held[key.data][1])
            answered.add(key.data)
        return replies
    except (redis.ConnectionError, redis.TimeoutError):
        for target in {id(t): t for t, _ in r.waits if is_cluster(t)}.values():
            forget_slots(target)
        raise
    finally:
        for i, (pinned, _) in enumerate(held):
            pinned.release(i in answered)


def _read(conn: Any) -> Any:
    try:
        return conn.read_response()
    except ResponseError as exc:
        return exc


def run_plan(plan: Plan[T]) -> T:
    """Drive a plan: each (client, op) it yields runs on that client; a Race races."""
    try:
        step = next(plan)
        while True:
            try:
                got = race(step) if isinstance(step, Race) else run(*step)
            except Exception as exc:  # (the plan's to handle: one queue of several failing)
                step = plan.throw(exc)
                continue
            step = plan.send(got)
    except StopIteration as stop:
        return stop.value
