"""Round trips on one pinned connection, for the script-free mode.

WATCH, the reads it guards and the MULTI/EXEC that follows must share a connection, and a
batch of commands must cost one round trip whatever its size. redis-py's pipeline does
neither across calls, so this sends packed commands on a connection held for one operation.
Replies come back raw (no response callbacks); an error reply is returned in place, not
raised, so the caller decides what a failed command means.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator, Sequence

import redis
from redis.exceptions import ResponseError

Command = Sequence[Any]


class Session:
    """One operation's use of one connection."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.watching = False

    def send(self, commands: Sequence[Command]) -> list[Any]:
        """Send ``commands`` as one round trip; their replies, errors included, in order."""
        if not commands:
            return []
        self.conn.send_packed_command(self.conn.pack_commands(commands))
        out: list[Any] = []
        for _ in commands:
            try:
                out.append(self.conn.read_response())
            except ResponseError as exc:
                out.append(exc)
        for cmd in commands:
            name = str(cmd[0]).upper()
            if name == "WATCH":
                self.watching = True
            elif name in ("EXEC", "DISCARD", "UNWATCH"):
                self.watching = False
        return out

    def one(self, *command: Any) -> Any:
        return self.send([command])[0]

    def transaction(self, commands: Sequence[Command]) -> list[Any] | None:
        """MULTI ... EXEC: the replies, or None when a watched key changed (nothing applied)."""
        replies = self.send([("MULTI",), *commands, ("EXEC",)])
        result = replies[-1]
        if isinstance(result, Exception):
            raise result
        return result


@contextlib.contextmanager
def session(client: redis.Redis) -> Iterator[Session]:
    """A connection from the client's pool for one operation. Any failure (or an exit with
    a WATCH still pending) drops the connection, so no half-done state leaks to the next user."""
    pool = client.connection_pool
    conn = pool.get_connection()
    s = Session(conn)
    clean = False
    try:
        yield s
        clean = not s.watching
    finally:
        if not clean:
            conn.disconnect()
        pool.release(conn)
