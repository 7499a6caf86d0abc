"""keyqueue.spark against a real local Redis Cluster, by a redis+cluster:// URL."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from keyqueue import Queue

from ..support.cluster import Cluster
from .test_spark import _consume, drain, fmt

pytestmark = [pytest.mark.timeout(300), pytest.mark.spark]


def test_write_then_stream_on_a_cluster(spark: Any, tmp_path: Path) -> None:
    c = Cluster()
    try:
        df = spark.createDataFrame([(f"body-{i}",) for i in range(200)], "value string").repartition(2)
        fmt(df.write, c.url, "cw").mode("append").save()
        q = Queue("cw", client=c.client)
        assert q.stats().waiting == 200
        seen: list[list[str]] = []
        _consume(spark, c.url, "cw", tmp_path / "ck", seen, maxRowsPerTrigger=80).awaitTermination(120)
        assert [len(b) for b in seen] == [80, 80, 40]
        s = q.stats()
        assert (s.waiting, s.processing) == (0, 0) and drain(q) == []  # every batch acknowledged
        from keyqueue.spark.workers import _url_of

        again = _url_of(Queue("cw", url=c.url))  # how run_workers' tasks reach a cluster queue
        assert again.startswith("redis+cluster://") and set(again.split("//")[1].split(",")) == set(c.addresses)
    finally:
        c.stop()
