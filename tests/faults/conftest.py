"""Fixtures of the fault tests."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from keyqueue.server import RedisServer

from ..support.processes import Procs


@pytest.fixture
def procs(tmp_path: Path, scripting: bool) -> Iterator[Procs]:
    """Starts keyqueue processes in the test's mode; kills any still running at the end."""
    ps = Procs(tmp_path, scripting)
    yield ps
    for p in ps.started:
        if p.poll() is None:
            p.kill()
        p.wait()


@pytest.fixture
def durable() -> Iterator[RedisServer]:
    """A redis-server of the test's own that writes every command to its AOF before it
    answers: stopped and started again, it has every acknowledged write."""
    with RedisServer(["--appendonly", "yes", "--appendfsync", "always"]) as server:
        yield server
