"""A redis-py connection that lets a client die after exactly N commands.

Every command a client sends (alone, in a pipeline, inside MULTI) passes through
``send_command`` or ``pack_commands``. Once the budget is spent, the rest of a batch is never
sent: the commands that were sent are read back (so Redis has run them), then the
connection is closed and ``Crash`` is raised. A command inside an unfinished MULTI dies
with it, as it would if the client process were killed. ``Crash`` is a BaseException, so
neither keyqueue nor redis-py's retry logic can catch it and carry on.
"""

from __future__ import annotations

import re
from typing import Any, Iterable

import redis

# Sent by redis-py itself when it (re)connects: not part of any operation.
HANDSHAKE = {"HELLO", "CLIENT", "AUTH", "SELECT", "PING"}


class Crash(BaseException):
    """The client died here."""


class Budget:
    """How many more commands the client may send (None: no limit), and a log of their names."""

    def __init__(self) -> None:
        self.limit: int | None = None
        self.log: list[str] = []

    def take(self, commands: list[tuple[Any, ...]]) -> int:
        """How many of ``commands`` may go out; logs them."""
        allowed = 0
        for cmd in commands:
            name = _name(cmd[0])
            if name in HANDSHAKE:
                allowed += 1
                continue
            if self.limit is not None and len(self.log) >= self.limit:
                break
            self.log.append(describe(cmd))
            allowed += 1
        return allowed


def _name(v: Any) -> str:
    return (v.decode() if isinstance(v, bytes) else str(v)).upper()


def describe(cmd: tuple[Any, ...]) -> str:
    """``SADD processing``, ``HSET item``, ``EVALSHA claim``: a command and the key role."""
    name = _name(cmd[0])
    if name in ("MULTI", "EXEC", "TIME", "UNWATCH", "DISCARD") or len(cmd) < 2:
        return name
    if name == "EVALSHA":
        from keyqueue.backends.scripted import SCRIPT_NAMES, script_sha

        sha = cmd[1].decode() if isinstance(cmd[1], bytes) else str(cmd[1])
        return "EVALSHA " + next((n for n in SCRIPT_NAMES if script_sha(n) == sha), "?")
    if name == "SCRIPT LOAD":
        from keyqueue.backends.scripted import SCRIPT_NAMES, script_source

        text = cmd[1].decode() if isinstance(cmd[1], bytes) else str(cmd[1])
        return "SCRIPT LOAD " + next((n for n in SCRIPT_NAMES if script_source(n) == text), "?")
    key = cmd[1].decode() if isinstance(cmd[1], bytes) else str(cmd[1])
    role = re.sub(r"^.*\}:", "", key)
    role = re.sub(r"^(item|timer|dedup):.*", r"\1", role)
    if name in ("WATCH", "EXISTS") and len(cmd) > 2:
        return f"{name} {role}s"
    return f"{name} {role}"


def crashing_client(port: int, budget: Budget) -> redis.Redis:
    """A client whose connections obey ``budget``."""
    pool = redis.ConnectionPool(port=port, connection_class=_connection_class(budget))
    return redis.Redis.from_pool(pool)  # (its close() closes the pool's connections too)


def _connection_class(budget: Budget) -> type[redis.Connection]:
    class CrashingConnection(redis.Connection):
        _reads_left: int | None = None

        def send_command(self, *args: Any, **kwargs: Any) -> None:
            packed = self._pack([args])
            if packed:
                self.send_packed_command(packed, check_health=kwargs.get("check_health", True))

        def pack_commands(self, commands: Iterable[Any]) -> Any:
            return self._pack([tuple(c) for c in commands])

        def _pack(self, commands: list[tuple[Any, ...]]) -> Any:
            allowed = budget.take(commands)
            if allowed < len(commands):
                self._reads_left = allowed
            sent = commands[:allowed]
            return super().pack_commands(sent) if sent else []

        def read_response(self, *args: Any, **kwargs: Any) -> Any:
            if self._reads_left is not None:
                if self._reads_left == 0:
                    self._reads_left = None
                    self.disconnect()
                    raise Crash()
                self._reads_left -= 1
            return super().read_response(*args, **kwargs)

    return CrashingConnection
