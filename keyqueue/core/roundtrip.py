"""The contract between operations and transports: a round trip is a list of commands, sent
together on one connection; its replies come back in order, an error reply as a
``ResponseError`` in its place (the operation decides what a failed command means).

Every round trip of one operation goes to the same connection (WATCH, the reads it guards
and MULTI/EXEC must share one). Replies are raw: RESP2 or RESP3 shapes as the client's
protocol gives them; ``replies.py`` reads both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generator, Sequence, TypeVar, Union

T = TypeVar("T")

Command = Sequence[Any]
Replies = list[Any]


@dataclass(frozen=True)
class Sleep:
    """Yielded instead of a round trip: wait this long (time.sleep, or asyncio.sleep on a
    loop), then go on; the operation receives an empty reply list."""

    seconds: float


#: An operation: yields round trips (or a Sleep), receives their replies, returns its result.
Op = Generator[Union[list[Command], Sleep], Replies, T]
#: A plan over several operations (possibly on several clients): yields (target, op) pairs
#: and receives each op's result. Used where one logical step spans queues.
Plan = Generator[tuple[Any, Op[Any]], Any, T]

#: Commands without a key: they go with the keyed command next to them (cluster routing).
_KEYLESS = {"TIME", "MULTI", "EXEC", "DISCARD", "UNWATCH", "SCRIPT LOAD", "PING"}


def one(command: Command) -> Op[Any]:
    """One command as a round trip of its own; its reply (an error reply is returned, not raised)."""
    return (yield [command])[0]


def transaction(commands: Sequence[Command]) -> Op[list[Any] | None]:
    """MULTI ... EXEC: the replies, or None when a watched key changed (nothing applied)."""
    replies = yield [("MULTI",), *commands, ("EXEC",)]
    result = replies[-1]
    if isinstance(result, Exception):
        raise result
    return result


def still_watching(commands: Sequence[Command], watching: bool) -> bool:
    """Whether a WATCH is pending on the connection after ``commands``: a transport drops a
    connection an operation left watching, so no half-done state reaches the next user."""
    for cmd in commands:
        name = str(cmd[0]).upper()
        if name == "WATCH":
            watching = True
        elif name in ("EXEC", "DISCARD", "UNWATCH"):
            watching = False
    return watching


def routing_key(command: Command) -> Any | None:
    """The key a cluster routes ``command`` by (None for keyless commands)."""
    name = str(command[0]).upper()
    if name in _KEYLESS or len(command) < 2:
        return None
    if name in ("EVALSHA", "EVAL"):
        return command[3] if int(command[2]) > 0 else None
    if name == "SCAN":  # a queue's SCAN matches its own hash tag: the node of that slot
        args = [str(a).upper() for a in command]
        return command[args.index("MATCH") + 1] if "MATCH" in args else None
    return command[1]


def is_blocking(commands: Sequence[Command]) -> bool:
    return any(str(c[0]).upper() == "BLPOP" for c in commands)
