"""The Python that Spark's workers run. They unpickle keyqueue's code (the data source is
even planned in one of them, on the driver), so it must be able to import keyqueue; but
PySpark starts ``python3`` from PATH unless PYSPARK_PYTHON says otherwise, and it ignores
``spark.pyspark.python`` in a session made from Python. Then every job fails deep in a
Py4J trace with ``No module named 'keyqueue'``."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile

from pyspark.sql import SparkSession

from ..errors import MissingDependency

#: How a job that failed because a worker could not import a module says so.
NO_MODULE = re.compile(r"No module named '([\w.]+)'")

#: Interpreters seen importing keyqueue (each check starts a process).
_CAN_IMPORT: set[str] = set()


def keyqueue_python(spark: SparkSession, *, executors_only: bool = False) -> str:
    """The interpreter this session's Python workers run, made sure to import keyqueue:
    PYSPARK_PYTHON, else ``spark.pyspark.python``, else, for a local master, this very
    interpreter (a local session's workers run on this machine). Raises MissingDependency
    in one line when it cannot import keyqueue. ``executors_only``: no data source is planned
    on this host, so on a cluster there is nothing here to check."""
    try:
        sc = spark.sparkContext
    except Exception:  # noqa: BLE001  Spark Connect: the server chooses its workers' Python
        return ""
    local = (sc.master or "").startswith("local")
    wanted = (
        os.environ.get("PYSPARK_PYTHON")
        or sc.getConf().get("spark.pyspark.python")
        or (sys.executable if local else None)
    )
    if wanted:
        sc.pythonExec = wanted  # read each time PySpark wraps a function for its workers
    exe = sc.pythonExec
    if (executors_only and not local) or exe == sys.executable or exe in _CAN_IMPORT:
        return exe
    if not _imports_keyqueue(exe):
        raise MissingDependency(cannot_import(exe, "keyqueue"))
    _CAN_IMPORT.add(exe)
    return exe


def _imports_keyqueue(exe: str) -> bool:
    """Run from a neutral folder: a checkout in the current one must not pass for an install."""
    try:
        done = subprocess.run(
            [exe, "-c", "import keyqueue"], cwd=tempfile.gettempdir(), capture_output=True, timeout=120, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def cannot_import(exe: str, module: str) -> str:
    shown = os.environ.get("PYSPARK_PYTHON") or "unset"
    return (
        f"Spark's Python workers run {exe} (PYSPARK_PYTHON is {shown}), which cannot import "
        f"{module}: install it for that interpreter, or set PYSPARK_PYTHON to one that has it "
        f"(this one is {sys.executable})"
    )
