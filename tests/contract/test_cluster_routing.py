"""How a cluster round trip is split over nodes and what of it is sent again after a
redirection, on a stand-in slot map (pure functions of the core; the real cluster tests
are in tests/faults/test_cluster.py)."""

from __future__ import annotations

from dataclasses import dataclass

from redis.exceptions import AskError, ClusterDownError, MovedError, ResponseError, TryAgainError

from keyqueue.core.roundtrip import (
    CLUSTER_ATTEMPTS,
    CLUSTER_MIGRATION_PAUSE,
    CLUSTER_MIGRATION_WAIT,
    CLUSTER_RETRY_PAUSE,
    Resends,
    cluster_sends,
    to_resend,
)


@dataclass(frozen=True)
class Node:
    name: str


class SlotMap:
    """Keys with hash tag {a} live on node A, {b} on node B; node C is known too."""

    nodes = {"127.0.0.1:7000": Node("A"), "127.0.0.1:7001": Node("B"), "127.0.0.1:7002": Node("C")}

    def get_node_from_key(self, key: str) -> Node:
        return Node("A") if "{a}" in str(key) else Node("B")

    def get_node(self, host: str, port: int) -> Node | None:
        return self.nodes.get(f"{host}:{port}")

    def get_default_node(self) -> Node:
        return Node("A")


LOAD, RUN_A, WAIT, RUN_B = (
    ("SCRIPT LOAD", "src"),
    ("EVALSHA", "sha", 1, "{a}k"),
    ("WAIT", 1, 0),
    ("EVALSHA", "sha", 1, "{b}k"),
)


def test_a_script_asked_elsewhere_goes_there_with_its_load_asking_and_wait() -> None:
    commands = [LOAD, RUN_A, WAIT, RUN_B]
    replies = [b"sha", AskError("3999 127.0.0.1:7002"), 1, 5]
    again = to_resend(commands, [[0, 1, 2], [3]], replies)
    assert again == [0, 1, 2]  # (not RUN_B: it ran)
    sends = cluster_sends(SlotMap(), commands, again, replies)
    assert [(node.name, cmds, wheres) for node, cmds, wheres in sends] == [
        ("C", [LOAD, ("ASKING",), RUN_A, WAIT], [0, None, 1, 2])
    ]


def test_a_moved_script_goes_again_alone_with_its_load_and_wait_to_the_new_map() -> None:
    commands = [RUN_B, LOAD, RUN_A, WAIT]
    replies = [7, b"sha", MovedError("3999 127.0.0.1:7001"), 1]
    again = to_resend(commands, [[0, 1, 2, 3]], replies)
    assert again == [1, 2, 3]
    sends = cluster_sends(SlotMap(), commands, again, replies)  # (the map read again says A)
    assert [(node.name, cmds, wheres) for node, cmds, wheres in sends] == [("A", [LOAD, RUN_A, WAIT], [1, 2, 3])]


def test_a_transaction_goes_again_whole() -> None:
    commands = [("MULTI",), ("SET", "{a}x", 1), ("EXEC",), ("SET", "{a}y", 1)]
    replies = ["OK", MovedError("3999 127.0.0.1:7001"), None, "OK"]
    assert to_resend(commands, [[0, 1, 2, 3]], replies) == [0, 1, 2, 3]


def test_a_migrating_slot_is_waited_out_and_other_redirections_are_not() -> None:
    """A migration's refusals (ASK, TRYAGAIN, a script's non local key) are sent again for
    up to the migration wait from the first of them, without reading the slot map again;
    MOVED and CLUSTERDOWN for the usual attempts, counted apart (a MOVED at a migration's
    end still gets them), each after the map is read again."""
    ask, again = AskError("1 127.0.0.1:7001"), TryAgainError("Multiple keys request during rehashing of slot")
    non_local = ResponseError("Script attempted to access a non local key in a cluster node script: x")
    moved, down = MovedError("1 127.0.0.1:7001"), ClusterDownError("The cluster is down")
    r = Resends()
    for t in range(20):  # (20 sends, 0.1 s apart)
        assert r.pause(100.0 + t * 0.1, [ask, again, non_local, "ok"], [0, 1, 2]) == CLUSTER_MIGRATION_PAUSE
    assert not Resends.remap([ask, again, non_local], [0, 1, 2])
    assert r.pause(100.0 + CLUSTER_MIGRATION_WAIT, [again], [0]) is None
    for other in (moved, down):
        r = Resends()
        for t in range(10):
            r.pause(float(t), [again], [0])
        assert Resends.remap([again, other], [0, 1])
        assert [r.pause(10.0, [again, other], [0, 1]) for _ in range(CLUSTER_ATTEMPTS)] == [CLUSTER_RETRY_PAUSE] * (
            CLUSTER_ATTEMPTS - 1
        ) + [None]
    assert Resends().pause(0.0, [ask], []) is None
