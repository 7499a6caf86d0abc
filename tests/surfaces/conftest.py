"""The surfaces' fixture: one SparkSession for every Spark test (they run on one xdist
worker: group "spark")."""

from __future__ import annotations

from typing import Any, Iterator

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One local[2] SparkSession for every Spark test (UI off, driver on 127.0.0.1); its
    Python workers run this interpreter, so they import this checkout of keyqueue."""
    import os
    import sys

    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from keyqueue.spark import register

    session = (
        SparkSession.builder.master("local[2]")
        .appName("keyqueue-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        # its Python workers may be slow to connect back on a busy machine (default 15 s)
        .config("spark.python.authenticate.socketTimeout", "120s")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    yield session
    session.stop()
