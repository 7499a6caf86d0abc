"""``keyqueue`` processes as the tests start them: the repository on PYTHONPATH (so they
import the handler modules of tests/support/ by name), stderr to a log file each."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from .helpers import ROOT


class Procs:
    """Starts keyqueue processes (stderr to a log file each) and kills leftovers at the end."""

    def __init__(self, tmp: Path, scripting: bool = True) -> None:
        self.tmp = tmp
        self.mode = [] if scripting else ["--no-scripting"]
        self.started: list[subprocess.Popen[bytes]] = []
        self.logs: dict[int, Path] = {}

    def spawn(self, url: str, *args: str) -> subprocess.Popen[bytes]:
        env = dict(os.environ, KEYQUEUE_URL=url, PYTHONPATH=str(ROOT))
        log = self.tmp / f"proc{len(self.started)}.log"
        with open(log, "wb") as err:
            p = subprocess.Popen(
                [sys.executable, "-m", "keyqueue", *self.mode, *args],
                cwd=ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err,
            )
        self.started.append(p)
        self.logs[p.pid] = log
        return p

    def worker(self, url: str, handler: str, *extra: str) -> subprocess.Popen[bytes]:
        """``keyqueue worker`` on queue "q"; ``handler``: a function of tests.support.handlers,
        or ``module:function``."""
        spec = handler if ":" in handler else f"tests.support.handlers:{handler}"
        return self.spawn(url, "worker", spec, "-q", "q", *extra)

    def log(self, p: subprocess.Popen[bytes]) -> str:
        return self.logs[p.pid].read_text()
