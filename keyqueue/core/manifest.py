"""A Spark stream source's manifest: the batches it claimed that Spark has not committed,
as ``batch number -> [[id, receipt], ...]`` (JSON) in the helper hash
``P:{NAME}:stream:<source>``, so a query restarted from its checkpoint replays a batch
exactly. Written with the queue's replication, and kept ``ttl`` seconds after its last write."""

from __future__ import annotations

import json
from typing import Iterable

from ..keys import QueueKeys
from .replication import Replication
from .replies import error_for, hash_reply, raise_errors, text
from .roundtrip import Op, transaction

Pairs = list[tuple[str, str]]


def record(
    keys: QueueKeys, source: str, batch: int, pairs: Pairs, ttl: int, replication: Replication | None = None
) -> Op[None]:
    """Note what a batch claimed, before Spark reads it."""
    key = keys.stream(source)
    commands = [("HSET", key, str(batch), json.dumps(pairs)), ("EXPIRE", key, ttl)]
    replies = yield from transaction(commands, replication)
    raise_errors(commands, replies or [], key)


def batches(keys: QueueKeys, source: str) -> Op[dict[int, Pairs]]:
    """Every batch noted and not forgotten (after a restart)."""
    key = keys.stream(source)
    (raw,) = yield [("HGETALL", key)]
    if isinstance(raw, Exception):
        raise error_for(raw, key)
    return {int(text(b)): [(str(i), str(c)) for i, c in json.loads(pairs)] for b, pairs in hash_reply(raw).items()}


def forget(keys: QueueKeys, source: str, done: Iterable[int]) -> Op[None]:
    """Drop committed batches (their messages are acknowledged)."""
    key = keys.stream(source)
    fields = [str(b) for b in done]
    if not fields:
        return
    (reply,) = yield [("HDEL", key, *fields)]
    if isinstance(reply, Exception):
        raise error_for(reply, key)
