"""Writing a DataFrame into a queue, in batch and streaming queries.

Each Spark task opens its own client and enqueues the Arrow batches it is given in large
multi-message calls (one pipelined round trip per batch). A retried task or a replayed
micro-batch enqueues again: with a ``dedupKey`` column the repeats return the first ids
(exactly-once within the queue's ``dedup_window``), without one delivery is at-least-once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator

from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from ..errors import InvalidArgument
from .options import Options

if TYPE_CHECKING:
    import pyarrow as pa


@dataclass
class Written(WriterCommitMessage):
    rows: int


def enqueue_batches(opts: Options, batches: Iterator[pa.RecordBatch]) -> Written:
    """Enqueue every row of ``batches``: the body column, and the optional delay (seconds)
    and dedup-key columns. The whole partition is read and checked before its first enqueue,
    so a partition with a null body writes nothing."""
    held = [checked(opts, b) for b in batches]
    q = opts.open()
    rows = 0
    try:
        for batch in held:
            names = batch.schema.names
            bodies = batch.column(opts.body_column).to_pylist()
            kw: dict[str, Any] = {}
            if opts.delay_column in names:
                kw["delays"] = [float(d or 0.0) for d in batch.column(opts.delay_column).to_pylist()]
            if opts.dedup_column in names:
                kw["dedup_keys"] = [None if k is None else str(k)
                                    for k in batch.column(opts.dedup_column).to_pylist()]
            for i in range(0, len(bodies), CHUNK_ROWS):
                part = {k: v[i : i + CHUNK_ROWS] for k, v in kw.items()}
                q.enqueue_many(bodies[i : i + CHUNK_ROWS], **part)
            rows += len(bodies)
    finally:
        q.client.close()
    return Written(rows)


def has_body(opts: Options, schema: StructType) -> None:
    """On the driver, before any task runs: a DataFrame without the body column."""
    if opts.body_column not in schema.names:
        raise InvalidArgument(f"the DataFrame has no body column {opts.body_column!r} "
                              f"(columns: {', '.join(schema.names)}; option bodyColumn names it)")


def checked(opts: Options, batch: pa.RecordBatch) -> pa.RecordBatch:
    """A null body would become an empty message without a word."""
    if batch.column(opts.body_column).null_count:
        raise InvalidArgument(f"the body column {opts.body_column!r} holds nulls: a message needs a "
                              f"body, so this partition wrote nothing (drop them first: "
                              f"df.where(F.col({opts.body_column!r}).isNotNull()))")
    return batch


#: Rows per enqueue_many call: its chunks of 1,000 messages go out in one pipeline.
CHUNK_ROWS = 10_000


class QueueWriter(DataSourceArrowWriter):
    def __init__(self, opts: Options, schema: StructType) -> None:
        has_body(opts, schema)
        self.opts = opts

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Written:
        return enqueue_batches(self.opts, iterator)


class QueueStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, opts: Options, schema: StructType) -> None:
        has_body(opts, schema)
        self.opts = opts

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Written:
        return enqueue_batches(self.opts, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to do: the rows were enqueued by the tasks (a replay enqueues again)."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to undo: enqueued messages stay (at-least-once)."""
