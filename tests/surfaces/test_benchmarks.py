"""Every benchmark under scripts/bench/ smoke-run with ``--quick`` as a subprocess, so none
rots unnoticed: it exits 0 before its deadline and prints its table's header. The figures of
a quick run (tiny counts, one round) mean nothing and are not read.

The benchmarks spend much of their time waiting (a JVM, servers starting, spawned
processes), so the module starts all the selected ones at once and each test waits for its
own: the module takes about as long as the slowest, Spark (under xdist each test starts its
own when it runs).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

from ..support.helpers import ROOT

BENCH = ROOT / "scripts" / "bench"
DEADLINE = 300.0  # seconds from its start: a benchmark still running then has hung (a quick
# run takes under a minute; the Spark one took 150 s on a starved host)

#: Each benchmark and a line of what it prints (its table's header, or its one result line).
HEADERS = {
    "aio.py": "| measurement | messages | baseline | keyqueue msg/s (median) | baseline msg/s (median) |",
    "cli_enqueue.py": "1,000 lines (scripted): exit 0, 1,000 waiting,",
    "cluster.py": "| primary | shards on it | share of the queue's Redis time min / median / max |",
    "instructions.py": "| instructions per delivered message | redis-server | vs Streams | vs floor |",
    "groups.py": "| grouped against ungrouped | grouped | ungrouped | ratio min / median / max | target |",
    "long_operations.py": "| long operation | messages | script calls | median ms per call | max ms per call |",
    "memory.py": "| memory per waiting message | hash-max-listpack-value | bytes | beyond the body |",
    "modes.py": "| operation | scripted msg/s | script-free msg/s | script-free / scripted |",
    "queue_ops.py": "| measurement | messages | keyqueue msg/s | baseline msg/s | ratio min / median / max |",
    "rate_limits.py": "| measurement | figure | target | result |",
    "redis_cpu.py": "| Redis CPU per delivered message | us min / median / max | vs floor min / median / max |",
    "reaping.py": "| reaping expired deliveries | seconds | Redis seconds | script calls |",
    "replication.py": "| measurement | messages | keyqueue msg/s | baseline msg/s | ratio min / median / max |",
    "spark.py": "| writer | rows/s | vs one pipelined RPUSH per row |",
    "retention.py": "| operation | mode | messages | seconds min / median / max | msg/s min / median / max |",
    "schedules.py": "| measurement | mode | fires msg/s | enqueue_many msg/s | ratio min / median / max |",
    "sqs.py": "keyqueue/moto min/med/max",
    "where_time_goes.py": "| operation | calls | Redis us per call | Redis us per message |",
    "worker.py": "| worker processes | messages | keyqueue msg/s | Streams consumer msg/s | LMOVE loop msg/s |",
}

pytestmark = pytest.mark.timeout(DEADLINE + 30)


@dataclass
class Run:
    proc: subprocess.Popen[bytes]
    started: float
    stdout: Path
    stderr: Path

    def wait(self) -> tuple[int | None, str, str]:
        """Its exit status (None: killed at the deadline), stdout and stderr."""
        try:
            rc: int | None = self.proc.wait(max(0.0, self.started + DEADLINE - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.kill()
            rc = None
        return rc, self.stdout.read_text(errors="replace"), self.stderr.read_text(errors="replace")

    def kill(self) -> None:
        """The benchmark and everything it started (its session: servers, workers, a JVM)."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


class Launcher:
    def __init__(self, out: Path) -> None:
        self.out = out
        self.runs: dict[str, Run] = {}

    def get(self, name: str) -> Run:
        if name not in self.runs:
            stdout, stderr = self.out / f"{name}.out", self.out / f"{name}.err"
            with stdout.open("wb") as o, stderr.open("wb") as e:
                proc = subprocess.Popen(
                    [sys.executable, str(BENCH / name), "--quick"],
                    cwd=ROOT,
                    stdin=subprocess.DEVNULL,
                    stdout=o,
                    stderr=e,
                    start_new_session=True,
                )
            self.runs[name] = Run(proc, time.monotonic(), stdout, stderr)
        return self.runs[name]


@pytest.fixture(scope="module")
def launcher(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Launcher]:
    launch = Launcher(tmp_path_factory.mktemp("bench"))
    if "PYTEST_XDIST_WORKER" not in os.environ:  # every selected one now, side by side
        for item in request.session.items:
            name = getattr(item, "callspec", None) and item.callspec.params.get("name")  # type: ignore[attr-defined]
            if item.module is request.module and name:  # type: ignore[attr-defined]
                launch.get(name)
    yield launch
    for run in launch.runs.values():
        run.kill()


def test_every_benchmark_is_smoke_run() -> None:
    assert sorted(p.name for p in BENCH.glob("*.py") if p.name != "harness.py") == sorted(HEADERS)


@pytest.mark.parametrize(
    "name",
    [pytest.param(name, marks=pytest.mark.spark) if name == "spark.py" else name for name in sorted(HEADERS)],
)  # (a JVM: with the Spark tests)
def test_benchmark_runs_quick(name: str, launcher: Launcher) -> None:
    rc, out, err = launcher.get(name).wait()
    assert rc is not None, f"{name} --quick still ran after {DEADLINE:.0f} s\n{err[-3000:]}"
    assert rc == 0, f"{name} --quick exited {rc}\n{err[-3000:]}"
    assert HEADERS[name] in out, f"{name} --quick did not print {HEADERS[name]!r}\n{out[-3000:]}"
