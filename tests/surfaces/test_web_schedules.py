"""The dashboard's schedules: GET /api/queues/NAME/schedules, the queue page's table and its
pause, resume and fire-now forms (CSRF, read-only)."""

from __future__ import annotations

import httpx
import redis

from keyqueue import Queue

from .test_web_api import csrf_of, servers, web

__all__ = ["servers", "web"]  # the fixtures of the web API tests


def two(r: redis.Redis) -> Queue:
    q = Queue("jobs", client=r)
    q.schedule("nightly", cron="0 3 * * *", tz="Europe/Berlin", body="report")
    q.schedule("tick", every=3600, body=b"\xff")
    assert q.pause_schedule("tick")
    return q


def test_api_lists_the_schedules_with_their_fields(web: httpx.Client, r: redis.Redis) -> None:
    q = two(r)
    got = web.get("/api/queues/jobs/schedules")
    assert got.status_code == 200
    rows = got.json()
    assert [row["id"] for row in rows] == ["nightly", "tick"]
    fields = {"id", "cron", "every", "tz", "body", "next_fire", "last_fire", "fired", "missed", "paused"}
    assert fields <= set(rows[0])
    nightly, tick = q.schedules()
    assert rows[0]["cron"] == "0 3 * * *" and rows[0]["tz"] == "Europe/Berlin" and rows[0]["body"] == "report"
    assert rows[0]["next_fire"] == nightly.next_fire and rows[0]["paused"] is False
    assert rows[1]["every"] == 3600 and rows[1]["paused"] is True and rows[1]["body_base64"] == "/w=="
    assert web.get("/api/queues/nope/schedules").status_code == 404
    Queue("empty", client=r).enqueue("x")
    assert web.get("/api/queues/empty/schedules").json() == []


def test_the_queue_page_pauses_resumes_and_fires(web: httpx.Client, r: redis.Redis) -> None:
    q = two(r)
    page = web.get("/queues/jobs")
    assert page.status_code == 200
    assert 'data-schedule="nightly"' in page.text and "0 3 * * *" in page.text and "Europe/Berlin" in page.text
    assert "/schedules/nightly/pause" in page.text and "/schedules/tick/resume" in page.text
    csrf = csrf_of(page.text)
    assert web.post("/queues/jobs/schedules/nightly/pause", data={}).status_code == 403
    assert web.post("/queues/jobs/schedules/nightly/pause", data={"csrf": "0" * 64}).status_code == 403
    assert not q.schedules()[0].paused
    done = web.post("/queues/jobs/schedules/nightly/pause", data={"csrf": csrf})
    assert done.status_code == 303 and "Paused schedule nightly." in web.get(done.headers["location"]).text
    assert q.schedules()[0].paused
    done = web.post("/queues/jobs/schedules/tick/resume", data={"csrf": csrf})
    assert "Resumed schedule tick." in web.get(done.headers["location"]).text and not q.schedules()[1].paused
    done = web.post("/queues/jobs/schedules/nightly/fire", data={"csrf": csrf})
    (msg,) = q.peek(5)
    assert f"Fired schedule nightly: message {msg.id}." in web.get(done.headers["location"]).text
    assert msg.body == b"report" and msg.scheduled_for is not None
    gone = web.post("/queues/jobs/schedules/nope/fire", data={"csrf": csrf})
    assert "There is no schedule nope (any more)" in web.get(gone.headers["location"]).text
    assert web.post("/queues/jobs/schedules/tick/delete", data={"csrf": csrf}).status_code == 400
    assert web.get("/queues/jobs/schedules/tick/pause").status_code == 405


def test_read_only_lists_schedules_and_refuses_their_actions(servers, r: redis.Redis) -> None:  # type: ignore[no-untyped-def]
    q = two(r)
    with httpx.Client(base_url=servers["ro"].url, timeout=20) as c:
        page = c.get("/queues/jobs")
        assert 'data-schedule="nightly"' in page.text and "/schedules/nightly/" not in page.text
        for action in ("pause", "resume", "fire"):
            got = c.post(f"/queues/jobs/schedules/nightly/{action}", data={})
            assert got.status_code == 403 and "--read-only" in got.text
    assert not q.schedules()[0].paused and q.peek(5) == []


def test_the_refreshed_part_of_the_queue_page_holds_the_schedules(web: httpx.Client, r: redis.Redis) -> None:
    q = two(r)
    part = web.get("/partials/queues/jobs")
    assert part.status_code == 200
    assert 'data-schedule="nightly"' in part.text and "/schedules/tick/resume" in part.text
    assert q.resume_schedule("tick") and q.pause_schedule("nightly")
    part = web.get("/partials/queues/jobs")
    assert "/schedules/tick/pause" in part.text and "/schedules/nightly/resume" in part.text
    assert "/schedules/nightly/pause" not in part.text
    assert q.unschedule("nightly") and q.unschedule("tick")
    assert 'id="schedules"' not in web.get("/partials/queues/jobs").text
