"""The documentation's examples (examples/), run as a user runs them: each file a process of
its own against a test redis-server named by KEYQUEUE_URL, within a deadline, exiting 0 and
printing what the pages say it prints. Also: the pages show every example through a snippet
(so a page cannot drift from its file), every Python or configuration block of the pages is
such a snippet, the README's Python blocks are parts of examples, and the systemd and
supervisord examples start a real worker with their own command lines.

examples/spark/ runs in tests/surfaces/test_spark.py; examples/prometheus/ is checked against a real
/metrics in tests/surfaces/test_web_prometheus_examples.py."""

from __future__ import annotations

import configparser
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest
import redis

from keyqueue import Queue
from keyqueue.cli.group import EXIT_REFUSED
from keyqueue.server import RedisServer, free_port

from ..support.helpers import ROOT, wait_until

EXAMPLES = ROOT / "examples"
DOCS = ROOT / "docs"
BIN = Path(sys.executable).parent
#: Seconds one example may take (each takes about a second; the reaper example 3).
DEADLINE = 30
SQS_KEYS = {
    "KEYQUEUE_SQS_ACCESS_KEY_ID": "AKIAEXAMPLEKEYQUEUE",
    "KEYQUEUE_SQS_SECRET_ACCESS_KEY": "docs-example-secret",
}

#: Every runnable example but examples/spark/, in runs: a run's files go in order on one
#: freshly flushed server, each with the patterns its output must match (re.search, MULTILINE).
RUNS: dict[str, list[tuple[str, list[str]]]] = {
    "quickstart-sync": [
        (
            "quickstart/sync_producer.py",
            [r"^1\n\['2', '3'\]\nTrue\n", r"^QueueStats\(waiting=4, processing=0, delayed=1, dead=0, "],
        ),
        (
            "quickstart/sync_consumer.py",
            [
                r"^sending to ada@example.com\nsending to bob@example.com\n"
                r"sending to cy@example.com\nsending to dee@example.com\n",
                r"^QueueStats\(waiting=0, processing=0, delayed=1, dead=0, oldest_age=None, held=0\)",
            ],
        ),
    ],
    "quickstart-async": [
        ("quickstart/async_app.py", [r"\A\{'queued': '1'\}\n\{'queued': '1'\}\n\Z"]),  # the retry deduplicated
        ("quickstart/async_worker.py", [r"\Asent to ada@example.com\n\Z"]),
    ],
    # (the worker's threads print at once: one pattern a line, in any order)
    "sync-worker": [
        (
            "workers/sync_worker.py",
            [r"delivered to ada@example.com", r"delivered to bob@example.com", r"delivered to cy@example.com"],
        )
    ],
    "settle-yourself": [
        (
            "workers/settle_yourself.py",
            [r"done: resize a.png", r"done: transcode b.mov", r"^dead letter 3 unknown kind 'shred'$"],
        )
    ],
    "async-signals": [("workers/async_signals.py", [r"^sent one$", r"^sent two$"])],
    "schedules": [
        (
            "schedules/periodic.py",
            [
                r"\Aheartbeat every 1s UTC active\nnightly 0 3 \* \* \* Europe/Berlin active\n",
                r"^ping made for a fire time\nTrue nightly report\n\Z",
            ],
        ),
        (
            "schedules/fire_times.py",
            [
                r"\A2026-03-29T03:00:00\+02:00\n2026-03-30T02:30:00\+02:00\n"
                r"2026-10-25T02:00:00\+02:00\n2026-10-25T02:30:00\+02:00\n2026-10-26T02:00:00\+01:00\n\Z"
            ],
        ),
    ],
    "groups": [
        (
            "groups/per_customer.py",
            [
                r"\A6 waiting, 3 of them held behind their group\n"
                r"customer-1 active 1 held 2\ncustomer-2 active 1 held 1\n"
                r"\['None: newsletter', 'customer-1: open', 'customer-2: open'\]\n"
                r"customer-1 \['deposit 100', 'withdraw 30'\]\ncustomer-2 \['deposit 5'\]\n\[\] 0\n\Z"
            ],
        )
    ],
    # (the worker's threads print at once: one pattern a line, in any order)
    "flow": [
        (
            "flow/rate_limited_worker.py",
            [
                r"\A3 claimed of 10 asked; 3 in flight\n",
                *(rf"^sent mail {i}$" for i in range(3, 8)),
                r"^0 waiting, 0 dead; 5 claims per 1.0 s\nclaims held back: True\n\Z",
            ],
        )
    ],
    "sharding": [
        (
            "sharding/sharded_queue.py",
            [
                r"\A1 6\n1 shard for one key\n6 shards adopted\n",
                r"^QueueStats\(waiting=15, processing=0, delayed=0, dead=0, ",
                r"^\[2, 2, 2, 2, 2, 5\]\nTrue\n14 handled; 0 waiting\n\Z",
            ],
        )
    ],
    "reaper": [("workers/reaper.py", [r"^QueueStats\(waiting=1, processing=0, delayed=0, dead=0, "])],
    "shared-pool": [("deployment/shared_pool.py", [r"^500 messages enqueued by 500 tasks over 20 connections$"])],
    "dashboard-mount": [("dashboard/mount.py", [r"\A\{'redis': 'ok'\}\n401\n\[\]\n\Z"])],
    "sqs": [
        (
            "sqs/boto3_client.py",
            [r"^http://127.0.0.1:\d+/000000000000/emails$", r'^\{"to": "a@example.com"\} welcome$', r"^from boto3 1$"],
        ),
        (
            "sqs/fifo_queue.py",
            [
                r"\Aa1 (\d{20})\nb1 (\d{20})\na2 (\d{20})\na2 \3\n",
                r"^\[\('alice', 'a1'\), \('bob', 'b1'\)\]\n\[\('alice', 'a2'\)\]\nalice a3\n\Z",
            ],
        ),
    ],
}
#: Extra environment of a run (beyond KEYQUEUE_URL).
ENV = {"dashboard-mount": {"KQ_TOKEN": "docs-example-token"}, "sqs": SQS_KEYS}


def example_files() -> set[str]:
    return {str(p.relative_to(EXAMPLES)) for p in EXAMPLES.rglob("*") if p.is_file() and "__pycache__" not in p.parts}


def test_every_python_example_is_run() -> None:
    python = {name for name in example_files() if name.endswith(".py") and not name.startswith("spark/")}
    listed = [name for run in RUNS.values() for name, _ in run]
    assert sorted(listed) == sorted(python), "examples/ and RUNS differ"


def run_example(name: str, url: str, env: dict[str, str]) -> str:
    """The example as a user runs it: its own process, the repository as its directory."""
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / name)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        env={**os.environ, **env, "KEYQUEUE_URL": url},
    )
    assert done.returncode == 0, f"{name} exited {done.returncode}:\n{done.stderr[-3000:]}"
    return done.stdout


@pytest.fixture
def sqs_endpoint(redis_server: RedisServer) -> Iterator[str]:
    """``keyqueue serve --sqs`` on the test server, as the SQS page starts it."""
    port = free_port()
    proc = subprocess.Popen(
        [
            str(BIN / "keyqueue"),
            "--url",
            redis_server.url,
            "serve",
            "--sqs",
            "--port",
            str(port),
            "--log-level",
            "warning",
        ],
        env={**os.environ, **SQS_KEYS},
    )

    def answers() -> bool:
        assert proc.poll() is None, f"keyqueue serve --sqs exited with {proc.returncode}"
        try:
            redis.Redis(port=redis_server.port).ping()
            import httpx

            return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200
        except Exception:
            return False

    try:
        wait_until(answers, 30, 0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.mark.parametrize("run", list(RUNS))
def test_the_examples_run_and_print_what_the_docs_say(
    run: str, redis_server: RedisServer, r: redis.Redis, request: pytest.FixtureRequest
) -> None:
    env = dict(ENV.get(run, {}))
    if run == "sqs":
        env["SQS_ENDPOINT"] = request.getfixturevalue("sqs_endpoint")
    for name, patterns in RUNS[run]:
        out = run_example(name, redis_server.url, env)
        for pattern in patterns:
            assert re.search(pattern, out, re.MULTILINE), f"{name} printed:\n{out}\nwhich does not match {pattern!r}"


def snippets(text: str) -> list[str]:
    """The files a page includes (``--8<-- "examples/x.py"`` or ``"examples/x.py:section"``)."""
    return [m.group(1).split(":")[0] for m in re.finditer(r'^\s*--8<-- "([^"]+)"', text, re.MULTILINE)]


def fenced_blocks(text: str) -> Iterator[tuple[str, str]]:
    """(language, body) of every fenced code block."""
    for m in re.finditer(r"^([ \t]*)```(\w*)[^\n]*\n(.*?)^\1```", text, re.MULTILINE | re.DOTALL):
        yield m.group(2), m.group(3)


def test_every_example_is_shown_by_a_page_and_every_code_block_is_a_file() -> None:
    pages = {p: p.read_text() for p in DOCS.rglob("*.md")}
    shown = {name for text in pages.values() for name in snippets(text)}
    assert all((ROOT / name).is_file() for name in shown), shown
    missing = {f"examples/{name}" for name in example_files()} - shown
    assert not missing, f"examples no page shows: {sorted(missing)}"
    for page, text in pages.items():
        for language, body in fenced_blocks(text):
            if language in {"python", "py", "ini", "yaml", "toml"}:
                lines = [line for line in body.splitlines() if line.strip()]
                assert lines and all(line.strip().startswith("--8<--") for line in lines), (
                    f"{page.relative_to(ROOT)}: a {language} block that is not an example file:\n{body}"
                )


def test_the_readme_python_blocks_are_parts_of_examples() -> None:
    readme = (ROOT / "README.md").read_text()
    examples = [p.read_text() for p in EXAMPLES.rglob("*.py")]
    blocks = [body for language, body in fenced_blocks(readme) if language == "python"]
    assert blocks, "the README shows no Python"
    for body in blocks:
        assert any(body in text for text in examples), f"a README block that is in no example:\n{body}"


def worker_command(line: str, url: str) -> list[str]:
    """An example's ``keyqueue worker ...`` command line, run here: this venv's keyqueue, and
    --burst so that it drains the queue and exits."""
    argv = shlex.split(line)
    assert Path(argv[0]).name == "keyqueue" and argv[1] == "worker", line
    return [str(BIN / "keyqueue"), "--url", url, *argv[1:], "--burst"]


def grace(argv: list[str]) -> float:
    return float(argv[argv.index("--grace") + 1])


def run_worker_command(argv: list[str], tmp_path: Path, r: redis.Redis) -> None:
    """Run the command on a stand-in app.tasks:send, which records what it handled."""
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "__init__.py").write_text("")
    (tmp_path / "app" / "tasks.py").write_text(  # one write a line: the worker's threads print at once
        "import sys\n\n\ndef send(message):\n    sys.stdout.write(f'handled {message.text}\\n')\n"
    )
    q = Queue("emails", client=r)
    q.enqueue_many(["one", "two"])
    done = subprocess.run(
        argv,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert sorted(re.findall(r"^handled (\w+)$", done.stdout, re.MULTILINE)) == ["one", "two"], done.stdout
    assert q.stats().waiting == 0


def test_the_systemd_unit_runs_a_worker_and_outwaits_its_grace(
    redis_server: RedisServer, r: redis.Redis, tmp_path: Path
) -> None:
    unit = configparser.ConfigParser(interpolation=None)
    unit.optionxform = str  # systemd keys are case-sensitive
    unit.read(EXAMPLES / "systemd" / "keyqueue-worker.service")
    service = unit["Service"]
    assert service["KillSignal"] == "SIGTERM" and service["Restart"] == "always" and float(service["RestartSec"]) > 0
    assert service["RestartPreventExitStatus"] == str(EXIT_REFUSED)  # a refusal by Redis: not restarted
    assert "network-online.target" in unit["Unit"]["After"].split() and unit["Unit"]["Wants"] == "network-online.target"
    assert "redis-server.service" in unit["Unit"]["After"].split()
    # a supervisor of several processes, which alone gets the SIGTERM and passes it on once
    assert "--processes" in shlex.split(service["ExecStart"]) and service["KillMode"] == "mixed"
    assert service["Environment"].startswith("KEYQUEUE_URL=redis://")
    argv = worker_command(service["ExecStart"], redis_server.url)
    assert float(service["TimeoutStopSec"]) > grace(argv)  # systemd must not SIGKILL a worker finishing
    run_worker_command(argv, tmp_path, r)


def test_the_supervisord_program_runs_a_worker_and_outwaits_its_grace(
    redis_server: RedisServer, r: redis.Redis, tmp_path: Path
) -> None:
    conf = configparser.ConfigParser(interpolation=None)
    conf.read(EXAMPLES / "supervisord" / "keyqueue-worker.conf")
    program = conf["program:keyqueue-worker"]
    assert program["stopsignal"] == "TERM" and program["autorestart"] == "unexpected"
    assert "78" in program["exitcodes"].split(",")  # a refusal by Redis is not restarted
    assert program["environment"].startswith('KEYQUEUE_URL="redis://')
    argv = worker_command(program["command"], redis_server.url)
    assert float(program["stopwaitsecs"]) > grace(argv)
    run_worker_command(argv, tmp_path, r)
