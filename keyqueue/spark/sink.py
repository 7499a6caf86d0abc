"""Writing a DataFrame into a queue, in batch and streaming queries.

Each Spark task opens its own client and enqueues the Arrow batches it is given in large
multi-message calls (one pipelined round trip per batch). A retried task or a replayed
micro-batch enqueues again: with a ``dedupKey`` column the repeats return the first ids
(exactly-once within the queue's ``dedup_window``), without one delivery is at-least-once.
"""

from __future__ import annotations

import logging
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

log = logging.getLogger("keyqueue.spark")


@dataclass
class Written(WriterCommitMessage):
    rows: int
    skipped: int = 0  # rows with a null body, with option("nullBodies", "skip")


def enqueue_batches(opts: Options, batches: Iterator[pa.RecordBatch]) -> Written:
    """Enqueue every row of ``batches``: the body column, and the optional delay (seconds),
    dedup-key and shard-key columns. The whole partition is read and checked before its first enqueue,
    so a partition with a null body writes nothing."""
    held, skipped = [], 0
    for b in batches:
        kept = checked(opts, b)
        skipped += b.num_rows - kept.num_rows
        held.append(kept)
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
                kw["dedup_keys"] = [None if k is None else str(k) for k in batch.column(opts.dedup_column).to_pylist()]
            if opts.shard_column in names:
                kw["shard_keys"] = [None if k is None else str(k) for k in batch.column(opts.shard_column).to_pylist()]
            for i in range(0, len(bodies), CHUNK_ROWS):
                part = {k: v[i : i + CHUNK_ROWS] for k, v in kw.items()}
                q.enqueue_many(bodies[i : i + CHUNK_ROWS], **part)
            rows += len(bodies)
    finally:
        q.client.close()
    return Written(rows, skipped)


def has_body(opts: Options, schema: StructType) -> None:
    """On the driver, before any task runs: a DataFrame without the body column."""
    if opts.body_column not in schema.names:
        raise InvalidArgument(
            f"the DataFrame has no body column {opts.body_column!r} "
            f"(columns: {', '.join(schema.names)}; option bodyColumn names it)"
        )


def checked(opts: Options, batch: pa.RecordBatch) -> pa.RecordBatch:
    """A null body would become an empty message without a word: refused, or with
    option("nullBodies", "skip") left out (the driver logs how many)."""
    column = batch.column(opts.body_column)
    if not column.null_count:
        return batch
    if opts.skip_null_bodies:
        return batch.filter(column.is_valid())
    raise InvalidArgument(
        f"the body column {opts.body_column!r} holds nulls: a message needs a "
        f"body, so this partition wrote nothing (drop them first: "
        f"df.where(F.col({opts.body_column!r}).isNotNull()), or "
        f'option("nullBodies", "skip"))'
    )


def count_skipped(messages: list[WriterCommitMessage | None]) -> None:
    """On the driver, once the write is committed: how many null bodies were left out."""
    skipped = sum(m.skipped for m in messages if isinstance(m, Written))
    if skipped:
        log.warning("skipped %d rows whose body column was null (option nullBodies=skip)", skipped)


#: Rows per enqueue_many call: its chunks of 1,000 messages go out in one pipeline.
CHUNK_ROWS = 10_000


class QueueWriter(DataSourceArrowWriter):
    def __init__(self, opts: Options, schema: StructType) -> None:
        has_body(opts, schema)
        self.opts = opts

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Written:
        return enqueue_batches(self.opts, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        count_skipped(messages)


class QueueStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, opts: Options, schema: StructType) -> None:
        has_body(opts, schema)
        self.opts = opts

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Written:
        return enqueue_batches(self.opts, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """The rows were enqueued by the tasks (a replay enqueues again): only the count
        of skipped null bodies is left to say."""
        count_skipped(messages)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to undo: enqueued messages stay (at-least-once)."""
