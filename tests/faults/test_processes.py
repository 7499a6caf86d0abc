"""Real `keyqueue worker` and `keyqueue reaper` processes: signals, SIGKILL, Redis restarts.
The worker's tests run it on a plain handler (keyqueue.Worker, threads) and on an ``async
def`` one (keyqueue.aio.Worker, asyncio): the ``kind`` fixture."""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

import pytest
import redis

from keyqueue import Queue
from keyqueue.server import RedisServer

from ..support.aio_handlers import WHERE
from ..support.handlers import DONE, PIDS, STARTED
from ..support.helpers import wait_until
from ..support.processes import Procs

#: A Redis user the tests' servers know from their start (``RedisServer(APP_USER)``).
SECRET = "s3kr1t-pw"
APP_USER = ["--user", "app", "on", f">{SECRET}", "~*", "&*", "+@all"]
#: A record of the CLI's log format: time, level, logger name, message.
RECORD = re.compile(r"\d{4}-\d\d-\d\d [\d:,]+ ([A-Z]+) ([\w.]+): (.*)")


#: The handler modules of each kind of worker: `keyqueue worker` runs a plain function with
#: keyqueue.Worker (threads), an ``async def`` one with keyqueue.aio.Worker.
HANDLERS = {"threads": "tests.support.handlers", "asyncio": "tests.support.aio_handlers"}


@pytest.fixture(params=sorted(HANDLERS))
def kind(request: pytest.FixtureRequest) -> str:
    """The module of the worker's handlers (each has ``slow``): threads, then asyncio."""
    return HANDLERS[request.param]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_lets_the_handler_finish_and_exits_0(
    redis_server, r: redis.Redis, procs, sig, scripting: bool, kind: str
) -> None:
    q = Queue("q", client=r, scripting=scripting)
    q.enqueue("1.0")  # the handler sleeps 1 s
    q.enqueue_many(["0"] * 5)
    p = procs.worker(redis_server.url, f"{kind}:slow", "-c", "1", "--grace", "10")
    wait_until(lambda: r.llen(STARTED) >= 1)
    p.send_signal(sig)
    assert p.wait(15) == 0, procs.log(p)
    assert r.hget(DONE, "1") == b"1"  # the in-flight handler finished and was acked
    s = q.stats()
    assert s.processing == 0 and s.waiting + r.hlen(DONE) == 6
    assert f"{sig.name}: stopping" in procs.log(p)
    last = procs.log(p).strip().splitlines()[-1]  # the last line says it drained and stopped
    assert f"worker stopped: {r.hlen(DONE)} messages processed, 0 failed, nothing left held" in last, last


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["SIGINT", "SIGTERM"])
def test_second_signal_releases_held_messages_at_once(
    redis_server, r: redis.Redis, procs, scripting: bool, sig: signal.Signals, code: int, kind: str
) -> None:
    q = Queue("q", client=r, scripting=scripting, visibility_timeout=60)
    q.enqueue_many(["30", "30"])
    p = procs.worker(redis_server.url, f"{kind}:slow", "-c", "2", "--grace", "60")
    wait_until(lambda: r.llen(STARTED) == 2)
    p.send_signal(sig)
    wait_until(lambda: f"{sig.name}: stopping" in procs.log(p))  # two signals at once would merge
    p.send_signal(sig)
    assert p.wait(10) == code
    # Back in waiting at once, not after their 60 s deadline; nothing was done twice.
    s = q.stats()
    assert (s.waiting, s.processing) == (2, 0) and r.hlen(DONE) == 0
    assert f"second {sig.name}: releasing every held message now" in procs.log(p)


def test_an_async_handler_that_ignores_its_cancellation_does_not_keep_the_worker_past_its_grace(
    redis_server, r: redis.Redis, procs, scripting: bool
) -> None:
    q = Queue("q", client=r, scripting=scripting, visibility_timeout=120)
    q.enqueue("120")  # it would run two minutes, deaf to cancellation
    p = procs.worker(redis_server.url, "tests.support.aio_handlers:deaf", "-c", "1", "--grace", "1")
    wait_until(lambda: r.llen(STARTED) == 1)
    p.send_signal(signal.SIGTERM)
    assert p.wait(30) == 0, procs.log(p)
    assert "went on after their cancellation: the worker exits without them" in procs.log(p)
    assert "destroyed but it is pending" not in procs.log(p)
    s = q.stats()
    assert (s.waiting, s.processing) == (1, 0) and r.hlen(DONE) == 0  # released at the grace's end


def test_handler_system_exit_fails_its_message_and_stops_the_worker(
    redis_server, r: redis.Redis, procs, scripting: bool
) -> None:
    q = Queue("q", client=r, scripting=scripting)
    q.enqueue("1.0")
    p = procs.worker(redis_server.url, "exits", "-c", "2")
    # "exit" only once the slow handler has started: a message claimed but not started when
    # the worker stops goes back to the queue unstarted, by design
    wait_until(lambda: r.llen(STARTED) >= 1)
    q.enqueue("exit")
    assert p.wait(15) == 3  # the handler's exit code
    assert r.hget(DONE, "1") == b"1"  # the in-flight handler finished within the grace period
    (m,) = q.peek(source="delayed")  # released with backoff, its error kept
    assert m.id == "2" and m.receives == 1 and m.last_error == "SystemExit: 3"
    s = q.stats()
    assert s.processing == 0 and s.waiting == 0
    log = procs.log(p)
    assert "handler raised SystemExit(3) on queue=q id=2; stopping" in log
    assert "grace period over" not in log and "Traceback" not in log


def test_worker_logs_its_settings_at_start(redis_server, r: redis.Redis, procs, scripting: bool) -> None:
    Queue("q", client=r, scripting=scripting, visibility_timeout=7, max_receives=3)
    p = procs.worker(redis_server.url, "record", "-c", "2", "--burst")
    assert p.wait(15) == 0
    log = procs.log(p)
    assert "worker options: concurrency=2 retry_backoff=1 grace_period=30 heartbeat=on" in log
    assert "queue=q priority=1 visibility_timeout=7 max_receives=3 bucket_seconds=60" in log


def test_sigkilled_worker_loses_nothing(redis_server, r: redis.Redis, procs, scripting: bool, kind: str) -> None:
    q = Queue("q", client=r, scripting=scripting, visibility_timeout=1, bucket_seconds=1)
    q.enqueue_many(["0.05"] * 40)
    victim = procs.worker(redis_server.url, f"{kind}:slow", "-c", "4")
    wait_until(lambda: r.llen(STARTED) >= 6)
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    assert q.stats().processing > 0  # it died holding messages
    rescuer = procs.worker(redis_server.url, f"{kind}:slow", "-c", "4")
    wait_until(lambda: r.hlen(DONE) == 40 and q.stats().processing == 0, timeout=30)
    rescuer.send_signal(signal.SIGTERM)
    assert rescuer.wait(15) == 0
    assert q.stats().waiting == 0


def test_reaper_process_redelivers_and_stops_on_sigterm(redis_server, r: redis.Redis, procs, scripting: bool) -> None:
    q = Queue("q", client=r, scripting=scripting, bucket_seconds=1)
    q.enqueue("x")
    q.enqueue("later", delay=0.5)
    assert q.claim(visibility_timeout=0.5) is not None
    p = procs.spawn(redis_server.url, "reaper", "--interval", "0.2")
    wait_until(lambda: q.length() == 2)
    p.send_signal(signal.SIGTERM)
    assert p.wait(60) == 0
    assert sorted(m.text for m in q.peek()) == ["later", "x"]
    last = procs.log(p).strip().splitlines()[-1]  # what the run did, for an operator after SIGTERM
    assert "reaper stopped after" in last and "requeued=1 dead_lettered=0 delayed_released=1 expired=0" in last


def test_an_idle_reaper_process_logs_nothing_per_pass(redis_server, r: redis.Redis, procs, scripting: bool) -> None:
    Queue("q", client=r, scripting=scripting).enqueue("x")  # a registered queue to reap
    # (passes far apart enough that none overruns the next on a busy machine: APScheduler
    # would warn that it skipped one)
    p = procs.spawn(redis_server.url, "reaper", "--interval", "0.2", "--log-level", "debug")
    wait_until(lambda: "pass 10 over 1 queues" in procs.log(p))  # its per-pass lines are DEBUG
    lines = procs.log(p).splitlines()
    p.send_signal(signal.SIGTERM)
    assert p.wait(10) == 0
    records = [m.groups() for m in map(RECORD.match, lines) if m]  # (level, logger, message)
    assert not [rec for rec in records if rec[1].startswith("apscheduler")]  # not even at debug level
    above_debug = [rec for rec in records if rec[0] != "DEBUG"]
    assert len(above_debug) == 1 and above_debug[0][2].startswith("reaping every queue")


# -- handler time limits and the supervisor (--processes) ----------------------------------

#: These run in one mode: the modes' release and dead letter paths are the contract suite's,
#: and the supervisor never talks to Redis.
ONE_MODE = pytest.mark.parametrize("scripting", [True], ids=["scripted"])


@ONE_MODE
def test_a_handler_past_the_timeout(redis_server, r: redis.Redis, procs, scripting: bool, kind: str) -> None:
    """Its delivery is failed either way; the asyncio worker cancels it and goes on, the
    thread worker's one thread (-c 1) is stuck: it exits 3, for its supervisor to restart."""
    q = Queue("q", client=r, scripting=scripting, visibility_timeout=60)
    q.enqueue("30")
    p = procs.worker(redis_server.url, f"{kind}:slow", "-c", "1", "--timeout", "1")
    wait_until(lambda: q.stats().delayed == 1, timeout=20)
    (m,) = q.peek(source="delayed")
    assert (m.last_error or "").startswith("HandlerTimeout") and m.receives == 1
    if kind == HANDLERS["threads"]:
        assert p.wait(15) == 3, procs.log(p)
        assert "all 1 threads are stuck in handlers past their timeout" in procs.log(p)
    else:
        q.enqueue("0")  # served on by the same lane
        wait_until(lambda: r.hget(DONE, "2") == b"1")
        p.send_signal(signal.SIGTERM)
        assert p.wait(15) == 0, procs.log(p)
    assert q.stats().processing == 0 and r.hget(DONE, "1") is None


def children(procs: Procs, p) -> list[int]:  # type: ignore[no-untyped-def]
    """The pids of the worker processes the supervisor ``p`` started, in order."""
    return [int(pid) for pid in re.findall(r"started worker process (\d+)", procs.log(p))]


def up(procs: Procs, p, gone: tuple[int, ...] = ()) -> list[int]:  # type: ignore[no-untyped-def]
    """Wait until the children of ``p`` but ``gone`` (2 of them) serve: they logged their options."""

    def serving() -> list[int]:
        pids = [pid for pid in children(procs, p) if pid not in gone]
        log = procs.log(p)
        return pids if len(pids) == 2 and all(f"worker[{pid}]: worker options" in log for pid in pids) else []

    return wait_until(serving, timeout=20)


@ONE_MODE
def test_processes_replaces_a_killed_child_and_drains_on_sigterm(
    redis_server, r: redis.Redis, procs, scripting: bool
) -> None:
    q = Queue("q", client=r, scripting=scripting, visibility_timeout=2, bucket_seconds=1)
    p = procs.worker(redis_server.url, "in_process", "-c", "2", "--processes", "2", "--grace", "20")
    first = up(procs, p)
    q.enqueue_many(["1.5"] * 4)
    wait_until(lambda: r.llen(STARTED) >= 1)
    victim = int(r.hget(PIDS, r.lindex(STARTED, 0)))  # a child holding a message
    os.kill(victim, signal.SIGKILL)
    killed = time.monotonic()
    wait_until(lambda: len(children(procs, p)) == 3)
    assert time.monotonic() - killed < 4 + 16  # (about 4 s, with a margin for a starved machine)
    assert f"worker process {victim} was killed by SIGKILL: starting another" in procs.log(p)
    now = up(procs, p, gone=(victim,))
    # what the victim held comes back after its visibility timeout; the others drain
    wait_until(lambda: r.hlen(DONE) == 4 and q.stats().processing == 0, timeout=30)
    q.enqueue_many(["1.5"] * 2)
    wait_until(lambda: {b"5", b"6"} <= set(r.lrange(STARTED, 0, -1)))
    p.send_signal(signal.SIGTERM)
    assert p.wait(30) == 0, procs.log(p)
    assert r.hlen(DONE) == 6 and q.stats().processing == q.stats().waiting == 0  # each drained
    assert {int(pid) for pid in r.hvals(PIDS)} <= set(first) | set(now)  # none ran in the supervisor
    log = procs.log(p)
    assert log.count("SIGTERM: stopping") == 2, log  # passed on to each child once
    last = log.strip().splitlines()[-1]
    assert "supervisor stopped: all 2 worker processes drained and exited 0; exit 0" in last, last
    for pid in now:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


@ONE_MODE
def test_processes_second_sigint_releases_and_exits_130(redis_server, r: redis.Redis, procs, scripting: bool) -> None:
    q = Queue("q", client=r, scripting=scripting, visibility_timeout=60)
    p = procs.worker(redis_server.url, "slow", "-c", "1", "--processes", "2", "--grace", "60")
    up(procs, p)
    q.enqueue_many(["30", "30"])
    wait_until(lambda: r.llen(STARTED) == 2, timeout=20)  # one in each process (-c 1)
    p.send_signal(signal.SIGINT)
    wait_until(lambda: procs.log(p).count("SIGINT: stopping") == 2)  # two signals at once would merge
    p.send_signal(signal.SIGINT)
    assert p.wait(15) == 130, procs.log(p)
    s = q.stats()
    assert (s.waiting, s.processing) == (2, 0) and r.hlen(DONE) == 0  # released at once
    assert procs.log(p).count("second SIGINT: releasing every held message now") == 2


@ONE_MODE
def test_processes_with_burst_exit_0_once_every_child_found_the_queues_empty(
    redis_server, r: redis.Redis, procs, scripting: bool
) -> None:
    q = Queue("q", client=r, scripting=scripting)
    q.enqueue_many(["0.01"] * 20)
    p = procs.worker(redis_server.url, "in_process", "-c", "2", "--processes", "2", "--burst")
    assert p.wait(30) == 0, procs.log(p)
    assert r.hlen(DONE) == 20 and q.stats().processing == q.stats().waiting == 0
    assert len(children(procs, p)) == 2  # finished children are not replaced
    assert procs.log(p).count("finished (exit 0)") == 2


@ONE_MODE
def test_processes_replaces_a_stuck_child(redis_server, r: redis.Redis, procs, scripting: bool) -> None:
    """A child whose every thread is stuck past --timeout exits 3; the supervisor starts
    another in its place, which serves, and the whole still drains on SIGTERM."""
    q = Queue("q", client=r, scripting=scripting, visibility_timeout=60, max_receives=1)
    p = procs.worker(redis_server.url, "in_process", "-c", "1", "--processes", "2", "--timeout", "1", "--grace", "20")
    up(procs, p)
    q.enqueue("30")  # its handler sleeps far past the timeout
    wait_until(lambda: r.hget(PIDS, "1") is not None, timeout=20)
    stuck = int(r.hget(PIDS, "1"))
    wait_until(lambda: f"worker process {stuck} exited with 3: starting another" in procs.log(p), timeout=30)
    assert "all 1 threads are stuck in handlers past their timeout" in procs.log(p)
    now = up(procs, p, gone=(stuck,))
    assert len(children(procs, p)) == 3 and stuck not in now and ended(stuck) and p.poll() is None
    (m,) = q.peek(source="dead")  # its delivery failed (max_receives=1: dead at once)
    assert m.id == "1" and (m.last_error or "").startswith("HandlerTimeout")
    q.enqueue_many(["0.2"] * 6)
    wait_until(lambda: all(r.hget(DONE, str(i)) == b"1" for i in range(2, 8)), timeout=30)
    assert {int(r.hget(PIDS, str(i))) for i in range(2, 8)} <= set(now)  # served by the living children
    p.send_signal(signal.SIGTERM)
    assert p.wait(30) == 0, procs.log(p)
    assert r.hget(DONE, "1") is None and q.stats().processing == q.stats().waiting == 0


def ended(pid: int) -> bool:
    """The process is gone (or a zombie nobody reaps yet: it ended)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1].startswith("Z")
    except (FileNotFoundError, ProcessLookupError):
        return True


@ONE_MODE
def test_processes_children_stop_when_the_supervisor_is_killed(
    redis_server, r: redis.Redis, procs, scripting: bool
) -> None:
    q = Queue("q", client=r, scripting=scripting, visibility_timeout=60)
    p = procs.worker(redis_server.url, "slow", "-c", "1", "--processes", "2", "--grace", "30")
    kids = up(procs, p)
    q.enqueue("1")
    wait_until(lambda: r.llen(STARTED) == 1)
    p.kill()
    p.wait()
    wait_until(lambda: all(ended(pid) for pid in kids), timeout=20)  # no orphan works on
    assert procs.log(p).count("the supervisor (pid") == 2
    assert r.hget(DONE, "1") == b"1" and q.stats().processing == 0  # drained as on SIGTERM


# -- `keyqueue worker` on an async def handler ---------------------------------------------


def test_the_cli_runs_an_async_handler_with_the_async_worker(
    redis_server: RedisServer, r: redis.Redis, procs: Procs
) -> None:
    Queue("q", client=r).enqueue_many(["a", "b", "c"])
    p = procs.spawn(redis_server.url, "worker", "tests.support.aio_handlers:where", "-q", "q", "--burst")
    assert p.wait(20) == 0, procs.log(p)
    assert r.hlen(DONE) == 3 and Queue("q", client=r).stats().processing == 0
    assert set(r.hvals(WHERE)) == {b"MainThread True"}  # awaited on the main thread's loop
    assert "worker options: concurrency=10 " in procs.log(p)  # aio.Worker's default


def test_the_cli_runs_a_decorated_async_worker_with_its_options(
    redis_server: RedisServer, r: redis.Redis, procs: Procs
) -> None:
    q = Queue("adecorated", client=r)
    q.enqueue_many(["ok", "fail"])
    before = time.time()
    p = procs.spawn(redis_server.url, "worker", "tests.support.aio_handlers:decorated", "--burst")
    p.wait(20)
    after = time.time()
    log = procs.log(p)
    assert p.returncode == 0, log
    assert "worker tests.support.aio_handlers:decorated on adecorated at" in log and "concurrency 4" in log
    (failed,) = q.peek(source="delayed")
    assert failed.deadline is not None and before + 40 - 0.01 <= failed.deadline <= after + 40  # retry_backoff=40
    assert r.hlen(DONE) == 1


# -- Redis stopped and restarted under running workers and reapers -------------------------


def test_worker_and_reaper_survive_a_redis_restart(durable: RedisServer, procs, scripting: bool) -> None:
    r = redis.Redis(port=durable.port)
    try:
        q = Queue("q", client=r, scripting=scripting, visibility_timeout=2, bucket_seconds=1)
        q.enqueue_many(["0.01"] * 300)
        w = procs.worker(durable.url, "slow", "-c", "2")
        reaper = procs.spawn(durable.url, "reaper", "q", "--interval", "0.5")
        wait_until(lambda: r.hlen(DONE) >= 50)
        durable.stop()  # SIGTERM: Redis shuts down cleanly, the AOF has every write
        time.sleep(1.5)
        assert w.poll() is None and reaper.poll() is None, "a process died with Redis"
        durable.start()
        wait_until(lambda: r.hlen(DONE) == 300 and q.stats().processing == 0, timeout=60)
        assert q.stats().waiting == 0
        for p in (w, reaper):
            p.send_signal(signal.SIGTERM)
            assert p.wait(15) == 0
        assert "retrying" in procs.log(w)  # it noticed the outage and backed off
    finally:
        r.close()


@pytest.mark.parametrize(
    "handler", ["tests.support.handlers:record", "tests.support.aio_handlers:slow"], ids=["threads", "asyncio"]
)
def test_worker_and_reaper_started_before_redis_wait_for_it(
    tmp_path: Path, procs, scripting: bool, handler: str
) -> None:
    """Redis still down when they start (slow at boot): both back off (0.1 s doubling to
    5 s, one WARNING line a wait, the URL's password never shown), neither exits, and once
    Redis is up the worker serves its queue and the reaper reaps another. SIGTERM then ends
    the worker with a line saying it stopped with nothing held."""
    server = RedisServer(["--appendonly", "no", *APP_USER])
    url = f"redis://app:{SECRET}@127.0.0.1:{server.port}/0"
    w = procs.spawn(url, "worker", handler, "-q", "q")
    reaper = procs.spawn(url, "reaper", "--interval", "0.5")  # every queue: "r" too
    wait_until(lambda: "retrying in 1.6s" in procs.log(w) and "retrying in 1.6s" in procs.log(reaper), 60)
    assert w.poll() is None and reaper.poll() is None
    with server:
        r = redis.Redis(port=server.port)
        q = Queue("q", client=r, scripting=scripting)
        q.enqueue_many(["0"] * 5)
        other = Queue("r", client=r, scripting=scripting)  # no worker serves it: only the reaper
        other.enqueue("x")
        assert other.claim(visibility_timeout=0.5) is not None
        wait_until(lambda: r.hlen(DONE) == 5 and q.stats().processing == 0 and other.length() == 1, timeout=60)
        for p in (w, reaper):
            p.send_signal(signal.SIGTERM)
            assert p.wait(15) == 0
        last = procs.log(w).strip().splitlines()[-1]
        assert "worker stopped: 5 messages processed, 0 failed, nothing left held" in last, last
        r.close()
    for p in (w, reaper):
        log = procs.log(p)
        waits = [float(x) for x in re.findall(r"retrying in ([\d.]+)s", log)]
        assert waits[:5] == [0.1, 0.2, 0.4, 0.8, 1.6] and all(x == min(0.1 * 2**i, 5.0) for i, x in enumerate(waits))
        retries = [m for m in map(RECORD.match, log.splitlines()) if m and "retrying in" in m.group(3)]
        assert len(retries) == len(waits) and {m.group(1) for m in retries} == {"WARNING"}
        assert SECRET not in log and "Traceback" not in log


@ONE_MODE
def test_processes_started_before_redis_wait_for_it(tmp_path: Path, procs, scripting: bool) -> None:
    """The supervisor and its children alike: no child exits (none is replaced), and they
    serve once Redis is up."""
    server = RedisServer(["--appendonly", "no"])
    p = procs.worker(server.url, "in_process", "--processes", "2")
    wait_until(lambda: procs.log(p).count("retrying in 0.8s") == 2, 60)  # each child backs off
    assert p.poll() is None and len(children(procs, p)) == 2
    with server:
        r = redis.Redis(port=server.port)
        q = Queue("q", client=r, scripting=scripting)
        q.enqueue_many(["0"] * 20)
        wait_until(lambda: r.hlen(DONE) == 20 and q.stats().processing == 0, timeout=60)
        p.send_signal(signal.SIGTERM)
        assert p.wait(30) == 0, procs.log(p)
        r.close()
    assert len(children(procs, p)) == 2 and "starting another" not in procs.log(p)


@pytest.mark.parametrize(
    "command",
    [
        ["worker", "tests.support.handlers:record", "-q", "q"],
        ["worker", "tests.support.aio_handlers:slow", "-q", "q"],
        ["worker", "tests.support.handlers:record", "-q", "q", "--processes", "2"],
        ["reaper"],
    ],
    ids=["threads", "asyncio", "processes", "reaper"],
)
def test_a_refusal_by_redis_fails_at_once_with_one_line(
    redis_server, r: redis.Redis, procs, scripting: bool, command: list[str]
) -> None:
    """A wrong password, or a user the ACL denies the queue's keys, is configuration no wait
    fixes: one Error line per process and exit 78 (not replaced by the supervisor), where an
    unreachable Redis is waited for."""
    r.acl_setuser("app", enabled=True, passwords=[f"+{SECRET}"], keys=["other:*"], commands=["+@all"])
    Queue("q", client=r, scripting=scripting).enqueue("x")
    try:
        for user, why in (("app:wrong-pw", "refused the credentials"), (f"app:{SECRET}", "refused this user")):
            p = procs.spawn(f"redis://{user}@127.0.0.1:{redis_server.port}/0", *command)
            assert p.wait(60) == 78, procs.log(p)
            log = procs.log(p)
            errors = [line for line in log.splitlines() if line.startswith("Error:")]
            assert errors and all(line.startswith(f"Error: Redis {why}: ") for line in errors), log
            assert len(errors) <= (2 if "--processes" in command else 1), log
            assert "retrying" not in log and "Traceback" not in log and "wrong-pw" not in log and SECRET not in log
        assert Queue("q", client=r, scripting=scripting).length() == 1
    finally:
        r.acl_deluser("app")
