"""``spark.read.format("keyqueue")``: a non-destructive snapshot of one state of a queue
(waiting, processing, delayed or dead), for analysing dead letters, ages and receive counts.

The driver lists the ids of the state; tasks read their messages in chunks. Nothing is
claimed or changed. Messages that change state while the snapshot is read are taken as
they are when their chunk is read (or skipped, if they are gone by then)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Iterator, Sequence

from pyspark.sql.datasource import DataSourceReader, InputPartition

from ..connection import redact
from ..errors import InvalidArgument
from ..keys import unknown_queue
from ..message import Message
from ..queue import Queue, list_queues
from .options import Options

SCHEMA = "id string, body binary, receives int, enqueued_at timestamp, deadline timestamp, last_error string"
#: Messages per task.
PER_PARTITION = 10_000


@dataclass
class Ids(InputPartition):
    ids: list[str]


def utc(seconds: float | None) -> datetime | None:
    return None if seconds is None else datetime.fromtimestamp(seconds, tz=timezone.utc)


class SnapshotReader(DataSourceReader):
    def __init__(self, opts: Options) -> None:
        self.opts = opts

    def partitions(self) -> Sequence[InputPartition]:
        """At least one partition: given none, PySpark calls ``read(None)``."""
        q = self.opts.open()
        try:
            known(q, self.opts.url)
            ids = q.ids(self.opts.source)
        finally:
            q.client.close()
        return [Ids(ids[i : i + PER_PARTITION]) for i in range(0, len(ids), PER_PARTITION)] or [Ids([])]

    def read(self, partition: InputPartition) -> Iterator[tuple[object, ...]]:
        assert isinstance(partition, Ids)
        return map(row, messages(self.opts, partition.ids)) if partition.ids else iter(())


def known(q: Queue, url: str) -> None:
    """A typo in the queue name must not read as an empty queue (the CLI's rule too)."""
    if not q.exists():
        names = list_queues(q.client, q.prefix)
        raise InvalidArgument(unknown_queue(q.name, q.prefix, redact(url), names))


def messages(opts: Options, ids: list[str]) -> Iterator[Message]:
    """The messages with these ids, read by a task with a client of its own."""
    q = opts.open()
    try:
        yield from q.get(ids)
    finally:
        q.client.close()


def _text(v: bytes | str) -> str:
    return v.decode() if isinstance(v, bytes) else v


def row(m: Message) -> tuple[object, ...]:
    return (m.id, m.body, m.receives, utc(m.enqueued_at), utc(m.deadline), m.last_error)
