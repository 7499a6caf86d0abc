"""The script-free mode on a server whose ACL denies scripting (EVAL, EVALSHA, FUNCTION, SCRIPT)."""

from __future__ import annotations

import subprocess
from typing import Iterator

import pytest
import redis
from redis.exceptions import NoPermissionError

from keyqueue import Queue, Worker
from keyqueue.server import RedisServer

from ..support.helpers import wait_until
from ..support.processes import in_process

PASSWORD = "s3cret-pw"


@pytest.fixture
def no_scripts_url(redis_server: RedisServer, r: redis.Redis) -> Iterator[str]:
    r.acl_setuser(
        "noscript",
        enabled=True,
        passwords=[f"+{PASSWORD}"],
        keys=["*"],
        channels=["*"],
        commands=["+@all", "-@scripting"],
    )
    yield f"redis://noscript:{PASSWORD}@127.0.0.1:{redis_server.port}/0"
    r.acl_deluser("noscript")


def test_the_acl_really_denies_scripts(no_scripts_url: str) -> None:
    client = redis.Redis.from_url(no_scripts_url)
    for cmd in (
        ("EVAL", "return 1", 0),
        ("EVALSHA", "0" * 40, 0),
        ("FUNCTION", "LIST"),
        ("SCRIPT", "LOAD", "return 1"),
    ):
        with pytest.raises(NoPermissionError):
            client.execute_command(*cmd)
    with pytest.raises(NoPermissionError, match="use the script-free mode"):
        Queue("q", url=no_scripts_url).enqueue("x")  # the scripted mode cannot work here: says why


def test_every_operation_works_without_scripts(no_scripts_url: str, r: redis.Redis) -> None:
    r.config_resetstat()
    q = Queue("q", url=no_scripts_url, scripting=False, visibility_timeout=1, bucket_seconds=1, max_receives=2)
    ids = q.enqueue_many(["a", "b", "c"])
    assert q.enqueue("d", dedup_key="k") == q.enqueue("d again", dedup_key="k")
    q.enqueue("later", delay=0.2)
    first = q.claim()
    assert first is not None and first.text == "a" and first.ack()
    two = q.claim_many(2)
    assert [m.text for m in two] == ["b", "c"]
    assert q.extend(two[0], 5) and q.release(two[1], error="retry") and two[1].ack() is False
    assert q.dead_letter(two[0], "bad") and q.peek(source="dead")[0].last_error == "bad"
    assert q.requeue() == 1
    assert q.claim_many(10, visibility_timeout=0.1)
    wait_until(lambda: q.reap().total >= 1, timeout=5)
    stats = q.stats()  # b, c, d and "later" are all still somewhere
    assert stats.waiting + stats.processing + stats.delayed + stats.dead == 4
    assert q.peek(10) and q.purge(source="all") == 4 and q.stats().waiting == 0
    assert ids == ["1", "2", "3"]
    scripts = r.info("commandstats")
    assert not any(k in scripts for k in ("cmdstat_eval", "cmdstat_evalsha"))


def test_worker_and_cli_without_scripts(no_scripts_url: str) -> None:
    q = Queue("jobs", url=no_scripts_url, scripting=False)
    q.enqueue_many([str(i) for i in range(200)])
    seen: list[str] = []
    Worker(q, lambda m: seen.append(m.text), concurrency=2).run(burst=True)
    assert sorted(seen, key=int) == [str(i) for i in range(200)]

    def kq(*args: str) -> subprocess.CompletedProcess[str]:
        return in_process(["--url", no_scripts_url, "--no-scripting", *args])

    assert kq("enqueue", "jobs", "x", "y").returncode == 0
    res = kq("len", "jobs")
    assert res.returncode == 0 and res.stdout.strip() == "2"
    res = kq("stats", "jobs", "--json")
    assert res.returncode == 0 and '"waiting": 2' in res.stdout
    assert PASSWORD not in res.stdout + res.stderr
    res = kq("purge", "jobs", "--yes")
    assert res.returncode == 0 and q.length() == 0
