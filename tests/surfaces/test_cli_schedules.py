"""``keyqueue schedule``: add, ls, rm, pause, resume, fire, and their exit codes."""

from __future__ import annotations

import json

import redis

from keyqueue import Queue

from ..support.helpers import snapshot, stored_schedule
from .test_cli import _both_modes, kq, kq_all, one_error_line

__all__ = ["_both_modes"]  # both modes here too (an autouse fixture)


def test_add_ls_pause_resume_fire_rm(redis_server, r: redis.Redis) -> None:
    url = redis_server.url
    res = kq("schedule", "add", "jobs", "nightly", "--cron", "0 3 * * *", "--tz", "Europe/Berlin", "report", url=url)
    assert res.returncode == 0 and res.stdout.startswith("nightly: next fire 20"), res.stderr
    again = kq("schedule", "add", "jobs", "nightly", "--cron", "0 3 * * *", "--tz", "Europe/Berlin", "report", url=url)
    assert again.stdout == res.stdout  # the same again changes nothing
    assert (
        kq(
            "schedule", "add", "jobs", "tick", "--every", "3600", "--jitter", "5", "--catch-up", "all", url=url
        ).returncode
        == 0
    )
    table, as_json = kq_all(["schedule", "ls", "jobs"], ["schedule", "ls", "jobs", "--json"], url=url)
    lines = table.stdout.splitlines()
    assert lines[0].startswith("nightly  cron 0 3 * * *  tz=Europe/Berlin  next=20") and "fired=0" in lines[0]
    assert lines[1].startswith("tick  every 3600s  tz=UTC")
    objects = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert [o["id"] for o in objects] == ["nightly", "tick"]
    assert objects[0]["body"] == "report" and objects[1]["jitter"] == 5 and objects[1]["catch_up"] == "all"
    assert set(objects[0]) >= {
        "id",
        "cron",
        "every",
        "tz",
        "body",
        "next_fire",
        "last_fire",
        "fired",
        "missed",
        "paused",
    }
    assert kq("schedule", "pause", "jobs", "tick", url=url).returncode == 0
    assert "paused" in kq("schedule", "ls", "jobs", url=url).stdout.splitlines()[1]
    assert kq("schedule", "resume", "jobs", "tick", url=url).returncode == 0
    fired = kq("schedule", "fire", "jobs", "nightly", url=url)
    assert fired.returncode == 0
    (msg,) = Queue("jobs", client=r).peek(5)
    assert msg.id == fired.stdout.strip() and msg.body == b"report" and msg.scheduled_for is not None
    assert kq("schedule", "rm", "jobs", "nightly", url=url).returncode == 0
    assert [s.id for s in Queue("jobs", client=r).schedules()] == ["tick"]


def test_an_unknown_id_is_one_line_and_exit_1(redis_server, r: redis.Redis) -> None:
    Queue("jobs", client=r).enqueue("x")
    results = kq_all(
        *(["schedule", cmd, "jobs", "nope"] for cmd in ("rm", "pause", "resume", "fire")), url=redis_server.url
    )
    for res in results:
        assert one_error_line(res, 1, "Error: "), res.stderr
        assert "nope" in res.stderr


def test_bad_values_are_one_line_and_exit_2(redis_server, r: redis.Redis) -> None:
    Queue("jobs", client=r).enqueue("x")
    before = snapshot(r)
    results = kq_all(
        ["schedule", "add", "jobs", "s", "--cron", "nope"],
        ["schedule", "add", "jobs", "s", "--every", "soon"],
        ["schedule", "add", "jobs", "s", "--every", "0.5"],
        ["schedule", "add", "jobs", "s"],
        ["schedule", "add", "jobs", "s", "--every", "5", "--cron", "* * * * *"],
        ["schedule", "add", "jobs", "s", "--cron", "* * * * *", "--tz", "Mars/Base"],
        ["schedule", "add", "jobs", "s", "--every", "5", "--catch-up", "most"],
        ["schedule", "add", "jobs", "s", "--every", "5", "--jitter", "x"],
        ["schedule", "add", "jobs", "bad id", "--every", "5"],
        url=redis_server.url,
    )
    for res in results:
        assert one_error_line(res, 2, "Error: "), (res.args, res.stderr)
    assert snapshot(r) == before


def test_ten_processes_adding_one_schedule_at_once_write_it_once(redis_server, r: redis.Redis) -> None:
    add = ["schedule", "add", "jobs", "tick", "--every", "60", "--jitter", "1", "hello"]
    results = kq_all(*([*add] for _ in range(10)), url=redis_server.url)
    assert [res.returncode for res in results] == [0] * 10, [res.stderr for res in results]
    assert len({res.stdout for res in results}) == 1  # one next fire, whoever wrote it
    stored = stored_schedule(r, "tick", "jobs")
    assert stored[b"v"] == b"1" and stored[b"b"] == b"hello"  # written once
