"""The dashboard's message groups: GET /api/queues/NAME/groups, the queue page's table of
its busiest groups and its held count (in the part that refreshes itself), and the held
gauge of /metrics."""

from __future__ import annotations

import httpx
import redis

from keyqueue import Queue

from .test_web_api import scrape, servers, web

__all__ = ["servers", "web"]  # the fixtures of the web API tests


def orders(r: redis.Redis) -> Queue:
    """Groups of 3, 6, 1 and 6 messages: 2, 5, 0 and 5 of them held."""
    q = Queue("orders", client=r)
    for g, n in (("alice", 3), ("bob", 6), ("carol", 1), ("dave", 6)):
        q.enqueue_many([f"{g} {i}" for i in range(n)], group=g)
    q.enqueue("ungrouped")
    return q


def test_api_lists_the_busiest_groups_first(web: httpx.Client, r: redis.Redis) -> None:
    q = orders(r)
    got = web.get("/api/queues/orders/groups")
    assert got.status_code == 200
    assert got.json() == [{"id": g.id, "held": g.held, "active": g.active} for g in q.groups(10, busiest=True)]
    assert [g["id"] for g in got.json()] == ["bob", "dave", "alice", "carol"]
    assert [g["id"] for g in web.get("/api/queues/orders/groups", params={"count": "2"}).json()] == ["bob", "dave"]
    assert web.get("/api/queues/orders/groups", params={"count": "x"}).status_code == 400
    assert web.get("/api/queues/nowhere/groups").status_code == 404
    assert web.get("/api/queues/plain/groups").status_code == 404  # (no such queue yet)
    Queue("plain", client=r).enqueue("x")
    assert web.get("/api/queues/plain/groups").json() == []


def test_the_refreshed_part_of_the_queue_page_holds_the_groups(web: httpx.Client, r: redis.Redis) -> None:
    q = orders(r)
    part = web.get("/partials/queues/orders")
    assert part.status_code == 200
    assert 'data-group="bob"' in part.text and 'data-group="carol"' in part.text
    assert '<span data-k="held">12</span> held' in part.text  # in the waiting tile
    while m := q.claim():  # everything of every group, one delivery at a time
        assert m.ack()
    part = web.get("/partials/queues/orders").text
    assert 'id="groups"' not in part and 'data-k="held"' not in part


def test_the_queue_page_lists_held_messages_and_says_when_there_are_none(web: httpx.Client, r: redis.Redis) -> None:
    q = orders(r)
    page = web.get("/queues/orders", params={"source": "held"})
    assert page.status_code == 200 and "bob 1" in page.text and "alice 2" in page.text
    while m := q.claim():
        assert m.ack()
    page = web.get("/queues/orders", params={"source": "held"})
    assert page.status_code == 200 and "No held messages." in page.text


def test_metrics_hold_the_held_messages(web: httpx.Client, r: redis.Redis) -> None:
    q = orders(r)
    m = scrape(web)
    assert m[("keyqueue_held_messages", (("queue", "orders"),))] == q.stats().held == 12
    # held messages are waiting ones: the states still add up to the queue's messages
    assert m[("keyqueue_messages", (("queue", "orders"), ("state", "waiting")))] == len(q) == 17
