"""The chaos soak (scripts/chaos.py) as a subprocess: worker and reaper SIGKILLs about every
second and two redis-server SIGKILLs, on a redis-server of its own (never port 6379)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from ..support.helpers import ROOT


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize("mode", [[], ["--no-scripting"]], ids=["scripted", "commands"])
def test_chaos_soak_loses_nothing_and_orphans_nothing(mode: list[str]) -> None:
    cmd = [
        sys.executable,
        str(ROOT / "scripts" / "chaos.py"),
        "--messages",
        "3000",
        "--rate",
        "150",
        "--seconds-between-kills",
        "1.0",
        "--json",
        *mode,
    ]
    proc = subprocess.run(cmd, cwd=ROOT, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=230)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stderr[-4000:]}"
    r = json.loads(proc.stdout)
    assert r["lost"] == 0
    assert r["orphaned"] == 0
    assert r["acknowledged"] == 3000 and r["processed"] >= r["acknowledged"]
    assert r["kills"] > 0 and r["worker_kills"] > 0
    assert r["redis_restarts"] == 2
    assert r["delivery_log_entries"] == r["deliveries"]  # every record landed whole (MULTI)
    assert not r["deadline_reached"] and r["ok"] is True
