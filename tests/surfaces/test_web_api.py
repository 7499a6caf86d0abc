"""keyqueue.web over real HTTP (uvicorn on loopback, a real redis-server): the JSON API,
/metrics against stats() and counters(), /healthz, actions (CSRF, confirmation,
read-only), the token, escaping, mounting, the SQS dispatch and `keyqueue serve`."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
import types
from dataclasses import asdict
from typing import Any, AsyncIterator, Iterator

import httpx
import pytest
import redis
import redis.asyncio
from prometheus_client.parser import text_string_to_metric_families

from keyqueue import Queue
from keyqueue.core.shards import shard_for
from keyqueue.server import RedisServer, free_port
from keyqueue.web import create_app
from keyqueue.web.rates import RateHistory

from ..support.helpers import wait_until
from ..support.web_support import Served

TOKEN = "correct-horse-battery-staple"


@pytest.fixture(scope="module")
def servers(redis_server: RedisServer) -> Iterator[dict[str, Served]]:
    """One app per configuration, all on the session's Redis, shared by the module."""
    made = {
        "plain": Served(create_app(url=redis_server.url)),
        "ro": Served(create_app(url=redis_server.url, read_only=True)),
        "token": Served(create_app(url=redis_server.url, token=TOKEN)),
    }
    yield made
    for s in made.values():
        s.stop()


@pytest.fixture
def web(servers: dict[str, Served], r: redis.Redis) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=servers["plain"].url, timeout=20) as c:
        yield c


def fill(r: redis.Redis) -> dict[str, Queue]:
    """Two queues with messages in every state; 'emails' has two dead letters."""
    emails = Queue("emails", client=r, max_receives=1, visibility_timeout=60)
    emails.enqueue_many([f"mail {i}" for i in range(6)])
    for reason in ("RuntimeError: smtp down", "ValueError: bad address"):
        m = emails.claim()
        assert m is not None
        m.dead_letter(reason)
    emails.claim()  # one in flight
    emails.enqueue(b"\xff\xfe binary", delay=600)
    reports = Queue("reports", client=r)
    reports.enqueue("weekly")
    return {"emails": emails, "reports": reports}


def same_stats(got: dict[str, Any], q: Queue) -> None:
    want = asdict(q.stats())
    assert {k: got[k] for k in ("waiting", "processing", "delayed", "dead")} == {
        k: want[k] for k in ("waiting", "processing", "delayed", "dead")
    }
    assert (got["oldest_age"] is None) == (want["oldest_age"] is None)
    if want["oldest_age"] is not None:
        assert abs(got["oldest_age"] - want["oldest_age"]) < 5


def csrf_of(page: str) -> str:
    found = re.search(r'name="csrf" value="([0-9a-f]+)"', page)
    assert found, "no CSRF token in the page"
    return found.group(1)


# -- JSON API ---------------------------------------------------------------------------


def test_api_lists_every_queue_with_its_stats(web: httpx.Client, r: redis.Redis) -> None:
    qs = fill(r)
    got = web.get("/api/queues")
    assert got.status_code == 200
    rows = got.json()
    assert [row["name"] for row in rows] == ["emails", "reports"]
    assert set(rows[0]) == {"name", "waiting", "processing", "delayed", "dead", "oldest_age"}
    for row in rows:
        same_stats(row, qs[row["name"]])
    overview = web.get("/api/overview").json()
    assert [(o["name"], o["counters"]) for o in overview] == [(n, q.counters()) for n, q in qs.items()]
    assert set(overview[0]["rates"]) == {"enqueued", "acked"}
    one = web.get("/api/queues/emails").json()
    assert one["name"] == "emails" and (one["waiting"], one["processing"], one["delayed"], one["dead"]) == (3, 1, 1, 2)


def test_unknown_queue_is_404_on_every_route(web: httpx.Client, r: redis.Redis) -> None:
    fill(r)
    for path in ("/api/queues/nope", "/api/queues/nope/messages", "/queues/nope", "/partials/queues/nope"):
        assert web.get(path).status_code == 404, path
    assert "error" in web.get("/api/nothing").json() and "Back to the queues" in web.get("/nothing").text
    csrf = csrf_of(web.get("/queues/emails").text)
    for action, data in (("requeue", {}), ("purge", {"source": "dead"})):
        got = web.post(f"/queues/nope/{action}", data={"csrf": csrf, "confirm": "1", **data})
        assert got.status_code == 404
    assert "nope" not in Queue("emails", client=r).keys.queue  # (sanity: a real name)
    assert b"nope" not in r.smembers("kq:queues")


def test_api_messages_per_source(web: httpx.Client, r: redis.Redis) -> None:
    fill(r)
    dead = web.get("/api/queues/emails/messages", params={"source": "dead"}).json()
    assert [m["last_error"] for m in dead] == ["RuntimeError: smtp down", "ValueError: bad address"]
    assert set(dead[0]) == {"id", "body", "body_base64", "receives", "enqueued_at", "deadline", "last_error"}
    assert dead[0]["body"] == "mail 0" and dead[0]["body_base64"] is False and dead[0]["receives"] == 1
    delayed = web.get("/api/queues/emails/messages", params={"source": "delayed"}).json()
    assert delayed[0]["body_base64"] is True and delayed[0]["body"] == "//4gYmluYXJ5"
    assert delayed[0]["deadline"] > delayed[0]["enqueued_at"] + 500
    flight = web.get("/api/queues/emails/messages", params={"source": "processing"}).json()
    assert len(flight) == 1 and flight[0]["deadline"] > flight[0]["enqueued_at"]
    waiting = web.get("/api/queues/emails/messages", params={"count": "2"}).json()
    assert [m["body"] for m in waiting] == ["mail 3", "mail 4"]
    late = Queue("late", client=r)  # no worker, no reaper: past their time, still where they were
    late.enqueue("held")
    held = late.claim(visibility_timeout=0.05)
    assert held is not None and held.text == "held"
    due_id = late.enqueue("due", delay=0.05)  # after the claim: a claim reaps what is due
    wait_until(
        lambda: all(
            m.deadline is not None and m.deadline < time.time() - 0.05
            for m in late.peek(2, source="delayed") + late.peek(2, source="processing")
        )
    )
    assert late.peek(1, source="delayed")[0].id == due_id
    assert re.search(r'class="warn">due [0-9.]+ (ms|s) ago', web.get("/queues/late?source=delayed").text)
    assert re.search(r'class="warn">expired [0-9.]+ (ms|s) ago', web.get("/queues/late?source=processing").text)
    for count in ("0", "1"):  # "Show more" of 0 was 0 more
        assert 'count=50">Show more' in web.get("/queues/emails", params={"count": count}).text, count
    for bad in (
        {"source": "everything"},
        {"count": "-1"},
        {"count": "many"},
        {"count": "100000"},
        {"count": "\u00b2"},
        {"count": "\u0661"},
        {"count": "1" * 5000},
    ):  # "²", Arabic 1, > int()'s digits
        got = web.get("/api/queues/emails/messages", params=bad)
        assert got.status_code == 400 and "error" in got.json(), bad
        assert web.get("/queues/emails", params=bad).status_code == 400, bad


# -- /metrics ---------------------------------------------------------------------------


def scrape(web: httpx.Client) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    got = web.get("/metrics")
    assert got.status_code == 200 and got.headers["content-type"].startswith("text/plain")
    out = {}
    for family in text_string_to_metric_families(got.text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_metrics_equal_stats_and_counters(web: httpx.Client, r: redis.Redis) -> None:
    qs = fill(r)
    m = scrape(web)
    for name, q in qs.items():
        s = q.stats()
        for state in ("waiting", "processing", "delayed", "dead"):
            assert m[("keyqueue_messages", (("queue", name), ("state", state)))] == getattr(s, state)
        for counter, value in q.counters().items():
            assert m[(f"keyqueue_{counter}_total", (("queue", name),))] == value
    assert m[("keyqueue_oldest_message_age_seconds", (("queue", "emails"),))] >= 0
    empty = Queue("empty", client=r)
    empty.enqueue("x")
    empty.claim()
    assert ("keyqueue_oldest_message_age_seconds", (("queue", "empty"),)) not in scrape(web)


def test_a_sharded_queue_is_one_row_with_the_real_totals(web: httpx.Client, r: redis.Redis) -> None:
    big = Queue("big", client=r, shards=4)
    big.enqueue_many([f"m{i}" for i in range(12)])
    big.ack(big.claim())  # type: ignore[arg-type]
    big.claim()
    rows = web.get("/api/queues").json()
    assert [row["name"] for row in rows] == ["big"]
    same_stats(rows[0], big)
    assert (rows[0]["waiting"], rows[0]["processing"]) == (10, 1)
    m = scrape(web)
    for state in ("waiting", "processing", "delayed", "dead"):
        assert m[("keyqueue_messages", (("queue", "big"), ("state", state)))] == getattr(big.stats(), state)
    assert m[("keyqueue_enqueued_total", (("queue", "big"),))] == 12
    assert m[("keyqueue_acked_total", (("queue", "big"),))] == 1
    got = web.get("/api/queues/big/messages", params={"count": "20"}).json()
    assert len(got) == 10
    # the dashboard's actions on one dead letter take its sharded id
    dead = big.claim_many(2)
    for m in dead:
        assert big.dead_letter(m)
    page = web.get("/queues/big", params={"source": "dead"})
    assert dead[0].id in page.text
    csrf = csrf_of(page.text)
    done = web.post("/queues/big/requeue", data={"csrf": csrf, "id": dead[0].id, "confirm": "1"})
    assert done.status_code == 303 and big.stats().dead == 1
    done = web.post("/queues/big/purge", data={"csrf": csrf, "source": "dead", "id": dead[1].id, "confirm": "1"})
    assert done.status_code == 303 and big.stats().dead == 0 and big.get([dead[1].id]) == []


def test_a_queue_made_again_with_shards_shows_its_new_figures(
    web: httpx.Client, r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The app keeps a Queue per name a while (it reads its settings once); one destroyed
    and made again sharded shows the new keys' figures once that while is over."""
    from keyqueue.web import store

    Queue("remade", client=r).enqueue("one")
    assert web.get("/api/queues/remade").json()["waiting"] == 1
    Queue("remade", client=r).destroy()
    again = Queue("remade", client=r, shards=4)
    again.enqueue_many([str(i) for i in range(8)])
    monkeypatch.setattr(store, "REMAKE_AFTER", 0.0)
    got = web.get("/api/queues/remade").json()
    assert got["waiting"] == 8 and len(got["shards"]) == 4
    assert scrape(web)[("keyqueue_enqueued_total", (("queue", "remade"),))] == 8


def test_a_sharded_queues_api_and_page_give_each_shards_figures(web: httpx.Client, r: redis.Redis) -> None:
    spread = Queue("spread", client=r, shards=3)
    keyed = [next(k for k in map(str, range(100)) if shard_for(k, 3) == s) for s in range(3)]
    for shard, n in enumerate((5, 3, 1)):  # shard 0: 5 messages, shard 1: 3, shard 2: 1
        spread.enqueue_many([f"{shard}-{i}" for i in range(n)], shard_keys=[keyed[shard]] * n)
    spread.enqueue("later", delay=600, shard_key=keyed[2])
    m = spread.claim_many(9)
    assert len(m) == 9
    for one in m[:2]:
        assert spread.dead_letter(one)
    assert spread.release(m[2]) and spread.ack(m[3])  # (in flight: the other five)
    Queue("plain", client=r).enqueue("x")
    want = spread.shard_stats()
    rows = {row["name"]: row for row in web.get("/api/queues").json()}
    assert "shards" not in rows["plain"]  # an unsharded queue's object is as before
    for got in (rows["spread"], web.get("/api/queues/spread").json()):
        assert [s["shard"] for s in got["shards"]] == [0, 1, 2]
        for s, w in zip(got["shards"], want):
            assert (s["waiting"], s["processing"], s["delayed"], s["dead"]) == (
                w.waiting,
                w.processing,
                w.delayed,
                w.dead,
            )
        for k in ("waiting", "processing", "delayed", "dead"):  # the totals are their sums
            assert got[k] == sum(s[k] for s in got["shards"]) == getattr(spread.stats(), k)
    assert sum(s.delayed for s in want) == 1 and want[2].delayed == 1 and sum(s.dead for s in want) == 2
    # the queue page: a row per shard under the totals, and its actions take sharded ids
    page = web.get("/queues/spread", params={"source": "dead"}).text
    for i, w in enumerate(want):
        row = re.search(rf'<tr data-shard="{i}">(.*?)</tr>', page, re.S)
        assert row, i
        cells = dict(re.findall(r'data-k="(\w+)"><span class="n[^"]*">([0-9,]+)</span>', row.group(1)))
        assert cells == {k: str(getattr(w, k)) for k in ("waiting", "processing", "delayed", "dead")}
    assert re.search(r'id="shard-count">3 shards<', page) and 'data-k="shards">3 shards<' in web.get("/").text
    dead = spread.peek(2, source="dead")
    done = web.post(
        "/queues/spread/purge", data={"csrf": csrf_of(page), "source": "dead", "id": dead[0].id, "confirm": "1"}
    )
    assert f"Deleted dead letter {dead[0].id}." in web.get(done.headers["location"]).text


def test_a_corrupt_queue_does_not_take_the_others_down(web: httpx.Client, r: redis.Redis) -> None:
    qs = fill(r)
    r.delete("kq:{reports}:dead")
    r.set("kq:{reports}:dead", "written over")
    got = web.get("/api/queues")
    assert got.status_code == 200
    rows = {row["name"]: row for row in got.json()}
    same_stats(rows["emails"], qs["emails"])
    assert rows["reports"]["waiting"] is None and "kq:{reports}:dead" in rows["reports"]["error"]
    m = scrape(web)
    assert m[("keyqueue_messages", (("queue", "emails"), ("state", "dead")))] == 2
    assert m[("keyqueue_queue_corrupt", (("queue", "emails"),))] == 0
    assert m[("keyqueue_queue_corrupt", (("queue", "reports"),))] == 1
    assert ("keyqueue_messages", (("queue", "reports"), ("state", "dead"))) not in m
    page = web.get("/")
    assert page.status_code == 200 and "Cannot be read: key &#39;kq:{reports}:dead&#39;" in page.text
    assert web.get("/queues/reports").status_code == 500  # its own page says what is wrong
    assert web.get("/queues/emails").status_code == 200


def test_counters_move_by_exactly_what_happened(web: httpx.Client, r: redis.Redis) -> None:
    q = Queue("jobs", client=r, max_receives=2, visibility_timeout=0.2)
    q.enqueue("warm-up")
    assert q.ack(q.claim())  # type: ignore[arg-type]
    before = scrape(web)

    def moved(after: dict[Any, float], counter: str) -> float:
        key = (f"keyqueue_{counter}_total", (("queue", "jobs"),))
        return after[key] - before[key]

    q.enqueue_many(["a", "b", "c"])
    q.enqueue("d", dedup_key="k")
    q.enqueue("d again", dedup_key="k")  # deduplicated: not counted
    got = q.claim_many(2)
    assert q.ack_many(got) == 2
    doomed = q.claim()
    assert doomed is not None
    doomed.dead_letter("boom")
    expiring = q.claim()  # left to expire: one redelivery at the next claim
    assert expiring is not None
    redelivered = wait_until(lambda: q.claim(), timeout=20)
    assert redelivered.id == expiring.id
    after = scrape(web)
    assert (
        moved(after, "enqueued"),
        moved(after, "acked"),
        moved(after, "dead_lettered"),
        moved(after, "redelivered"),
    ) == (4, 2, 1, 1)
    assert after[("keyqueue_messages", (("queue", "jobs"), ("state", "processing")))] == 1


def test_expired_messages_are_counted(web: httpx.Client, r: redis.Redis) -> None:
    q = Queue("short", client=r, retention=0.05)
    assert scrape(web)[("keyqueue_expired_total", (("queue", "short"),))] == 0
    q.enqueue_many(["a", "b"])
    wait_until(lambda: q.reap() and q.counters()["expired"] == 2)
    assert scrape(web)[("keyqueue_expired_total", (("queue", "short"),))] == 2
    assert '<span data-k="expired">2</span> expired' in web.get("/queues/short").text


def test_refused_claims_are_counted_and_limits_shown(web: httpx.Client, r: redis.Redis) -> None:
    q = Queue("limited", client=r, rate_limit="2/3600", max_in_flight=5)
    q.enqueue_many(["a", "b", "c"])
    page = web.get("/queues/limited").text
    assert 'rate <span data-k="rate_used">0</span> of 2 claims per' in page
    assert 'in flight <span data-k="in_flight">0</span> of at most 5' in page
    assert scrape(web)[("keyqueue_throttled_total", (("queue", "limited"),))] == 0
    assert len(q.claim_many(3)) == 2
    assert q.claim() is None
    assert scrape(web)[("keyqueue_throttled_total", (("queue", "limited"),))] == 2  # claim_many's, claim's
    q.throttle(60)
    page = web.get("/queues/limited").text
    assert 'rate <span data-k="rate_used">2</span> of 2' in page and "<strong>throttled</strong>" in page
    assert 'in flight <span data-k="in_flight">2</span>' in page
    plain = Queue("plain", client=r)
    plain.enqueue("x")
    assert "no rate limit" in web.get("/queues/plain").text


# -- actions ----------------------------------------------------------------------------


def test_actions_need_the_sessions_csrf_token_and_a_confirmation(web: httpx.Client, r: redis.Redis) -> None:
    qs = fill(r)
    emails = qs["emails"]
    dead_ids = [m.id for m in emails.peek(10, source="dead")]
    page = web.get("/queues/emails", params={"source": "dead"})
    csrf = csrf_of(page.text)
    for data in ({}, {"csrf": "0" * 64}, {"csrf": csrf + "0"}):
        got = web.post("/queues/emails/requeue", data={**data, "confirm": "1"})
        assert got.status_code == 403
    with httpx.Client(base_url=str(web.base_url), timeout=20) as stranger:  # another session's token
        assert stranger.post("/queues/emails/requeue", data={"csrf": csrf, "confirm": "1"}).status_code == 403
    assert emails.stats().dead == 2
    ask = web.post("/queues/emails/requeue", data={"csrf": csrf, "id": dead_ids[0]})
    assert ask.status_code == 200 and "Requeue dead letter" in ask.text and emails.stats().dead == 2
    done = web.post("/queues/emails/requeue", data={"csrf": csrf, "id": dead_ids[0], "confirm": "1"})
    assert done.status_code == 303 and "notice=requeue" in done.headers["location"]
    s = emails.stats()
    assert (s.dead, s.waiting) == (1, 4)
    assert "Requeued 1 dead letter." in web.get(done.headers["location"]).text
    last = dead_ids[1]
    another = emails.claim()
    assert another is not None and another.dead_letter("KeyError: x")
    ask = web.post("/queues/emails/purge", data={"csrf": csrf, "source": "dead", "id": last})
    assert f"Delete dead letter {last} of emails?" in ask.text and emails.stats().dead == 2
    assert (
        web.post(
            "/queues/emails/purge", data={"csrf": csrf, "source": "waiting", "id": "5", "confirm": "1"}
        ).status_code
        == 400
        and emails.stats().waiting == 3
    )
    done = web.post("/queues/emails/purge", data={"csrf": csrf, "source": "dead", "id": last, "confirm": "1"})
    assert done.status_code == 303 and f"Deleted dead letter {last}." in web.get(done.headers["location"]).text
    assert [m.id for m in emails.peek(10, source="dead")] == [another.id]  # that one only
    for action, data in (("purge", {"source": "dead"}), ("requeue", {})):  # already gone (another tab, a worker)
        again = web.post(f"/queues/emails/{action}", data={"csrf": csrf, "id": last, "confirm": "1", **data})
        assert f"Message {last} is not a dead letter (any more)" in web.get(again.headers["location"]).text
    done = web.post("/queues/emails/purge", data={"csrf": csrf, "source": "dead", "confirm": "1"})
    assert done.status_code == 303
    s = emails.stats()
    assert (s.dead, s.waiting, s.processing, s.delayed) == (0, 3, 1, 1)
    assert web.post("/queues/emails/purge", data={"csrf": csrf, "source": "bogus", "confirm": "1"}).status_code == 400
    done = web.post("/queues/emails/purge", data={"csrf": csrf, "source": "all", "confirm": "1"})
    assert "Purged 5 messages (every state)." in web.get(done.headers["location"]).text and emails.stats().waiting == 0
    not_post = web.get("/queues/emails/requeue")  # actions are POST only
    assert not_post.status_code == 405 and not_post.headers["allow"] == "POST"


def test_read_only_refuses_actions(servers: dict[str, Served], r: redis.Redis) -> None:
    emails = fill(r)["emails"]
    with httpx.Client(base_url=servers["ro"].url, timeout=20) as c:
        page = c.get("/queues/emails", params={"source": "dead"})
        assert "read-only" in page.text and "/requeue" not in page.text
        for action, data in (("requeue", {}), ("purge", {"source": "dead"})):
            got = c.post(f"/queues/emails/{action}", data={"confirm": "1", **data})
            assert got.status_code == 403 and "--read-only" in got.text  # refused as read-only, not for CSRF
            assert c.post(f"/queues/nope/{action}", data={"confirm": "1", **data}).status_code == 404
        assert c.get("/api/queues/emails").json()["dead"] == 2
    assert emails.stats().dead == 2


def test_only_pages_with_an_action_form_set_a_session_cookie(servers: dict[str, Served], r: redis.Redis) -> None:
    """A scraper, a health check, an API client or a cache is given no cookie it never
    sends back; the queue page (its forms carry the session's CSRF token) and the login are."""
    emails = fill(r)["emails"]
    token = {"Authorization": f"Bearer {TOKEN}"}
    cookieless = [
        ("plain", "/metrics", {}),
        ("plain", "/healthz", {}),
        ("plain", "/api/queues", {}),
        ("plain", "/api/queues/emails", {}),
        ("plain", "/api/queues/emails/messages", {}),
        ("plain", "/api/overview", {}),
        ("plain", "/static/dashboard.css", {}),
        ("plain", "/static/dashboard.js", {}),
        ("plain", "/static/favicon.svg", {}),
        ("plain", "/favicon.ico", {}),
        ("plain", "/", {}),
        ("plain", "/partials/overview", {}),
        ("plain", "/partials/queues/emails", {}),
        ("plain", "/queues/nope", {}),
        ("ro", "/queues/emails?source=dead", {}),  # read-only: no action form
        ("token", "/healthz", {}),
        ("token", "/login", {}),
        ("token", "/static/dashboard.css", {}),
        ("token", "/metrics", token),
        ("token", "/api/queues", token),
        ("token", "/metrics", {}),
    ]
    for app, path, headers in cookieless:
        got = httpx.get(servers[app].url + path, headers=headers, timeout=20)
        assert got.status_code in (200, 301, 401, 404) and "set-cookie" not in got.headers, (app, path)
    with httpx.Client(base_url=servers["plain"].url, timeout=20) as c:
        page = c.get("/queues/emails", params={"source": "dead"})
        assert "keyqueue_session=" in page.headers["set-cookie"]
        again = c.get("/queues/emails", params={"source": "dead"})  # the session it has is kept
        assert "set-cookie" not in again.headers and csrf_of(again.text) == csrf_of(page.text)
        done = c.post("/queues/emails/requeue", data={"csrf": csrf_of(page.text), "confirm": "1"})
        assert done.status_code == 303 and emails.stats().dead == 0
    with httpx.Client(base_url=servers["token"].url, timeout=20) as c:
        login = c.post("/login", data={"token": TOKEN, "next": "/queues/emails"})
        assert login.status_code == 303 and "keyqueue_session=" in login.headers["set-cookie"]
        page = c.get("/queues/emails")
        assert page.status_code == 200 and "set-cookie" not in page.headers
        assert "Max-Age=0" in c.post("/logout", data={"csrf": csrf_of(page.text)}).headers["set-cookie"]


# -- the token --------------------------------------------------------------------------


def test_token_guards_every_route_but_healthz(
    servers: dict[str, Served], r: redis.Redis, redis_server: RedisServer
) -> None:
    emails = fill(r)["emails"]
    url = servers["token"].url
    with httpx.Client(base_url=url, timeout=20) as c:
        assert c.get("/healthz").status_code == 200
        for path in ("/api/queues", "/metrics", "/api/queues/emails/messages", "/partials/overview"):
            got = c.get(path)
            assert got.status_code == 401 and got.headers["www-authenticate"].startswith("Bearer"), path
        assert c.get("/api/queues", headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert c.get("/api/queues", headers={"Authorization": f"Bearer {TOKEN}x"}).status_code == 401
        assert c.get("/api/queues", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
        assert c.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
        page = c.get("/queues/emails", headers={"Accept": "text/html"})
        assert page.status_code == 303 and page.headers["location"] == "/login?next=%2Fqueues%2Femails"
        form = c.get("/login").text  # open to anyone: says nothing of where Redis is
        assert 'name="token"' in form and f":{redis_server.port}" not in form and "prefix" not in form
        assert c.post("/queues/emails/purge", data={"source": "dead", "confirm": "1"}).status_code == 401
        bad = c.post("/login", data={"token": "guess", "next": "/queues/emails"})
        assert bad.status_code == 401 and TOKEN not in bad.text
        assert c.post("/login", data={"token": TOKEN, "next": "https://evil.example/"}).headers["location"] == "/"
        c.cookies.clear()
        good = c.post("/login", data={"token": TOKEN, "next": "/queues/emails"})
        assert good.status_code == 303 and good.headers["location"] == "/queues/emails"
        cookie = good.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and TOKEN not in cookie
        page = c.get("/queues/emails", params={"source": "dead"})
        assert page.status_code == 200 and "ValueError: bad address" in page.text
        csrf = csrf_of(page.text)
        assert c.post("/queues/emails/purge", data={"csrf": csrf, "source": "dead", "confirm": "1"}).status_code == 303
        assert emails.stats().dead == 0
        assert c.post("/logout", data={"csrf": csrf}).status_code == 303
        assert c.get("/api/queues").status_code == 401
    for path, cached in (("/login", False), ("/api/queues", False), ("/static/dashboard.css", True)):
        got = httpx.get(url + path)  # (the 401 too): never cached but the assets, never framed by others
        assert (got.headers.get("cache-control") == "no-store") is not cached, path
        assert (
            got.headers["x-frame-options"] == "SAMEORIGIN"
            and "frame-ancestors 'self'" in got.headers["content-security-policy"]
        ), path
    forged = httpx.get(f"{url}/api/queues", cookies={"keyqueue_session": "abc.1.deadbeef"})
    assert forged.status_code == 401
    untokened = httpx.get(f"{servers['plain'].url}/login")  # no token: no form that can never succeed
    assert untokened.status_code == 303 and untokened.headers["location"] == "/"


def test_a_non_ascii_token_works_as_a_bearer_header_too(redis_server: RedisServer) -> None:
    served = Served(create_app(url=redis_server.url, token="pässwörd-\u2713"))
    try:
        auth = {"Authorization": "Bearer pässwörd-\u2713".encode()}  # (as curl sends it: UTF-8)
        assert httpx.get(f"{served.url}/api/queues", headers=auth).status_code == 200
        assert httpx.post(f"{served.url}/login", data={"token": "pässwörd-\u2713"}).status_code == 303
    finally:
        served.stop()


# -- escaping ---------------------------------------------------------------------------


def test_bodies_and_errors_are_never_html(web: httpx.Client, r: redis.Redis) -> None:
    q = Queue("xss", client=r, max_receives=1)
    evil = ['<script>alert("body")</script>', '<img src=x onerror="alert(1)">', "a\"'><svg/onload=alert(2)>"]
    q.enqueue_many(evil)
    m = q.claim()
    assert m is not None
    m.dead_letter('<script>alert("error")</script>')
    for source in ("waiting", "dead"):
        page = web.get("/queues/xss", params={"source": source}).text
        assert "<script>alert" not in page and "<img src=x" not in page and "<svg/onload" not in page
    assert "&lt;script&gt;alert(&#34;error&#34;)&lt;/script&gt;" in web.get("/queues/xss?source=dead").text
    assert "&lt;img src=x onerror=&#34;alert(1)&#34;&gt;" in web.get("/queues/xss").text
    long = Queue("long", client=r)
    long.enqueue("x" * 5000 + "END")
    page = web.get("/queues/long").text
    assert "x" * 160 in page and "5\u2009003 B" in page
    Queue("raw", client=r).enqueue_many([b"\x00" * 5000, b"\x08\x01\x12\x03abc"])  # UTF-8, but nothing to see
    page = web.get("/queues/raw").text
    assert "binary \u00b7 5\u2009000 B" in page and "00 00 00" in page and "08 01 12 03 61 62 63" in page


# -- Redis going away -------------------------------------------------------------------


def test_redis_down_is_a_503_and_a_page_not_a_crash() -> None:
    def add_user() -> None:
        with redis.Redis(port=own.port) as admin:
            admin.acl_setuser(
                "ops", enabled=True, passwords=["+hunter2secret"], keys=["*"], channels=["*"], commands=["+@all"]
            )

    with RedisServer() as own:
        add_user()
        producer = redis.Redis(port=own.port, username="ops", password="hunter2secret")
        Queue("emails", client=producer).enqueue("x")
        served = Served(create_app(url=f"redis://ops:hunter2secret@127.0.0.1:{own.port}/0"))
        try:
            with httpx.Client(base_url=served.url, timeout=30) as c:
                assert c.get("/healthz").status_code == 200
                assert "hunter2secret" not in c.get("/").text
                own.stop()
                health = c.get("/healthz")
                assert health.status_code == 503 and health.json() == {"redis": "unreachable"}
                for path in ("/", "/queues/emails", "/partials/overview"):
                    page = c.get(path)
                    assert page.status_code == 503 and "Traceback" not in page.text
                    assert "unreachable" in page.text and "hunter2secret" not in page.text
                    assert 'id="live"' not in page.text  # (a page that does not refresh is not "live")
                assert "Redis unreachable" in c.get("/").text
                assert c.get("/api/queues").status_code == 503 and c.get("/metrics").status_code == 503
                own.start()  # without the ACL user: the URL's credentials are refused
                refused = c.get("/")
                assert refused.status_code == 503 and "refused the URL" in refused.text
                assert "hunter2secret" not in refused.text
                health = c.get("/healthz")
                assert health.status_code == 503 and health.json() == {"redis": "refused credentials"}
                add_user()
                wait_until(lambda: c.get("/healthz").status_code == 200, timeout=20, interval=0.1)
                assert c.get("/api/queues").json() == []  # (no persistence: the restart lost it)
                Queue("emails", client=producer).enqueue("y")
                assert [q["waiting"] for q in c.get("/api/queues").json()] == [1]
        finally:
            served.stop()
            producer.close()


def test_healthz_is_200_on_the_first_check_after_redis_restarts() -> None:
    with RedisServer() as own:
        served = Served(create_app(url=own.url))
        try:
            with httpx.Client(base_url=served.url, timeout=30) as c:
                assert c.get("/healthz").status_code == 200
                own.restart()  # the app's pooled connection is now closed by the old server
                assert c.get("/healthz").status_code == 200
        finally:
            served.stop()


# -- mounting and the SQS dispatch ------------------------------------------------------


def test_mounted_in_another_app(redis_server: RedisServer, r: redis.Redis) -> None:
    from starlette.applications import Starlette
    from starlette.responses import PlainTextResponse
    from starlette.routing import Mount, Route

    fill(r)
    client = redis.asyncio.Redis(port=redis_server.port)
    closed = []

    async def home(request: Any) -> PlainTextResponse:
        return PlainTextResponse("my app")

    @contextlib.asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[None]:
        yield
        await client.aclose()  # the client is the outer app's to close
        closed.append(True)

    outer = Starlette(routes=[Route("/", home), Mount("/ops/queues", create_app(client=client))], lifespan=lifespan)
    served = Served(outer)
    try:
        with httpx.Client(base_url=served.url, timeout=20) as c:
            assert c.get("/").text == "my app"
            page = c.get("/ops/queues/")
            assert page.status_code == 200
            assert (
                'href="/ops/queues/queues/emails"' in page.text
                and 'href="/ops/queues/static/dashboard.css"' in page.text
            )
            assert c.get("/ops/queues/static/dashboard.js").status_code == 200
            assert [q["name"] for q in c.get("/ops/queues/api/queues").json()] == ["emails", "reports"]
            queue_page = c.get("/ops/queues/queues/emails")
            assert "Path=/ops/queues" in queue_page.headers["set-cookie"]
            csrf = csrf_of(queue_page.text)
            done = c.post("/ops/queues/queues/emails/purge", data={"csrf": csrf, "source": "dead", "confirm": "1"})
            assert done.status_code == 303 and done.headers["location"].startswith("/ops/queues/queues/emails?")
    finally:
        served.stop()
    assert closed == [True]


def test_sqs_requests_go_to_the_sqs_app(monkeypatch: pytest.MonkeyPatch, redis_server: RedisServer) -> None:
    made: dict[str, Any] = {}

    async def stand_in(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 299, "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": f"sqs {scope['path']}".encode()})

    def create_sqs_app(**kwargs: Any) -> Any:
        made.update(kwargs)
        return stand_in

    monkeypatch.setitem(sys.modules, "keyqueue.sqs", types.SimpleNamespace(create_sqs_app=create_sqs_app))
    client = redis.asyncio.Redis(port=redis_server.port)  # (never connects: /healthz is not asked)
    app = create_app(client=client, prefix="kq", token=TOKEN, sqs=("AKID", "SECRET"), sqs_shards=4)
    assert made == {
        "client": client,
        "prefix": "kq",
        "access_key_id": "AKID",
        "secret_access_key": "SECRET",
        "shards": 4,
    }
    form = {"content-type": "application/x-www-form-urlencoded"}
    served = Served(app)
    try:
        with httpx.Client(base_url=served.url, timeout=20) as c:
            assert c.post("/", headers={"X-Amz-Target": "AmazonSQS.ListQueues"}, content=b"{}").status_code == 299
            assert c.post("/", headers=form, content=b"Action=ListQueues").status_code == 299
            got = c.post("/000000000000/jobs", headers={**form, "charset": "x"}, content=b"Action=SendMessage")
            assert got.status_code == 299 and got.text == "sqs /000000000000/jobs"
            # everything else is the dashboard's, behind its token
            assert c.get("/").status_code == 401
            assert c.post("/", headers={"content-type": "application/json"}, content=b"{}").status_code == 401
            assert c.post("/queues/x/purge", headers=form, content=b"source=dead").status_code == 401
    finally:
        served.stop()


# -- rates ------------------------------------------------------------------------------


def test_rates_come_from_counter_samples() -> None:
    now = [100.0]
    h = RateHistory(clock=lambda: now[0])
    h.record("q", {"enqueued": 0, "acked": 0})
    assert h.rate("q", "enqueued") is None
    for i in range(1, 8):
        now[0] += 2
        h.record("q", {"enqueued": 10 * i, "acked": 4 * i})
    assert h.rate("q", "enqueued") == pytest.approx(5.0) and h.rate("q", "acked") == pytest.approx(2.0)
    assert h.series("q", "enqueued") == [5.0] * 7
    now[0] += 0.2
    h.record("q", {"enqueued": 1000, "acked": 0})  # too soon: not a sample; smaller: a reset
    assert h.rate("q", "enqueued") is None and h.series("q", "enqueued") == []
    h.keep_only(set())
    assert h.rate("q", "enqueued") is None


# -- keyqueue serve ---------------------------------------------------------------------


def test_serve_command_runs_and_stops_cleanly(redis_server: RedisServer, r: redis.Redis) -> None:
    fill(r)
    port = free_port()
    env = {**os.environ, "KQ_TOKEN": f"{TOKEN}\n", "KEYQUEUE_URL": redis_server.url}  # as from a secret file
    proc = subprocess.Popen(
        [sys.executable, "-m", "keyqueue", "serve", "--port", str(port), "--read-only", "--token-env", "KQ_TOKEN"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:

        def up() -> bool:
            try:
                return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200
            except httpx.TransportError:
                assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
                return False

        wait_until(up, timeout=30, interval=0.1)
        auth = {"Authorization": f"Bearer {TOKEN}"}
        assert httpx.get(f"http://127.0.0.1:{port}/api/queues", headers=auth).json()[0]["name"] == "emails"
        assert httpx.get(f"http://127.0.0.1:{port}/api/queues").status_code == 401
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0
    assert TOKEN not in (out + err).decode()


def test_serve_on_a_port_in_use_is_one_line_and_exit_1(
    redis_server: RedisServer, capsys: pytest.CaptureFixture[str]
) -> None:
    from keyqueue.cli import main

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(SystemExit) as exit_:
            main(["--url", redis_server.url, "serve", "--port", str(port)])
    assert exit_.value.code == 1
    assert capsys.readouterr().err == f"Error: cannot serve on 127.0.0.1:{port}: Address already in use\n"


@pytest.mark.parametrize(
    "argv, env, message",
    [
        (["serve", "--host", "0.0.0.0"], {}, "without a token"),
        (["serve", "--host", "0.0.0.0", "--token-env", "KQ_EMPTY"], {"KQ_EMPTY": ""}, "unset or empty"),
        (["serve", "--token-env", "KQ_UNSET_VAR"], {}, "unset or empty"),
        (["serve", "--host", "0.0.0.0", "--token-env", "KQ_BLANK"], {"KQ_BLANK": " \n"}, "unset or empty"),
        (
            ["serve", "--sqs"],
            {"KEYQUEUE_SQS_ACCESS_KEY_ID": "AKID", "KEYQUEUE_SQS_SECRET_ACCESS_KEY": ""},
            "KEYQUEUE_SQS_SECRET_ACCESS_KEY",
        ),
    ],
)
def test_serve_refuses_unsafe_or_incomplete_setups(
    argv: list[str],
    env: dict[str, str],
    message: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from keyqueue.cli import main

    def would_serve(*args: Any, **kwargs: Any) -> None:
        raise SystemExit(99)  # (a wrong implementation fails here instead of serving)

    monkeypatch.setattr("uvicorn.run", would_serve)
    monkeypatch.delenv("KQ_UNSET_VAR", raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and message in err and len(err.strip().splitlines()) == 1
    assert "AKID" not in err
