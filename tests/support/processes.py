"""``keyqueue`` processes as the tests start them: the repository on PYTHONPATH (so they
import the handler modules of tests/support/ by name), stderr to a log file each; and the
commands that run and exit at once, run in the test's own process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Sequence

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


def in_process(
    args: Sequence[str], url: str | None = None, stdin: str | bytes = "", env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """A command that runs and exits at once, in this process: the CLI's own ``main()``
    under click's stand-ins for stdin, stdout, stderr and the environment, as a pipe would
    see them. Saves an interpreter start a call (a second or more on a busy machine); what
    only a process shows (signals, terminals, the entry point, logging set-up) is tested
    with real processes."""
    from click.testing import CliRunner

    from keyqueue.cli import main

    data = stdin.encode() if isinstance(stdin, str) else stdin
    environ: dict[str, str | None] = {"KEYQUEUE_URL": url, **(env or {})}
    with CliRunner().isolation(input=data, env=environ) as (out, err, _):
        try:
            main(list(args))
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        stdout, stderr = out.getvalue(), err.getvalue()
    return subprocess.CompletedProcess(
        ["keyqueue", *args], code, stdout.decode("utf-8", "replace"), stderr.decode("utf-8", "replace")
    )
