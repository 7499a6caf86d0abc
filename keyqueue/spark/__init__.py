"""keyqueue in Spark pipelines, through PySpark's Python Data Source API (PySpark 4.2+).

    from keyqueue.spark import register, run_workers
    register(spark)                       # the format name "keyqueue"
    df.write.format("keyqueue").option("url", URL).option("queue", "jobs").save()
    spark.readStream.format("keyqueue").option("url", URL).option("queue", "jobs").load()
    spark.read.format("keyqueue").option("url", URL).option("queue", "jobs").option("source", "dead").load()

Needs the extra: ``pip install 'keyqueue[spark]'`` (``import keyqueue`` never imports this).
"""

from __future__ import annotations

try:
    from pyspark.sql import SparkSession
    from pyspark.sql.datasource import (
        DataSource,
        DataSourceReader,
        DataSourceStreamReader,
        DataSourceStreamWriter,
        DataSourceWriter,
    )
    from pyspark.sql.types import StructType
except ImportError as exc:  # pragma: no cover - depends on the environment
    from ..errors import MissingDependency

    raise MissingDependency("keyqueue.spark needs PySpark 4.2+ and pyarrow: pip install 'keyqueue[spark]'") from exc

from ..errors import InvalidArgument
from .interpreter import keyqueue_python
from .options import Options
from .sink import QueueStreamWriter, QueueWriter
from .snapshot import SCHEMA as SNAPSHOT_SCHEMA
from .snapshot import SnapshotReader
from .stream import SCHEMA as STREAM_SCHEMA
from .stream import StreamSource
from .workers import run_workers

__all__ = ["KeyQueueDataSource", "register", "run_workers"]


class KeyQueueDataSource(DataSource):
    """The "keyqueue" format: options url, queue, prefix, scripting; bodyColumn,
    delayColumn, dedupKeyColumn (write); maxRowsPerTrigger, visibilityTimeout (stream
    read); source = waiting | processing | delayed | dead (batch read)."""

    @classmethod
    def name(cls) -> str:
        return "keyqueue"

    def schema(self) -> str | StructType:
        return SNAPSHOT_SCHEMA if "source" in {k.lower() for k in self.options} else STREAM_SCHEMA

    def _opts(self) -> Options:
        return Options.parse(dict(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        append_only(overwrite)
        return QueueWriter(self._opts(), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        append_only(overwrite)
        return QueueStreamWriter(self._opts(), schema)

    def reader(self, schema: StructType) -> DataSourceReader:
        return SnapshotReader(self._opts())

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return StreamSource(self._opts())


def append_only(overwrite: bool) -> None:
    """Overwriting would mean deleting messages that consumers may hold: refused before any
    task runs, so nothing is written."""
    if overwrite:
        raise InvalidArgument(
            'a queue can only be appended to: use .mode("append") (to empty it '
            "first, purge it: keyqueue purge QUEUE --source all)"
        )


def register(spark: SparkSession) -> None:
    """Make ``format("keyqueue")`` available in this session, once its Python workers can
    import keyqueue (the registration carries the interpreter they will run)."""
    keyqueue_python(spark)
    spark.dataSource.register(KeyQueueDataSource)
