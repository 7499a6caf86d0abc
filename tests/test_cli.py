"""The keyqueue command line, run as a real subprocess for every command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest
import redis

from keyqueue import Queue
from keyqueue.server import free_port

ROOT = Path(__file__).resolve().parents[1]
MODE: list[str] = []  # ["--no-scripting"] while a test runs in the script-free mode


@pytest.fixture(autouse=True)
def _both_modes(scripting: bool) -> Iterator[None]:
    """Every command in both modes (the queues the tests set up stay scripted: the modes
    share one layout and serve one queue together)."""
    MODE[:] = [] if scripting else ["--no-scripting"]
    yield
    MODE.clear()


def kq(*args: str, url: str | None = None, stdin: str = "", env: dict | None = None,
       timeout: float = 60) -> subprocess.CompletedProcess[str]:
    full_env = dict(os.environ, PYTHONPATH=str(ROOT), **(env or {}))
    full_env.pop("KEYQUEUE_URL", None)
    if url is not None:
        full_env["KEYQUEUE_URL"] = url
    return subprocess.run([sys.executable, "-m", "keyqueue", *MODE, *args], input=stdin, text=True,
                          capture_output=True, cwd=ROOT, env=full_env, timeout=timeout)


def test_version() -> None:
    from keyqueue import __version__

    res = kq("version")
    assert res.returncode == 0 and res.stdout.strip() == __version__


def test_enqueue_len_ls_and_stats(redis_server, r: redis.Redis) -> None:
    url = redis_server.url
    res = kq("enqueue", "jobs", "a", "b", "--delay", "0", url=url)
    assert res.returncode == 0 and res.stdout.split() == ["1", "2"]
    res = kq("enqueue", "jobs", url=url, stdin="line one\nline two\nline three\n")
    assert res.stdout.split() == ["3", "4", "5"]
    assert Queue("jobs", client=r).peek(5)[3].text == "line two"
    kq("enqueue", "later", "x", "--delay", "60", url=url)
    assert kq("len", "jobs", url=url).stdout == "5\n"
    assert kq("ls", url=url).stdout.split() == ["jobs", "later"]
    one = json.loads(kq("stats", "jobs", "--json", url=url).stdout)
    assert one == {"waiting": 5, "processing": 0, "delayed": 0, "dead": 0,
                   "oldest_age": one["oldest_age"]} and one["oldest_age"] >= 0
    every = json.loads(kq("stats", "--json", url=url).stdout)
    assert every["later"]["delayed"] == 1 and every["jobs"]["waiting"] == 5
    table = kq("stats", url=url).stdout.splitlines()
    assert table[0].split()[:5] == ["queue", "waiting", "processing", "delayed", "dead"]
    assert table[1].split()[:5] == ["jobs", "5", "0", "0", "0"]


def test_url_option_beats_nothing_and_prefix_separates(redis_server, r: redis.Redis) -> None:
    res = kq("--url", redis_server.url, "--prefix", "app", "enqueue", "q", "x")
    assert res.returncode == 0
    assert kq("--url", redis_server.url, "--prefix", "app", "len", "q").stdout == "1\n"
    assert kq("--url", redis_server.url, "len", "q").stdout == "0\n"


def test_peek_requeue_purge_destroy(redis_server, r: redis.Redis) -> None:
    url = redis_server.url
    q = Queue("jobs", client=r)
    q.enqueue_many(["a", "b", "c", "d"])
    a, b = q.claim_many(2)
    q.dead_letter(a, "broken")
    out = kq("peek", "jobs", "--source", "dead", url=url).stdout
    assert out.strip() == "1  receives=1  last_error='broken'  a"
    lines = [json.loads(x) for x in kq("peek", "jobs", "-n", "1", "--json", url=url).stdout.splitlines()]
    assert [(x["id"], x["body"]) for x in lines] == [("3", "c")]
    assert kq("requeue", "jobs", url=url).stdout.strip() == "requeued 1"
    assert kq("requeue", "jobs", "--source", "processing", url=url).stdout.strip() == "requeued 1"
    assert b.ack() is False
    assert [m.text for m in q.peek()] == ["c", "d", "a", "b"]
    res = kq("purge", "jobs", url=url, stdin="n\n")
    assert res.returncode == 1 and "Delete 4 waiting messages of 'jobs'" in res.stdout
    assert q.length() == 4
    res = kq("purge", "jobs", url=url, stdin="y\n")
    assert res.returncode == 0 and "purged 4" in res.stdout and q.length() == 0
    q.enqueue("x")
    assert kq("destroy", "jobs", url=url, stdin="n\n").returncode == 1 and q.length() == 1
    res = kq("destroy", "jobs", "--yes", url=url)
    assert res.returncode == 0 and r.keys("kq:{jobs}:*") == [] and kq("ls", url=url).stdout == ""


def test_requeue_by_id(redis_server, r: redis.Redis) -> None:
    q = Queue("jobs", client=r)
    q.enqueue_many(["a", "b", "c"])
    for m in q.claim_many(3):
        q.dead_letter(m)
    res = kq("requeue", "jobs", "3", "1", "42", url=redis_server.url)
    assert res.returncode == 0 and res.stdout.strip() == "requeued 2"
    assert [m.text for m in q.peek()] == ["c", "a"] and [m.id for m in q.peek(source="dead")] == ["2"]


def test_long_purge_runs_in_batches_with_progress(redis_server, r: redis.Redis, scripting: bool) -> None:
    q = Queue("big", client=r)
    for _ in range(100):
        q.enqueue_many([b"x" * 20] * 1000)
    r.config_resetstat()
    res = kq("purge", "big", "--yes", url=redis_server.url)
    assert res.returncode == 0 and "purged 100000" in res.stdout
    assert "purge waiting" in res.stderr  # the progress bar
    # at most 500 messages per script call, or per MULTI/EXEC in the script-free mode
    calls = r.info("commandstats")["cmdstat_evalsha" if scripting else "cmdstat_exec"]["calls"]
    assert calls >= 200
    assert q.length() == 0 and r.keys("kq:{big}:item:*") == []


def test_worker_command_burst(redis_server, r: redis.Redis) -> None:
    Queue("q", client=r).enqueue_many(["a", "b", "c"])
    res = kq("worker", "tests.handlers:record", "-q", "q", "--burst", url=redis_server.url)
    assert res.returncode == 0, res.stderr
    assert sorted(r.hkeys("test:done")) == [b"1", b"2", b"3"]


# -- errors: one line, the right exit code, nothing lost, no password --------------------


@pytest.mark.parametrize("args, message", [
    (["len", "bad name"], "Error: invalid queue name 'bad name'"),
    (["enqueue", "q{x}", "body"], "Error: invalid queue name"),
    (["worker", "no-colon", "-q", "q"], "Error: handler must be MODULE:FUNC"),
    (["worker", "nosuchmodule_xyz:f", "-q", "q"], "Error: cannot import module 'nosuchmodule_xyz'"),
    (["worker", "tests.handlers:nothing", "-q", "q"], "Error: module 'tests.handlers' has no function"),
])
def test_bad_input_exits_2_with_one_line(redis_server, args: list[str], message: str) -> None:
    res = kq(*args, url=redis_server.url)
    assert res.returncode == 2
    assert res.stderr.startswith(message) and res.stderr.count("\n") == 1 and "Traceback" not in res.stderr


def test_too_large_body_exits_2_and_enqueues_nothing(redis_server, r: redis.Redis) -> None:
    Queue("q", client=r, max_body_bytes=5)
    res = kq("enqueue", "q", "ok", "far too long", url=redis_server.url)
    assert res.returncode == 2 and res.stderr.startswith("Error: message body of 12 bytes")
    assert Queue("q", client=r).length() == 0


def test_bad_urls(redis_server) -> None:
    res = kq("len", "q", url="http://admin:hunter2@localhost:6379/0")
    assert res.returncode == 2 and res.stderr.startswith("Error: invalid Redis URL")
    assert "hunter2" not in res.stderr + res.stdout
    port = free_port()
    res = kq("--url", f"redis://:sekret@127.0.0.1:{port}/0", "len", "q")
    assert res.returncode == 1 and res.stderr.startswith("Error: cannot reach Redis")
    assert "sekret" not in res.stderr + res.stdout and res.stderr.count("\n") == 1


def test_corrupt_key_exits_1_with_the_key_name(redis_server, r: redis.Redis) -> None:
    r.set("kq:{q}:items", "junk")
    res = kq("len", "q", url=redis_server.url)
    assert res.returncode == 1 and res.stderr.strip().startswith("Error: key 'kq:{q}:items'")


def test_click_usage_errors_keep_click_s_form() -> None:
    res = kq("frobnicate")
    assert res.returncode == 2 and "Usage:" in res.stderr and "No such command" in res.stderr
    res = kq("len")
    assert res.returncode == 2 and "Missing argument 'QUEUE'" in res.stderr
    res = kq("peek", "q", "--source", "nowhere")
    assert res.returncode == 2 and "Invalid value for '--source'" in res.stderr


def test_demo_runs_against_a_given_url(redis_server, r: redis.Redis) -> None:
    res = kq("demo", "-n", "600", url=redis_server.url, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "600 enqueued, 600 processed, 0 lost" in res.stdout and "SIGKILLed worker" in res.stdout
    assert "every message accounted for" in res.stdout
    assert r.keys("kq:{demo}:*") == []
