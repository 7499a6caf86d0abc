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

from .replies import NON_LOCAL_KEY

T = TypeVar("T")

Command = Sequence[Any]
Replies = list[Any]


@dataclass(frozen=True)
class Sleep:
    """Yielded instead of a round trip: wait this long (time.sleep, or asyncio.sleep on a
    loop), then go on; the operation receives an empty reply list."""

    seconds: float


@dataclass(frozen=True)
class Race:
    """Yielded by a plan: blocking commands (BLPOPs) that must wait at once on connections of
    their own (queues on different clients, or on different cluster nodes, which one
    command cannot watch together). The transport sends them all; when the first answers
    it drops the connections of the others, so no dropped command runs for it later. The
    plan receives each command's reply, None for one cut short."""

    waits: Sequence[tuple[Any, Command]]


#: An operation: yields round trips (or a Sleep), receives their replies, returns its result.
Op = Generator[Union[list[Command], Sleep], Replies, T]
#: A plan over several operations (possibly on several clients): yields (target, op) pairs
#: (or a Race) and receives each op's result. Used where one logical step spans queues.
Plan = Generator[Union[tuple[Any, Op[Any]], Race], Any, T]

#: Commands without a key: they go with the keyed command next to them (cluster routing).
_KEYLESS = {"TIME", "MULTI", "EXEC", "DISCARD", "UNWATCH", "SCRIPT LOAD", "PING", "WAIT", "CONFIG"}


def one(command: Command) -> Op[Any]:
    """One command as a round trip of its own; its reply (an error reply is returned, not raised)."""
    return (yield [command])[0]


def together(ops: Sequence[Op[T]]) -> Op[list[T]]:
    """Run read operations side by side: each step one round trip holding every unfinished
    one's next round trip (the replies split back); their results in order. Only for
    operations that neither sleep nor WATCH across round trips (one operation's EXEC would
    drop another's watch on the shared connection)."""
    results: list[Any] = [None] * len(ops)
    pending: dict[int, list[Command]] = {}

    def step(i: int, replies: Replies | None) -> None:
        try:
            trip = next(ops[i]) if replies is None else ops[i].send(replies)
        except StopIteration as stop:
            pending.pop(i, None)
            results[i] = stop.value
            return
        assert not isinstance(trip, Sleep), "together() runs operations that do not sleep"
        pending[i] = trip

    for i in range(len(ops)):
        step(i, None)
    while pending:
        merged: list[Command] = []
        spans: dict[int, tuple[int, int]] = {}
        for i, trip in pending.items():
            spans[i] = (len(merged), len(merged) + len(trip))
            merged += trip
        replies = yield merged
        for i, (start, end) in spans.items():
            step(i, replies[start:end])
    return results


def transaction(commands: Sequence[Command], replication: Any = None) -> Op[list[Any] | None]:
    """MULTI ... EXEC: the replies, or None when a watched key changed (nothing applied).
    With a ``core.replication.Replication``, its WAIT follows the EXEC in the same round trip."""
    tail = replication.tail() if replication is not None else []
    replies = yield [("MULTI",), *commands, ("EXEC",), *tail]
    result = replies[len(commands) + 1]
    if isinstance(result, Exception):
        raise result
    if tail and result is not None:
        replication.check(replies[-1])
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


#: Commands that wait in the server (a long-poll's slice).
_BLOCKING = {"BLPOP", "BRPOP", "BLMOVE", "BRPOPLPUSH", "BZPOPMIN", "BZPOPMAX"}


def blocks(commands: Sequence[Command]) -> bool:
    return any(str(cmd[0]).upper() in _BLOCKING for cmd in commands)


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


class Stepper:
    """Drives one operation for a transport: ``next`` is what to do (a round trip, or a
    Sleep), ``send(replies)`` moves on; then ``done`` and ``result``. It also tracks whether
    a WATCH is left pending, so the transport knows if the connection may be reused."""

    def __init__(self, op: Op[Any]) -> None:
        self.op = op
        self.done = False
        self.result: Any = None
        self.watching = False
        self.waited = False
        self.next: list[Command] | Sleep = []
        self._advance(None, first=True)

    def _advance(self, replies: Replies | None, first: bool = False) -> None:
        try:
            self.next = next(self.op) if first else self.op.send(replies or [])
        except StopIteration as stop:
            self.done, self.result = True, stop.value

    def send(self, replies: Replies) -> None:
        if not isinstance(self.next, Sleep):
            self.watching = still_watching(self.next, self.watching)
        self.waited = not isinstance(self.next, Sleep) and blocks(self.next)
        self._advance(replies)

    @property
    def between_waits(self) -> bool:
        """Whether a long-poll just ended a blocking slice with nothing pending: the transport
        hands its connection back, so tasks waiting on a full pool get their turn."""
        return self.waited and not self.watching and not self.done

    @property
    def clean(self) -> bool:
        """Whether the operation ended with its connection reusable (nothing half-done)."""
        return self.done and not self.watching


#: Keyless commands that complete the command before them (a write's WAIT for replicas, a
#: transaction's EXEC): they go to that command's node. Other keyless ones (MULTI, SCRIPT
#: LOAD, TIME) go with the command after them.
FOLLOWERS = frozenset({"WAIT", "EXEC", "DISCARD", "UNWATCH"})


def _keyless(command: Command, followers: bool) -> bool:
    """A keyless command that completes the one before it (``followers``), or prepares the
    one after it (SCRIPT LOAD before its EVALSHA)."""
    return routing_key(command) is None and (str(command[0]).upper() in FOLLOWERS) == followers


def node_groups(client: Any, commands: Sequence[Command]) -> list[tuple[Any, list[int]]]:
    """The commands grouped by the cluster node of their keys, in their order on each node
    (a keyless command goes with the keyed one it completes or prepares, see FOLLOWERS;
    failing that, the nearest keyed one): one write per node. Commands on different nodes
    have no order between them (each node runs its own); an operation that needs one sends
    them in round trips of their own."""
    keys = [routing_key(c) for c in commands]
    follows = [_keyless(c, True) for c in commands]
    for i in range(1, len(keys)):  # followers: the keyed command before them
        if follows[i]:
            keys[i] = keys[i - 1]
    for i in range(len(keys) - 2, -1, -1):  # the others: the keyed command after them
        if keys[i] is None:
            keys[i] = keys[i + 1]
    for i in range(1, len(keys)):
        if keys[i] is None:
            keys[i] = keys[i - 1]
    groups: dict[int, tuple[Any, list[int]]] = {}
    for i, key in enumerate(keys):
        node = client.get_node_from_key(key) if key is not None else client.get_default_node()
        groups.setdefault(id(node), (node, []))[1].append(i)
    return list(groups.values())


#: Sends of one round trip's node group when a cluster answers MOVED or CLUSTERDOWN (as
#: redis-py's own cluster client retries), and the pause before a resend.
CLUSTER_ATTEMPTS = 3
CLUSTER_RETRY_PAUSE = 0.25
#: While a slot migrates (resharding), a call over several of its keys (every script) is
#: refused, by the rules of Redis Cluster, until the slot is handed over: TRYAGAIN while its
#: keys are split between the nodes, ASK from the old node for keys it gave away, "non local
#: key" for a key a script makes there. Such calls are sent again every
#: ``CLUSTER_MIGRATION_PAUSE`` for up to this long, then their error (transient for a
#: worker, which waits it out as an outage) is the caller's: a round trip never holds a
#: worker's other queues up for longer.
CLUSTER_MIGRATION_WAIT = 2.0
CLUSTER_MIGRATION_PAUSE = 0.1


def migrating(reply: Any) -> bool:
    """Whether ``reply`` is a refusal a slot migration makes (and its end ends)."""
    from redis.exceptions import AskError, MovedError, ResponseError, TryAgainError

    if isinstance(reply, AskError):
        return not isinstance(reply, MovedError)
    return isinstance(reply, TryAgainError) or isinstance(reply, ResponseError) and NON_LOCAL_KEY in str(reply)


def must_resend(replies: Sequence[Any]) -> bool:
    """Whether a cluster answered that the slots moved (MOVED or ASK), that it is down or
    busy for now (CLUSTERDOWN, TRYAGAIN: while it forms or fails over), or that the slot is
    migrating: resend (learning the map again after MOVED or CLUSTERDOWN)."""
    from redis.exceptions import ClusterDownError, MovedError

    return any(isinstance(r, (MovedError, ClusterDownError)) or migrating(r) for r in replies)


@dataclass
class Resends:
    """What a cluster round trip's resends have used: the attempts after MOVED or
    CLUSTERDOWN, and the time since the first reply of a migration (a long-poll's wait
    before it is not counted)."""

    attempts: int = 0
    migrating_since: float | None = None

    def pause(self, now: float, replies: Sequence[Any], todo: Sequence[int]) -> float | None:
        """The pause before sending ``todo`` again (None: no more sends, the replies stand)."""
        pending = [replies[i] for i in todo if must_resend([replies[i]])]
        if not pending:
            return None
        if all(migrating(r) for r in pending):
            if self.migrating_since is None:
                self.migrating_since = now
            return CLUSTER_MIGRATION_PAUSE if now - self.migrating_since < CLUSTER_MIGRATION_WAIT else None
        self.attempts += 1
        return CLUSTER_RETRY_PAUSE if self.attempts < CLUSTER_ATTEMPTS else None

    @staticmethod
    def remap(replies: Sequence[Any], todo: Sequence[int]) -> bool:
        """Whether the slot map must be read again first (MOVED, CLUSTERDOWN): ASK names its
        node, and a migration's other refusals end where the map already points."""
        return any(must_resend([replies[i]]) and not migrating(replies[i]) for i in todo)


#: Commands of a transaction: a node group holding one is sent again whole, or not at all.
_TRANSACTIONAL = frozenset({"MULTI", "EXEC", "DISCARD", "WATCH", "UNWATCH"})


def cluster_sends(
    client: Any, commands: Sequence[Command], todo: Sequence[int], replies: Sequence[Any]
) -> list[tuple[Any, list[Command], list[int | None]]]:
    """One attempt's writes of the commands ``todo`` (indexes into ``commands``): per node, the
    commands and the index each reply goes to (None: a reply to drop). Grouped by the slot
    map (``node_groups``), but a command whose last reply was ASK goes to the node it names,
    after ASKING, with the keyless commands around it (a SCRIPT LOAD before it, its WAIT)."""
    from redis.exceptions import AskError, MovedError

    sends: dict[str, tuple[Any, list[Command], list[int | None]]] = {}

    def add(node: Any, command: Command, where: int | None) -> None:
        _, cmds, wheres = sends.setdefault(node.name, (node, [], []))
        cmds.append(command)
        wheres.append(where)

    asked: list[tuple[list[int], int, list[int]]] = []  # (keyless before, the command, keyless after)
    routed: list[int] = []
    for i in todo:
        if isinstance(replies[i], AskError) and not isinstance(replies[i], MovedError):  # (MOVED: the map)
            before: list[int] = []
            while routed and routed[-1] == i - len(before) - 1 and _keyless(commands[routed[-1]], False):
                before.insert(0, routed.pop())
            asked.append((before, i, []))
        elif asked and _keyless(commands[i], True) and ([asked[-1][1], *asked[-1][2]][-1] == i - 1):
            asked[-1][2].append(i)
        else:
            routed.append(i)
    for before, i, after in asked:
        reply = replies[i]
        node = client.get_node(host=reply.host, port=reply.port) or client.get_node_from_key(routing_key(commands[i]))
        for k in before:
            add(node, commands[k], k)
        add(node, ("ASKING",), None)
        for k in (i, *after):
            add(node, commands[k], k)
    for node, idx in node_groups(client, [commands[i] for i in routed]) if routed else []:
        for k in idx:
            add(node, commands[routed[k]], routed[k])
    return list(sends.values())


def to_resend(commands: Sequence[Command], sent: Sequence[list[int | None]], replies: Sequence[Any]) -> list[int]:
    """What to send again after an attempt whose writes went out as ``sent`` (per node, the
    indexes of ``cluster_sends``): each command a node answered MOVED, ASK, TRYAGAIN or
    CLUSTERDOWN, with the keyless commands around it; a node's whole share when it holds
    a transaction (its commands stand or fall together). Commands that ran are not sent
    again: a batch over several slots never enqueues a part twice."""
    again: list[int] = []
    for wheres in sent:
        idx = [i for i in wheres if i is not None]
        if not any(must_resend([replies[i]]) for i in idx):
            continue
        if any(str(commands[i][0]).upper() in _TRANSACTIONAL for i in idx):
            again += idx
            continue
        resend = False
        for pos, i in enumerate(idx):
            if routing_key(commands[i]) is not None:
                resend = must_resend([replies[i]])
                # (and what prepared it: a SCRIPT LOAD, for the node it goes to now)
                back = pos - 1
                while resend and back >= 0 and _keyless(commands[idx[back]], False):
                    again.append(idx[back])
                    back -= 1
            if resend:
                again.append(i)
    return sorted(set(again))
