"""Loading and calling the scripts of ``keyqueue/lua``: one per atomic operation, run by SHA,
loaded once per server (a NOSCRIPT reply loads it and sends the call again)."""

from __future__ import annotations

import functools
import hashlib
import re
from importlib import resources
from typing import Any, Callable, Iterable, Sequence

from redis.exceptions import NoScriptError, ResponseError

from ...core.backend import FlowScope
from ...core.replication import Replication
from ...core.replies import FIELD, error_for, int_or, text
from ...core.results import Claimed, Fields
from ...core.roundtrip import Command, Op
from ...keys import QueueKeys

SCRIPT_NAMES = (
    "enqueue",
    "enqueue_group",
    "claim",
    "ack",
    "extend",
    "release",
    "dead_letter",
    "reap",
    "expire",
    "requeue",
    "purge",
    "peek",
    "stats",
    "group_refill",
    "schedule_put",
    "schedule_fire_many",
    "schedule_fire_due",
)
#: Scripts that never write: no WAIT after them.
READ_ONLY = frozenset({"peek", "stats"})
#: Most messages or ids in one script call (Lua's unpack() stops near 8,000 values).
CHUNK = 1000

_DEFINES = re.compile(r"^local (?:function )?(\w+)", re.M)
_COMMENTS = re.compile(r"--\[\[.*?\]\]|--[^\n]*", re.S)
_WORDS = re.compile(r"\w+")


def _lib_blocks() -> list[tuple[set[str], str]]:
    """_lib.lua as blocks, one per top-level definition (with the comment lines just above
    it and everything up to the next one), each with the names it defines. A blank line
    inside a function does not split it."""
    lines = (resources.files("keyqueue") / "lua" / "_lib.lua").read_text().split("\n")
    starts = [i for i, line in enumerate(lines) if _DEFINES.match(line)]
    blocks = []
    for n, i in enumerate(starts):
        first = i
        while first > 0 and lines[first - 1].startswith("--") and (n == 0 or first - 1 > starts[n - 1]):
            first -= 1
        end = starts[n + 1] if n + 1 < len(starts) else len(lines)
        while end > i + 1 and (lines[end - 1].startswith("--") or not lines[end - 1].strip()):
            end -= 1  # the next definition's comments belong to it
        block = "\n".join(lines[first:end])
        blocks.append((set(_DEFINES.findall(block)), block))
    return blocks


@functools.cache
def script_source(name: str) -> str:
    """The script with the _lib.lua helpers it uses (transitively) prepended, in lib order.

    Redis runs the whole chunk on every call, so helpers a script never uses would cost
    a closure each per call."""
    body = (resources.files("keyqueue") / "lua" / f"{name}.lua").read_text()
    blocks = _lib_blocks()
    used: set[int] = set()
    code = _COMMENTS.sub("", body)
    while True:
        words = set(_WORDS.findall(code))
        new = {i for i, (names, _) in enumerate(blocks) if i not in used and not names.isdisjoint(words)}
        if not new:
            break
        used |= new
        code = _COMMENTS.sub("", body + "".join(blocks[i][1] for i in used))
    return "\n\n".join(blocks[i][1] for i in sorted(used)) + "\n\n" + body


@functools.cache
def script_sha(name: str) -> str:
    return hashlib.sha1(script_source(name).encode()).hexdigest()


def _max_receives(limit: int | None) -> str:
    return "" if limit is None else str(limit)  # the scripts read '' as no limit


def claimed(reply: Sequence[Any]) -> Claimed:
    """claim.lua's reply: {dead_lettered, config_missing, next_timer, now, deadline, first
    receipt, limited, id, b, b1, t, id, ...}; an id is {id, r, c, e, a, f, s, g} unless the message is a
    first delivery without error or attributes (receives 1, the first receipt, first
    delivered now): then it is the id, "id group" for a group's (ids are digits, groups have
    no space), or {id, s, g} for a schedule's."""
    now, deadline, first = int(reply[3]), int(reply[4]), reply[5].decode()
    messages = []
    for i in range(7, len(reply), 4):
        mid, b, b1, t = reply[i : i + 4]
        body = (b or b"") + b1 if b1 else b or b""
        # ids, receipts and numbers are ASCII the script wrote: decoded inline (a claim reads 100 at once)
        if type(mid) is not list or len(mid) == 3:  # a first delivery: the id, "id group", or {id, s, g}
            s = g = None
            if type(mid) is list:
                mid, s, g = mid
                mid = text(mid)
            else:
                mid = mid.decode() if type(mid) is bytes else text(mid)
                if " " in mid:
                    mid, g = mid.split(" ", 1)
            messages.append(
                Fields(
                    mid,
                    body,
                    int_or(t),
                    1,
                    deadline,
                    first if g is None else first + "g",  # (a grouped message's receipt: claim.lua)
                    None,
                    None,
                    now,
                    None if s is None else int(s),
                    None if g is None else text(g),
                )
            )
        else:
            mid, r, c, e, a, f, s, g = mid
            messages.append(
                Fields(
                    text(mid),
                    body,
                    int_or(t),
                    int(r),
                    deadline,
                    text(c),
                    None if e is None else text(e, "replace"),
                    a,
                    int(f),
                    None if s is None else int(s),
                    None if g is None else text(g),
                )
            )
    return Claimed(
        messages,
        int(reply[0]),
        reply[1] == 1,
        None if reply[2] is None else int(reply[2]),
        None if reply[6] is None else int(reply[6]),
    )


class ScriptBase:
    """What every group of script operations shares: the key lists and the call."""

    def __init__(
        self, keys: QueueKeys, clock: Callable[[], float] | None = None, replication: Replication = Replication()
    ) -> None:
        self.keys = keys
        self.clock = clock
        self.field_bytes = FIELD  # bytes per body field: the server's, once the queue has read it
        self.replication = replication
        self.flow: FlowScope | None = None
        k = keys
        # Key lists built once: they are on the hot path of every call.
        self.enqueue_keys = (k.seq, k.queue, k.items, k.timers, k.signal, k.config, k.counters)
        self.ack_keys = (k.processing, k.timers, k.counters)
        self.state_keys = (k.queue, k.items, k.processing, k.timers, k.dead)
        # the states plus the wake-up signal: scripts that may make messages visible
        self.waking_keys = (*self.state_keys, k.signal)
        # claim and reap also report a missing config hash, and count what they dead-letter
        self.claim_keys = (*self.waking_keys, k.config, k.counters)
        # a claim also reads the throttle (flow control)
        self.consume_keys = (*self.claim_keys, k.throttle)
        self._static_head = (k.base, "")

    def _head(self) -> tuple[str, str]:
        if self.clock is None:
            return self._static_head
        return (self.keys.base, str(round(self.clock() * 1000)))

    def _evalsha(self, name: str, keys: Sequence[str], args: Iterable[Any]) -> Command:
        return ("EVALSHA", script_sha(name), len(keys), *keys, *self._head(), *args)

    def call(self, name: str, keys: Sequence[str], args: Iterable[Any]) -> Op[Any]:
        """One script call; loaded once if the server does not know it (new or restarted)."""
        return (yield from self.call_many(name, [(keys, args)]))[0]

    def call_many(self, name: str, calls: Sequence[tuple[Sequence[str], Iterable[Any]]]) -> Op[list[Any]]:
        """Several calls of one script in one round trip (each call atomic on its own),
        followed by a WAIT when the queue wants replicated writes and the script writes."""
        commands = [self._evalsha(name, keys, args) for keys, args in calls]
        tail = [] if name in READ_ONLY else self.replication.tail()
        return (yield from self.loaded(name, commands, (yield [*commands, *tail]), tail))

    def loaded(
        self, name: str, commands: Sequence[Command], replies: list[Any], tail: Sequence[Command] = ()
    ) -> Op[list[Any]]:
        """The replies of calls of script ``name`` (``replies`` ends with those of ``tail``,
        the WAIT that followed them): calls the server answered NOSCRIPT (it is new or
        restarted) are sent again after a SCRIPT LOAD in one round trip, with the WAIT again;
        an error reply is raised, then too few replicas. The one place a script gets loaded."""
        replies, waited = replies[: len(commands)], replies[len(commands) :]
        retry = [i for i, r in enumerate(replies) if isinstance(r, NoScriptError)]
        if retry:
            again = yield [("SCRIPT LOAD", script_source(name)), *(commands[i] for i in retry), *tail]
            for i, r in zip(retry, again[1:]):
                replies[i] = r
            waited = again[1 + len(retry) :]
        for r in replies:
            if isinstance(r, ResponseError):
                raise error_for(r, self.keys.base)
        for w in waited:
            self.replication.check(w)
        return replies
