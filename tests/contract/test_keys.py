"""Pure logic: names, the key layout, settings. No Redis."""

from __future__ import annotations

import fakeredis
import pytest

from keyqueue import InvalidArgument, InvalidQueueName, KeyQueueError
from keyqueue.connection import redact
from keyqueue.keys import QueueKeys, validate_name
from keyqueue.settings import QueueSettings, validate


@pytest.mark.parametrize("name", ["a", "A.b_c-9", "x" * 200, "emails.v2"])
def test_valid_names(name: str) -> None:
    assert validate_name(name) == name


@pytest.mark.parametrize("name", ["", "x" * 201, "a b", "a{b}", "a*", "a:b", "é", None, 5, b"q"])
def test_invalid_names(name: object) -> None:
    with pytest.raises(InvalidQueueName) as info:
        validate_name(name)
    assert isinstance(info.value, ValueError) and isinstance(info.value, KeyQueueError)
    assert "A-Z a-z 0-9 . _ -" in str(info.value)


def test_key_layout_is_the_spec() -> None:
    k = QueueKeys("kq", "jobs")
    assert [k.seq, k.queue, k.items, k.processing, k.dead, k.config] == [
        "kq:{jobs}:seq",
        "kq:{jobs}:queue",
        "kq:{jobs}:items",
        "kq:{jobs}:processing",
        "kq:{jobs}:dead",
        "kq:{jobs}:config",
    ]
    assert k.item(7) == "kq:{jobs}:item:7"
    assert k.timer(29000000) == "kq:{jobs}:timer:29000000"
    assert [k.timers, k.signal, k.dedup("x"), k.registry] == [
        "kq:{jobs}:timers",
        "kq:{jobs}:signal",
        "kq:{jobs}:dedup:x",
        "kq:queues",
    ]


def test_every_queue_key_is_in_one_cluster_slot() -> None:
    from redis.crc import key_slot

    k = QueueKeys("app", "orders")
    names = [
        k.seq,
        k.queue,
        k.items,
        k.processing,
        k.dead,
        k.config,
        k.timers,
        k.signal,
        k.item(1),
        k.timer(5),
        k.dedup("d"),
    ]
    assert len({key_slot(n.encode()) for n in names}) == 1


def test_settings_round_trip_through_a_hash() -> None:
    r = fakeredis.FakeRedis()
    s = QueueSettings(visibility_timeout=2.5, max_receives=4, bucket_seconds=10, max_body_bytes=1000, dedup_window=0.0)
    r.hset("cfg", mapping=s.to_hash())
    assert QueueSettings.from_hash(r.hgetall("cfg")) == s
    r.hset("cfg", "max_receives", "")
    assert QueueSettings.from_hash(r.hgetall("cfg")).max_receives is None
    assert r.hget("cfg", "visibility_timeout") == b"2.5"


@pytest.mark.parametrize(
    "given",
    [
        {"visibility_timeout": 0},
        {"visibility_timeout": -1},
        {"visibility_timeout": float("nan")},
        {"max_receives": 0},
        {"max_receives": 1.5},
        {"bucket_seconds": 0},
        {"max_body_bytes": 0},
        {"dedup_window": -1},
        {"visibility_timeout": "30"},
        {"max_receives": True},
    ],
)
def test_bad_settings_are_rejected(given: dict) -> None:
    with pytest.raises(InvalidArgument) as info:
        validate(QueueSettings(), given)
    assert next(iter(given)) in str(info.value)


def test_redact_hides_passwords() -> None:
    assert redact("redis://user:s3cret@host:6380/1") == "redis://user:***@host:6380/1"
    assert redact("redis://:s3cret@host/0") == "redis://:***@host/0"
    assert redact("redis://host:6379/0") == "redis://host:6379/0"
