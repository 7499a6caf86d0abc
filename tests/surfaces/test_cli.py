"""The keyqueue command line: commands that run and exit at once in the test's process (the
CLI's own ``main()``), those that run for a while, and all that only a process shows, as real
processes."""

from __future__ import annotations

import base64
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from typing import Any, Iterator, Sequence

import pytest
import redis

from keyqueue import Queue
from keyqueue.server import free_port

from ..support.check_support import PROCESSING, item
from ..support.helpers import ROOT, snapshot
from ..support.processes import in_process as run_in_process

MODE: list[str] = []  # ["--no-scripting"] while a test runs in the script-free mode


@pytest.fixture(autouse=True)
def _both_modes(scripting: bool) -> Iterator[None]:
    """Every command in both modes (the queues the tests set up stay scripted: the modes
    share one layout and serve one queue together), except where ``BEFORE_ANY_MODE`` says
    the command is refused before the mode makes any difference."""
    MODE[:] = [] if scripting else ["--no-scripting"]
    yield
    MODE.clear()


#: A test of refusals made before a command reaches the mode's code (click's usage errors,
#: URLs, argument checks of the I/O-free core): it runs in one mode.
BEFORE_ANY_MODE = pytest.mark.parametrize("scripting", [True], ids=["scripted"])


def start(*args: str, url: str | None = None, env: dict | None = None, **popen: Any) -> subprocess.Popen[bytes]:
    """The CLI as a process (SIGINT at its default, whatever the test runner ignores)."""
    full_env = dict(os.environ, PYTHONPATH=str(ROOT), **(env or {}))
    full_env.pop("KEYQUEUE_URL", None)
    if url is not None:
        full_env["KEYQUEUE_URL"] = url
    return subprocess.Popen(
        [sys.executable, "-m", "keyqueue", *MODE, *args],
        cwd=ROOT,
        env=full_env,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        **popen,
    )


def finish(
    proc: subprocess.Popen[bytes], stdin: str | bytes = "", timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    data = stdin.encode() if isinstance(stdin, str) else stdin
    try:
        out, err = proc.communicate(data, timeout=timeout)
    finally:
        proc.kill()
    return subprocess.CompletedProcess(
        proc.args, proc.returncode, (out or b"").decode("utf-8", "replace"), (err or b"").decode("utf-8", "replace")
    )


PIPES = dict(stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


#: Commands that run for a while, start processes or serve: always run as a process.
PROCESS_COMMANDS = {"worker", "reaper", "serve", "demo"}


def in_process(
    args: Sequence[str], url: str | None = None, stdin: str | bytes = "", env: dict | None = None
) -> subprocess.CompletedProcess[str]:
    """The command in this process, in the mode of the test."""
    return run_in_process([*MODE, *args], url, stdin, env)


def kq(
    *args: str,
    url: str | None = None,
    stdin: str | bytes = "",
    env: dict | None = None,
    timeout: float = 60,
    process: bool = False,
) -> subprocess.CompletedProcess[str]:
    """The CLI with these arguments: in this process unless ``process`` or the command is
    one of PROCESS_COMMANDS."""
    if not process and not PROCESS_COMMANDS & set(args):
        return in_process(args, url, stdin, env)
    return finish(start(*args, url=url, env=env, **PIPES), stdin, timeout)


def kq_all(*commands: Sequence[str], url: str | None = None) -> list[subprocess.CompletedProcess[str]]:
    """Several commands, one after another in this process (they only read, or touch
    different things)."""
    return [kq(*args, url=url) for args in commands]


def one_error_line(res: subprocess.CompletedProcess[str], code: int, start: str) -> bool:
    return (
        res.returncode == code
        and res.stderr.startswith(start)
        and res.stderr.count("\n") == 1
        and "Traceback" not in res.stderr
    )


@BEFORE_ANY_MODE
def test_version() -> None:
    from keyqueue import __version__

    res, flag = kq_all(["version"], ["--version"])
    assert res.returncode == 0 and res.stdout.strip() == __version__
    assert flag.returncode == 0 and flag.stdout == f"keyqueue {__version__}\n"


def test_enqueue_len_ls_and_stats(redis_server, r: redis.Redis) -> None:
    url = redis_server.url
    res = kq("enqueue", "jobs", "a", "b", "--delay", "0", url=url)
    assert res.returncode == 0 and res.stdout.split() == ["1", "2"]
    res = kq("enqueue", "jobs", url=url, stdin="line one\nline two\nline three\n")
    assert res.stdout.split() == ["3", "4", "5"]
    assert Queue("jobs", client=r).peek(5)[3].text == "line two"
    kq("enqueue", "later", "x", "--delay", "60", url=url)
    n, names, one_json, every_json, table_text = kq_all(
        ["len", "jobs"], ["ls"], ["stats", "jobs", "--json"], ["stats", "--json"], ["stats"], url=url
    )
    assert n.stdout == "5\n"
    assert names.stdout.split() == ["jobs", "later"]
    one = json.loads(one_json.stdout)
    assert (
        one == {"waiting": 5, "processing": 0, "delayed": 0, "dead": 0, "oldest_age": one["oldest_age"], "held": 0}
        and one["oldest_age"] >= 0
    )
    every = json.loads(every_json.stdout)
    assert every["later"]["delayed"] == 1 and every["jobs"]["waiting"] == 5
    table = table_text.stdout.splitlines()
    assert table[0].split()[:5] == ["queue", "waiting", "processing", "delayed", "dead"]
    assert table[1].split()[:5] == ["jobs", "5", "0", "0", "0"]


def test_a_sharded_queue_is_one_queue_to_the_cli(redis_server, r: redis.Redis) -> None:
    url = redis_server.url
    q = Queue("big", client=r, shards=3)
    q.enqueue_many([f"m{i}" for i in range(9)])
    q.dead_letter(q.claim())
    assert kq("config", "big", "--set", "visibility_timeout=9", url=url).returncode == 0
    assert {r.hget(f"kq:{{big#{i}}}:config", "visibility_timeout") for i in range(3)} == {b"9.0"}
    n, names, one_json, table_text, check = kq_all(
        ["len", "big"], ["ls"], ["stats", "big", "--json", "--shards"], ["stats", "--shards"], ["check", "big"], url=url
    )
    assert n.stdout == "8\n" and names.stdout == "big\n"
    one = json.loads(one_json.stdout)
    assert (one["waiting"], one["dead"]) == (8, 1)
    assert [s["waiting"] for s in one["shards"]] == [s.waiting for s in q.shard_stats()]
    assert sum(s["waiting"] + s["dead"] for s in one["shards"]) == 9
    table = [line.split()[0] for line in table_text.stdout.splitlines()[1:]]
    assert table == ["big", "big#0", "big#1", "big#2"]
    assert check.returncode == 0 and "consistent" in check.stdout
    assert kq("requeue", "big", url=url).stdout.strip() == "requeued 1"
    assert kq("purge", "big", "--yes", url=url).returncode == 0 and len(q) == 0
    assert kq("destroy", "big", "--yes", url=url).returncode == 0
    assert r.keys("kq:{big*") == []


def test_url_option_beats_nothing_and_prefix_separates(redis_server, r: redis.Redis) -> None:
    res = kq("--url", redis_server.url, "--prefix", "app", "enqueue", "q", "x")
    assert res.returncode == 0
    assert kq("--url", redis_server.url, "--prefix", "app", "len", "q").stdout == "1\n"
    res = kq("--url", redis_server.url, "len", "q")
    assert one_error_line(res, 1, "Error: no queue 'q' under prefix 'kq'") and res.stdout == ""


def test_peek_requeue_purge_destroy(redis_server, r: redis.Redis) -> None:
    url = redis_server.url
    q = Queue("jobs", client=r)
    q.enqueue_many(["a", "b", "c", "d"])
    a, b = q.claim_many(2)
    q.dead_letter(a, "broken")
    dead, first = kq_all(["peek", "jobs", "--source", "dead"], ["peek", "jobs", "-n", "1", "--json"], url=url)
    assert dead.stdout.strip() == "1  receives=1  last_error='broken'  a"
    lines = [json.loads(x) for x in first.stdout.splitlines()]
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
    res = kq("requeue", "jobs", "3", "1", "42", "3", "x", url=redis_server.url)
    assert res.stdout.strip() == "requeued 2"  # the found ones are requeued all the same
    assert one_error_line(res, 1, "Error: 2 of 4 ids not among the dead letters of 'jobs': 42 x")
    assert [m.text for m in q.peek()] == ["c", "a"] and [m.id for m in q.peek(source="dead")] == ["2"]


@pytest.mark.timeout(300)  # 27 s on one starved core
def test_long_purge_runs_in_batches_with_progress(redis_server, r: redis.Redis, scripting: bool) -> None:
    q = Queue("big", client=r)
    for _ in range(100):
        q.enqueue_many([b"x" * 20] * 1000)
    r.config_resetstat()
    res = kq("purge", "big", "--yes", url=redis_server.url)
    assert res.returncode == 0 and "purged 100000" in res.stdout
    assert res.stderr == ""  # no progress bar without a terminal
    # at most 500 messages per script call, or per MULTI/EXEC in the script-free mode
    calls = r.info("commandstats")["cmdstat_evalsha" if scripting else "cmdstat_exec"]["calls"]
    assert calls >= 200
    assert q.length() == 0 and r.keys("kq:{big}:item:*") == []


def test_worker_command_burst(redis_server, r: redis.Redis) -> None:
    Queue("q", client=r).enqueue_many(["a", "b", "c"])
    res = kq("worker", "tests.support.handlers:record", "-q", "q", "--burst", url=redis_server.url)
    assert res.returncode == 0, res.stderr
    assert sorted(r.hkeys("test:done")) == [b"1", b"2", b"3"]


# -- errors: one line, the right exit code, nothing lost, no password --------------------


@BEFORE_ANY_MODE
@pytest.mark.parametrize(
    "args, message",
    [
        (["len", "bad name"], "Error: invalid queue name 'bad name'"),
        (["enqueue", "q{x}", "body"], "Error: invalid queue name"),
        (["worker", "no-colon", "-q", "q"], "Error: handler must be MODULE:FUNC"),
        (["worker", "nosuchmodule_xyz:f", "-q", "q"], "Error: cannot import module 'nosuchmodule_xyz'"),
        (
            ["worker", "tests.support.handlers:nothing", "-q", "q"],
            "Error: module 'tests.support.handlers' has no function",
        ),
        (["worker", "tests.support.handlers:record", "-q", "q", "--timeout", "0"], "Error: timeout must be"),
        (["worker", "tests.support.handlers:record", "-q", "q", "--timeout", "nan"], "Error: timeout must be"),
        (  # checked by the supervisor, before it starts any worker process
            ["worker", "tests.support.handlers:record", "-q", "q", "--processes", "2", "--timeout", "-1"],
            "Error: timeout must be",
        ),
    ],
)
def test_bad_input_exits_2_with_one_line(redis_server, args: list[str], message: str) -> None:
    res = kq(*args, url=redis_server.url)
    assert res.returncode == 2
    assert res.stderr.startswith(message) and res.stderr.count("\n") == 1 and "Traceback" not in res.stderr


@BEFORE_ANY_MODE
def test_too_large_body_exits_2_and_enqueues_nothing(redis_server, r: redis.Redis) -> None:
    Queue("q", client=r, max_body_bytes=5)
    res = kq("enqueue", "q", "ok", "far too long", url=redis_server.url)
    assert res.returncode == 2 and res.stderr.startswith("Error: message body of 12 bytes")
    assert Queue("q", client=r).length() == 0


@BEFORE_ANY_MODE
def test_bad_urls(redis_server) -> None:
    # (real processes: a password must reach neither the output nor a log line)
    res = kq("len", "q", url="http://admin:hunter2@localhost:6379/0", process=True)
    assert res.returncode == 2 and res.stderr.startswith("Error: invalid Redis URL")
    assert "hunter2" not in res.stderr + res.stdout
    port = free_port()
    res = kq("--url", f"redis://:sekret@127.0.0.1:{port}/0", "len", "q", process=True)
    assert res.returncode == 1 and res.stderr.startswith("Error: cannot reach Redis")
    assert "sekret" not in res.stderr + res.stdout and res.stderr.count("\n") == 1
    flag, env = kq("--url", "", "len", "q", url=redis_server.url), kq("len", "q", url="")
    assert one_error_line(flag, 2, "Error: --url is empty")
    assert one_error_line(env, 2, "Error: KEYQUEUE_URL is empty")


def test_corrupt_key_exits_1_with_the_key_name(redis_server, r: redis.Redis) -> None:
    r.set("kq:{q}:items", "junk")
    r.sadd("kq:queues", "q")
    res = kq("len", "q", url=redis_server.url)
    assert res.returncode == 1 and res.stderr.strip().startswith("Error: key 'kq:{q}:items'")


@BEFORE_ANY_MODE
def test_click_usage_errors_keep_click_s_form() -> None:
    res = kq("frobnicate")
    assert res.returncode == 2 and "Usage:" in res.stderr and "No such command" in res.stderr
    res = kq("len")
    assert res.returncode == 2 and "Missing argument 'QUEUE'" in res.stderr
    for option in (["--timeout", "soon"], ["--processes", "0"]):
        res = kq("worker", "tests.support.handlers:record", "-q", "q", *option)
        assert res.returncode == 2 and f"Invalid value for '{option[0]}'" in res.stderr
    res = kq("peek", "q", "--source", "nowhere")
    assert res.returncode == 2 and "Invalid value for '--source'" in res.stderr


def test_demo_runs_against_a_given_url(redis_server, r: redis.Redis) -> None:
    res = kq("demo", "-n", "600", url=redis_server.url, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "600 enqueued, 600 processed, 0 lost" in res.stdout and "SIGKILLed worker" in res.stdout
    assert "every message accounted for" in res.stdout
    assert r.keys("kq:{demo}:*") == []


# -- binary input and output -----------------------------------------------------------


def test_stdin_bodies_are_exact_bytes_and_peek_shows_them_safely(redis_server, r: redis.Redis) -> None:
    url = redis_server.url
    res = kq("enqueue", "binq", url=url, stdin=b"one\ntwo\r\n\xff\xfe\n\nlast")
    assert res.returncode == 0 and res.stdout.split() == ["1", "2", "3", "4", "5"] and res.stderr == ""
    res = kq("enqueue", "binq", "-0", url=url, stdin=b"a\nb\0\x1b[31m\0")
    assert res.returncode == 0 and res.stdout.split() == ["6", "7"]
    q = Queue("binq", client=r)
    assert [m.body for m in q.peek(10)] == [b"one", b"two\r", b"\xff\xfe", b"", b"last", b"a\nb", b"\x1b[31m"]
    plain, as_json = kq_all(["peek", "binq"], ["peek", "binq", "--json"], url=url)
    assert plain.returncode == 0 and [line.split("  ", 2)[2:] for line in plain.stdout.splitlines()] == [
        ["one"],
        ["two\\r"],
        ["\\xff\\xfe"],
        [""],
        ["last"],
        ["a\\nb"],
        ["\\x1b[31m"],
    ]
    rows = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert as_json.returncode == 0 and len(rows) == 7 and as_json.stderr == ""
    assert [(x["body"], x["body_base64"]) for x in rows if x["id"] in ("2", "3", "6")] == [
        ("two\r", False),
        (base64.b64encode(b"\xff\xfe").decode(), True),
        ("a\nb", False),
    ]


def test_stdin_is_enqueued_as_it_arrives_and_ctrl_c_exits_130(redis_server, r: redis.Redis) -> None:
    proc = start("enqueue", "stream", url=redis_server.url, **PIPES)
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write(b"first\n")
        proc.stdin.flush()  # stdin stays open: the id must come back before EOF
        # (60 s: things that only have to happen, as everywhere in the suite; 20 s ran out on
        # a host loaded with two test runs)
        ready, _, _ = select.select([proc.stdout], [], [], 60)
        assert ready and proc.stdout.readline() == b"1\n"
        proc.send_signal(signal.SIGINT)
        assert proc.wait(60) == 130
        assert proc.stderr is not None and "Traceback" not in proc.stderr.read().decode()
    finally:
        proc.kill()
        proc.communicate()
    assert [m.text for m in Queue("stream", client=r).peek()] == ["first"]


def test_stdin_body_too_large_stops_there(redis_server, r: redis.Redis) -> None:
    Queue("small", client=r, max_body_bytes=5)
    res = kq("enqueue", "small", url=redis_server.url, stdin="ok\nfine\nfar too long\nlater\n")
    assert res.stdout.split() == ["1", "2"]
    assert one_error_line(res, 2, "Error: message body of 12 bytes (record 3 of standard input)")
    assert [m.text for m in Queue("small", client=r).peek()] == ["ok", "fine"]


def test_progress_only_on_a_terminal(redis_server, r: redis.Redis, scripting: bool) -> None:
    """With stderr on a terminal: a counter for a large stdin, a bar for a long purge (the
    other tests show stderr stays clean without a terminal). The stdin goes in batches."""
    lines = "".join(f"{i}\n" for i in range(1200)).encode()
    r.config_resetstat()
    enqueue_tty, res = _with_tty_stderr("enqueue", "big", url=redis_server.url, stdin=lines)
    assert res.returncode == 0 and len(res.stdout.split()) == 1200
    assert "enqueued" in enqueue_tty and "1200" in enqueue_tty
    calls = r.info("commandstats")["cmdstat_evalsha" if scripting else "cmdstat_exec"]["calls"]
    assert 3 <= calls <= 6  # batches of at most 500
    purge_tty, res = _with_tty_stderr("purge", "big", "--yes", url=redis_server.url)
    assert res.returncode == 0 and "purge waiting" in purge_tty and "100%" in purge_tty


def _with_tty_stderr(*args: str, url: str, stdin: bytes = b"") -> tuple[str, subprocess.CompletedProcess[str]]:
    master, slave = os.openpty()
    chunks: list[bytes] = []

    def drain() -> None:
        while True:
            try:
                data = os.read(master, 4096)
            except OSError:  # EIO: every writer is gone
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        proc = start(*args, url=url, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=slave)
        os.close(slave)
        res = finish(proc, stdin)
        reader.join(10)
    finally:
        os.close(master)
    return b"".join(chunks).decode("utf-8", "replace"), res


# -- typos are not silent --------------------------------------------------------------


def test_unknown_queue_exits_1_naming_the_closest(redis_server, r: redis.Redis) -> None:
    for name in ("emails", "email", "reports"):
        Queue(name, client=r).enqueue("x")
    before = snapshot(r)
    results = kq_all(
        ["len", "emials"],
        ["stats", "emials"],
        ["peek", "emials"],
        ["requeue", "emials"],
        ["purge", "emials", "--yes"],
        ["destroy", "emials", "--yes"],
        ["config", "emials"],
        ["config", "emials", "--set", "max_receives=3"],
        ["check", "emials"],
        ["check", "emials", "--repair"],
        url=redis_server.url,
    )
    for res in results:
        assert one_error_line(res, 1, "Error: no queue 'emials' under prefix 'kq' at redis://"), res.args
        assert res.stderr.endswith("; did you mean 'emails', 'email'?\n") and res.stdout == ""
    assert snapshot(r) == before
    res = kq("--prefix", "other", "len", "emails", url=redis_server.url)
    assert one_error_line(res, 1, "Error: no queue 'emails' under prefix 'other'")


# -- config --------------------------------------------------------------------------------


def test_config_shows_and_sets_the_settings(redis_server, r: redis.Redis) -> None:
    url = redis_server.url
    Queue("jobs", client=r, max_body_bytes=1000)
    text, as_json = kq_all(["config", "jobs"], ["config", "jobs", "--json"], url=url)
    assert text.stdout.split() == [
        "visibility_timeout",
        "30",
        "max_receives",
        "none",
        "bucket_seconds",
        "60",
        "max_body_bytes",
        "1000",
        "dedup_window",
        "300",
        "retention",
        "none",
        "dead_retention",
        "none",
        "rate_limit",
        "none",
        "max_in_flight",
        "none",
        "group_concurrency",
        "1",
    ]
    assert json.loads(as_json.stdout) == {
        "visibility_timeout": 30,
        "max_receives": None,
        "bucket_seconds": 60,
        "max_body_bytes": 1000,
        "dedup_window": 300,
        "retention": None,
        "dead_retention": None,
        "rate_limit": None,
        "max_in_flight": None,
        "group_concurrency": 1,
    }
    res = kq("config", "jobs", "--set", "visibility_timeout=60", "--set", "max_receives=5", "--json", url=url)
    assert res.returncode == 0 and json.loads(res.stdout)["max_receives"] == 5
    s = Queue("jobs", client=r).settings
    assert (s.visibility_timeout, s.max_receives, s.max_body_bytes) == (60, 5, 1000)
    before = snapshot(r)
    bad = kq_all(
        *[
            ["config", "jobs", "--set", "dedup_window=1", "--set", arg]
            for arg in (
                "visibilty_timeout=5",
                "max_receives=lots",
                "visibility_timeout=-1",
                "max_receives",
                "max_receives=0",
                "bucket_seconds=nan",
            )
        ],
        url=url,
    )
    for res, start_ in zip(
        bad,
        [
            "Error: unknown setting 'visibilty_timeout': did you mean 'visibility_timeout'?",
            "Error: max_receives must be a whole number",
            "Error: visibility_timeout must be",
            "Error: --set takes NAME=VALUE",
            "Error: max_receives must be",
            "Error: bucket_seconds must be",
        ],
    ):
        assert one_error_line(res, 2, start_), res.stderr
    assert snapshot(r) == before  # nothing written, not even the good dedup_window
    res = kq("config", "jobs", "--set", "max_receives=none", url=url)
    assert res.returncode == 0 and "max_receives none" in " ".join(res.stdout.split())
    assert Queue("jobs", client=r).settings.max_receives is None


def refused_writing_nothing(r: redis.Redis, url: str, cases: dict[str, str]) -> None:
    """Each ``--set`` of ``cases`` (beside a good one): one error line as given, exit 2, and
    nothing written, not even the good setting."""
    before = snapshot(r)
    bad = kq_all(*[["config", "jobs", "--set", "visibility_timeout=5", "--set", arg] for arg in cases], url=url)
    for res, start_ in zip(bad, cases.values()):
        assert one_error_line(res, 2, start_), res.stderr
    assert snapshot(r) == before


def test_config_sets_and_removes_a_retention(redis_server, r: redis.Redis) -> None:
    url = redis_server.url
    Queue("jobs", client=r).enqueue("x")
    res = kq("config", "jobs", "--set", "retention=3600", "--set", "dead_retention=86400.5", "--json", url=url)
    assert res.returncode == 0
    shown = json.loads(res.stdout)
    assert (shown["retention"], shown["dead_retention"]) == (3600, 86400.5)
    assert r.hmget("kq:{jobs}:config", "retention", "dead_retention") == [b"3600.0", b"86400.5"]
    assert Queue("jobs", client=r).settings.retention == 3600
    cases = {
        "retention=soon": "Error: retention must be a number of seconds",
        "retention=0": "Error: retention must be",
        "retention=-5": "Error: retention must be",
        "dead_retention=inf": "Error: dead_retention must be",
        "retention=nan": "Error: retention must be",
        "retention=400000000": "Error: retention must be",  # more than 10 years
    }
    refused_writing_nothing(r, url, cases)
    res = kq("config", "jobs", "--set", "retention=", url=url)  # empty: kept for ever again
    assert res.returncode == 0 and "retention none" in " ".join(res.stdout.split())
    assert r.hget("kq:{jobs}:config", "retention") == b""
    assert Queue("jobs", client=r).settings.retention is None


def test_config_sets_and_removes_flow_limits(redis_server, r: redis.Redis) -> None:
    url = redis_server.url
    q = Queue("jobs", client=r)
    q.enqueue_many(["a", "b", "c"])
    res = kq("config", "jobs", "--set", "rate_limit=20/1", "--set", "max_in_flight=3", "--json", url=url)
    assert res.returncode == 0, res.stderr
    shown = json.loads(res.stdout)
    assert (shown["rate_limit"], shown["max_in_flight"]) == ("20/1", 3)
    assert r.hmget("kq:{jobs}:config", "rate_limit", "max_in_flight") == [b"20/1", b"3"]
    assert q.rate_state().limit == 20  # a Queue made before reads it at its next claim
    cases = {
        "rate_limit=0/1": "Error: rate_limit must be",
        "rate_limit=5/0": "Error: rate_limit must be",
        "rate_limit=x": "Error: rate_limit must be",
        "rate_limit=-1/1": "Error: rate_limit must be",
        "rate_limit=5": "Error: rate_limit must be",
        "max_in_flight=0": "Error: max_in_flight must be",
        "max_in_flight=-2": "Error: max_in_flight must be",
        "max_in_flight=many": "Error: max_in_flight must be",
    }
    refused_writing_nothing(r, url, cases)
    res = kq("config", "jobs", "--set", "rate_limit=", "--set", "max_in_flight=none", url=url)
    assert res.returncode == 0 and "rate_limit none" in " ".join(res.stdout.split())
    assert r.hmget("kq:{jobs}:config", "rate_limit", "max_in_flight") == [b"", b""]
    assert q.rate_state().limit is None and len(q.claim_many(3)) == 3


# -- the decorator and the CLI agree ----------------------------------------------------


def test_worker_runs_a_decorated_worker_with_its_options(redis_server, r: redis.Redis) -> None:
    DONE = "test:cli-done"  # tests.support.cli_handlers.DONE (importing it would connect at import)
    Queue("decorated", client=r).enqueue_many(["ok", "fail"])
    Queue("other", client=r).enqueue("ok")
    env = {"KQ_TEST_URL": redis_server.url}  # the decorated Queue's own url; no --url given
    plain = start("worker", "tests.support.cli_handlers:plain", "--burst", env=env, **PIPES)
    before = time.time()
    res = kq("worker", "tests.support.cli_handlers:send", "--burst", env=env)
    after = time.time()
    assert res.returncode == 0, res.stderr
    assert "worker tests.support.cli_handlers:send on decorated at redis://127.0.0.1:" in res.stderr
    assert "concurrency 3" in res.stderr and "does not exist yet" not in res.stderr
    assert 40 < float(r.hget(DONE, "decorated:1")) <= 50  # its visibility_timeout=50 (the default is 30)
    failed = Queue("decorated", client=r).peek(source="delayed")
    assert [m.id for m in failed] == ["2"] and failed[0].deadline is not None
    # its retry_backoff=40: failed (and delayed by 40 s) while the process ran
    assert before + 40 - 0.01 <= failed[0].deadline <= after + 40
    # options given on the command line win; -q names the queues (a typo gets one warning)
    res = kq(
        "worker",
        "tests.support.cli_handlers:send",
        "--burst",
        "-q",
        "other",
        "-q",
        "decoratd",
        "-c",
        "2",
        "--visibility-timeout",
        "20",
        "--timeout",
        "9",
        env=env,
    )
    assert res.returncode == 0, res.stderr
    assert "on other, decoratd at" in res.stderr and "concurrency 2" in res.stderr
    assert "retry_backoff=40 " in res.stderr and " timeout=9\n" in res.stderr  # merged
    warnings = [line for line in res.stderr.splitlines() if "does not exist yet" in line]
    assert len(warnings) == 1 and "WARNING" in warnings[0]
    assert "queue 'decoratd' does not exist yet under prefix 'kq'" in warnings[0]
    assert "did you mean 'decorated'?" in warnings[0]
    assert 10 < float(r.hget(DONE, "other:1")) <= 20  # --visibility-timeout 20 (the default is 30)
    res = finish(plain)
    assert res.returncode == 2 and "Missing option '-q' / '--queue'" in res.stderr


# -- keyqueue check: the fsck (Queue.check: contract/test_check.py) ------------------------


def test_check_exit_codes_and_repair(redis_server, r: redis.Redis) -> None:
    url = redis_server.url
    q = Queue("q", client=r)
    q.enqueue_many(["a", "b"])
    ok = kq("--url", url, "check", "q")
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.strip().endswith("0 problems, 0 notes: consistent")

    r.sadd(PROCESSING, "1")
    bad = kq("--url", url, "check", "q")  # the default 1 s second look: still there
    assert bad.returncode == 1
    assert bad.stdout.splitlines()[0].startswith("owned-and-waiting: 1 -- ")
    assert "INCONSISTENT" in bad.stdout and bad.stderr.startswith("Error: ")

    as_json = json.loads(kq("--url", url, "check", "q", "--json", "--settle", "0").stdout)
    assert as_json["consistent"] is False
    assert as_json["problems"] == [
        {
            "kind": "owned-and-waiting",
            "ids": ["1"],
            "count": 1,
            "detail": as_json["problems"][0]["detail"],
            "repaired": False,
        }
    ]

    fixed = kq("--url", url, "check", "q", "--repair", "--settle", "0")
    assert fixed.returncode == 0, fixed.stderr
    assert "[repaired]" in fixed.stdout and fixed.stdout.strip().endswith("consistent")
    assert kq("--url", url, "check", "q").returncode == 0
    assert [m.id for m in q.claim_many(10)] == ["1", "2"]


@BEFORE_ANY_MODE
def test_check_bad_input_and_passwords(redis_server, no_scripting_url: str, r: redis.Redis) -> None:
    q = Queue("q", client=r)
    res = kq("--url", redis_server.url, "check", "no/such name")
    assert res.returncode == 2 and res.stderr.startswith("Error: invalid queue name")
    assert kq("--url", redis_server.url, "check", "q", "--settle", "-1").returncode == 2
    q.enqueue("a")
    r.set(item("9"), "x")
    res = kq("--url", no_scripting_url, "check", "q", "--repair", "--json", process=True)
    assert res.returncode == 1 and json.loads(res.stdout)["problems"][0]["kind"] == "wrong-type"
    assert "s3cret-pw" not in res.stdout + res.stderr


def test_message_groups_in_config_stats_len_and_peek(redis_server, r: redis.Redis, scripting: bool) -> None:
    url = redis_server.url
    q = Queue("jobs", client=r)
    ids = q.enqueue_many(["a", "b", "c"], group="g")
    res = kq("config", "jobs", "--set", "group_concurrency=2", "--json", url=url)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["group_concurrency"] == 2
    assert r.hget("kq:{jobs}:config", "group_concurrency") == b"2"
    refused_writing_nothing(
        r,
        url,
        {
            "group_concurrency=0": "Error: group_concurrency must be",
            "group_concurrency=x": "Error: group_concurrency must be",
            "group_concurrency=": "Error: group_concurrency must be",
        },
    )
    assert kq("len", "jobs", url=url).stdout.strip() == "3"  # the held ones wait too
    # The raise to 2 released the group's second message at once (a script-free client,
    # which serves no grouped queue, leaves that to the group's next end).
    still = ids[2:] if scripting else ids[1:]
    stats = json.loads(kq("stats", "jobs", "--json", url=url).stdout)
    assert (stats["waiting"], stats["held"]) == (3, len(still))
    table = kq("stats", "jobs", url=url).stdout.splitlines()
    assert table[0].split()[-1] == "held" and table[1].split()[-1] == str(len(still))
    held = [json.loads(line) for line in kq("peek", "jobs", "--source", "held", "--json", url=url).stdout.splitlines()]
    assert [(m["id"], m["group"]) for m in held] == [(i, "g") for i in still]
    assert "group=g" in kq("peek", "jobs", "--source", "held", url=url).stdout


def test_check_exits_0_on_a_consistent_grouped_queue(redis_server, r: redis.Redis) -> None:
    q = Queue("q", client=r, group_concurrency=2)
    q.enqueue_many(["a", "b", "c"], group="g")
    q.enqueue("later", group="g", delay=60)
    assert q.claim() is not None
    res = kq("--url", redis_server.url, "check", "q", "--settle", "0")
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.strip().endswith("0 problems, 0 notes: consistent")
    r.hset("kq:{q}:groups", "g", 9)
    bad = kq("--url", redis_server.url, "check", "q", "--settle", "0")
    assert bad.returncode == 1 and bad.stdout.startswith("group-count: g -- ")
