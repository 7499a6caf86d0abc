"""The options of the "keyqueue" format, parsed once on the driver into a plain, picklable
value: Redis clients cannot be pickled, so every task opens its own from these."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Mapping

from ..core.sources import PeekSource, peek_source
from ..errors import InvalidArgument
from ..queue import Queue

TRUE = ("true", "1", "yes")


@dataclass(frozen=True)
class Options:
    url: str
    queue: str
    prefix: str = "kq"
    scripting: bool = True
    #: replicated writes (Queue's min_replicas, replica_timeout)
    min_replicas: int = 0
    replica_timeout: float = 1.0
    body_column: str = "value"
    delay_column: str = "delay"
    dedup_column: str = "dedupKey"
    #: write: a sharded queue's routing key per row (a key's rows go to one shard, in order)
    shard_column: str = "shardKey"
    #: stream read: rows per micro-batch unless Spark passes a limit of its own
    max_rows: int = 10_000
    #: stream read: claim's visibility timeout (None: the queue's)
    visibility_timeout: float | None = None
    #: batch read: waiting | processing | delayed | dead
    source: PeekSource = "waiting"
    #: write: rows whose body is null are skipped (and counted) instead of refused
    skip_null_bodies: bool = False

    @classmethod
    def parse(cls, opts: Mapping[str, str]) -> Options:
        o = {k.lower(): v for k, v in opts.items()}
        url = o.get("url") or os.environ.get("KEYQUEUE_URL")
        if not url:
            raise InvalidArgument(
                'the "keyqueue" format needs option("url", "redis://...") (or KEYQUEUE_URL in the environment)'
            )
        if not o.get("queue"):
            raise InvalidArgument('the "keyqueue" format needs option("queue", NAME)')
        source = peek_source(o.get("source", "waiting"))
        vis = o.get("visibilitytimeout")
        parsed = cls(
            url=url,
            queue=o["queue"],
            prefix=o.get("prefix", "kq"),
            scripting=o.get("scripting", "true").lower() in TRUE,
            min_replicas=_whole("minReplicas", o.get("minreplicas", "0")),
            replica_timeout=_seconds("replicaTimeout", o.get("replicatimeout", "1")),
            body_column=o.get("bodycolumn", "value"),
            delay_column=o.get("delaycolumn", "delay"),
            dedup_column=o.get("dedupkeycolumn", "dedupKey"),
            shard_column=o.get("shardkeycolumn", "shardKey"),
            max_rows=_positive("maxRowsPerTrigger", o.get("maxrowspertrigger", "10000")),
            visibility_timeout=None if vis is None else float(vis),
            source=source,
            skip_null_bodies=_choice("nullBodies", o.get("nullbodies", "refuse"), ("refuse", "skip")) == "skip",
        )
        parsed.open().client.close()  # fails early, on the driver: bad URL, name, corrupt config
        return parsed

    def open(self) -> Queue:
        """A Queue with a client of its own (call it where the work runs)."""
        return Queue(
            self.queue,
            url=self.url,
            prefix=self.prefix,
            scripting=self.scripting,
            min_replicas=self.min_replicas,
            replica_timeout=self.replica_timeout,
        )


def _choice(name: str, value: str, allowed: tuple[str, ...]) -> str:
    if value.lower() not in allowed:
        raise InvalidArgument(f"option {name} must be {' or '.join(allowed)}, not {value!r}")
    return value.lower()


def _whole(name: str, value: str) -> int:
    if not value.isdigit():
        raise InvalidArgument(f"option {name} must be a whole number >= 0, not {value!r}")
    return int(value)


def _seconds(name: str, value: str) -> float:
    try:
        return float(value)
    except ValueError:
        raise InvalidArgument(f"option {name} must be seconds, not {value!r}") from None


def _positive(name: str, value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n <= 0:
        raise InvalidArgument(f"{name} must be a positive whole number, not {value!r}")
    return n
