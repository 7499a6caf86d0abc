"""What a new user meets first, through the library: mistakes that must fail clearly rather
than do something else quietly (found by trying keyqueue as a user from RQ, Celery or SQS)."""

from __future__ import annotations

import pytest
import redis

from keyqueue import ConfigurationError, InvalidArgument, Queue


def test_one_str_where_a_list_is_expected_is_refused(q: Queue) -> None:
    q.enqueue_many(["a", "b"])
    with pytest.raises(TypeError, match=r"for one value use enqueue\(body\)"):
        q.enqueue_many("abc")  # would have been three messages: a, b, c
    with pytest.raises(TypeError, match=r"get\(\[id\]\)"):
        q.get("12")  # would have been ids 1 and 2
    with pytest.raises(TypeError):
        q.requeue("12")
    assert q.length() == 2


def test_an_unknown_url_parameter_is_a_bad_url_at_once() -> None:
    with pytest.raises(ConfigurationError, match="unknown query parameter 'timeout'"):
        Queue("q", url="redis://:pw@127.0.0.1:1/0?timeout=5")
    Queue("q", url="redis://127.0.0.1:1/0?socket_timeout=0.5")  # a real one is fine


def test_the_library_reads_keyqueue_url_as_the_cli_does(
    redis_server, r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KEYQUEUE_URL", redis_server.url)
    Queue("envq").enqueue("x")  # neither client= nor url=
    assert r.llen("kq:{envq}:queue") == 1
    monkeypatch.setenv("KEYQUEUE_URL", "")
    with pytest.raises(ConfigurationError, match="KEYQUEUE_URL is set but empty"):
        Queue("envq")


@pytest.mark.parametrize(
    "call",
    [
        lambda q: q.enqueue("x", delay=1e20),
        lambda q: q.claim(visibility_timeout=1e12),
        lambda q: Queue("q", client=q.client, visibility_timeout=1e15),
    ],
)
def test_durations_beyond_any_real_use_are_refused(q: Queue, call) -> None:
    with pytest.raises(InvalidArgument, match="at most 1e[+]09"):
        call(q)
    assert q.stats().delayed == 0


def test_a_message_repr_shows_a_short_body(q: Queue) -> None:
    q.enqueue("x" * 100_000)
    m = q.claim()
    assert m is not None
    text = repr(m)
    assert len(text) < 200 and "100000 bytes" in text and f"id='{m.id}'" in text


def test_a_corrupt_registry_does_not_stop_a_healthy_queue(
    r: redis.Redis, scripting: bool, caplog: pytest.LogCaptureFixture
) -> None:
    r.set("kq:queues", "oops")  # the registry is shared by every queue under the prefix
    q = Queue("q", client=r, scripting=scripting, visibility_timeout=5)
    assert q.enqueue("x") == "1" and q.length() == 1
    assert "cannot register" in caplog.text and "kq:queues" in caplog.text
    assert r.get("kq:queues") == b"oops"  # left as it was


def test_a_reaper_takes_one_queue_or_name_as_it_is(r: redis.Redis, scripting: bool) -> None:
    from keyqueue import Reaper

    q = Queue("emails", client=r, scripting=scripting, visibility_timeout=5)
    assert [x.name for x in Reaper("emails", client=r).queues()] == ["emails"]  # not e, m, a, ...
    assert Reaper(q).queues() == [q]
    assert r.smembers("kq:queues") == {b"emails"}


def test_a_reaper_over_a_corrupt_registry_logs_one_line(r: redis.Redis, caplog: pytest.LogCaptureFixture) -> None:
    from keyqueue import Reaper

    r.set("kq:queues", "oops")
    reaper = Reaper(client=r)
    assert reaper.reap_once() == {}  # no exception out of the scheduled job
    errors = [rec for rec in caplog.records if rec.levelname == "ERROR"]
    assert len(errors) == 1 and "kq:queues" in errors[0].getMessage() and not errors[0].exc_info
