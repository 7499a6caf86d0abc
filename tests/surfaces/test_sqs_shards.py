"""The SQS API on sharded queues: ``keyqueue serve --sqs`` serves a queue of N shards as one
SQS queue. Its messages spread over the shards, receipt handles carry the sharded ids
(``"<shard>#<id>"``), and the queue's attributes count every shard."""

from __future__ import annotations

import json
import subprocess
import uuid
from typing import Any, Iterator

import pytest
import redis

from keyqueue import Queue
from keyqueue.server import RedisServer

from ..support.helpers import wait_until
from . import test_sqs
from .test_sqs import PREFIX, VENV_BIN, Server, error_of, name_of, serving

# the server and clients of the SQS tests, shared
keyqueue_server, kq, rc = test_sqs.keyqueue_server, test_sqs.kq, test_sqs.rc

COUNTS = ("ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible", "ApproximateNumberOfMessagesDelayed")


def sharded(rc: redis.Redis, shards: int = 6) -> tuple[Queue, str]:
    q = Queue(f"s-{uuid.uuid4().hex[:10]}", client=rc, prefix=PREFIX, shards=shards)
    return q, q.name


def counts(kq: Server, url: str) -> tuple[int, ...]:
    got = kq.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=list(COUNTS))["Attributes"]
    return tuple(int(got[n]) for n in COUNTS)


def shard_sums(q: Queue) -> tuple[int, ...]:
    each = q.shard_stats()
    return (sum(s.waiting for s in each), sum(s.processing for s in each), sum(s.delayed for s in each))


def test_a_sharded_queue_through_sqs(kq: Server, rc: redis.Redis) -> None:
    c = kq.sqs
    q, name = sharded(rc)
    url = c.get_queue_url(QueueName=name)["QueueUrl"]
    assert c.list_queues(QueueNamePrefix=name)["QueueUrls"] == [url]  # listed once, by its name
    sent = [c.send_message(QueueUrl=url, MessageBody=f"one-{i}")["MessageId"] for i in range(12)]
    for start in range(0, 48, 10):
        batch = [{"Id": str(i), "MessageBody": f"batch-{i}"} for i in range(start, min(start + 10, 48))]
        got = c.send_message_batch(QueueUrl=url, Entries=batch)
        assert not got["Failed"]
        sent += [m["MessageId"] for m in got["Successful"]]
    c.send_message(QueueUrl=url, MessageBody="later", DelaySeconds=900)
    assert len(set(sent)) == 60
    each = [s.waiting for s in q.shard_stats()]
    assert all(n >= 8 for n in each), each  # every shard holds some
    assert counts(kq, url) == shard_sums(q) == (60, 0, 1)
    received: dict[str, str] = {}
    handles = []
    while len(received) < 60:
        got = c.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1).get("Messages", [])
        assert got, received
        for m in got:
            assert m["MessageId"] not in received  # each once
            received[m["MessageId"]] = m["Body"]
            handles.append(m["ReceiptHandle"])
    assert set(received) == set(sent)
    assert "Messages" not in c.receive_message(QueueUrl=url)
    assert counts(kq, url) == shard_sums(q) == (0, 60, 1)
    assert all(s.processing > 0 for s in q.shard_stats())
    # visibility changes reach the right shard: one given back, one extended
    c.change_message_visibility(QueueUrl=url, ReceiptHandle=handles[0], VisibilityTimeout=0)
    c.change_message_visibility(QueueUrl=url, ReceiptHandle=handles[1], VisibilityTimeout=600)
    assert counts(kq, url) == shard_sums(q) == (1, 59, 1)
    again = c.receive_message(QueueUrl=url)["Messages"][0]
    assert again["MessageId"] == list(received)[0]
    handles[0] = again["ReceiptHandle"]
    c.delete_message(QueueUrl=url, ReceiptHandle=handles[0])
    for start in range(1, 60, 10):
        entries = [{"Id": str(i), "ReceiptHandle": h} for i, h in enumerate(handles[start : start + 10])]
        assert not c.delete_message_batch(QueueUrl=url, Entries=entries)["Failed"]
    assert counts(kq, url) == shard_sums(q) == (0, 0, 1)
    assert q.counters()["acked"] == 60
    assert q.check(settle=0).consistent
    c.purge_queue(QueueUrl=url)
    assert counts(kq, url) == shard_sums(q) == (0, 0, 0)
    assert {k.decode().split("}")[0] for k in rc.keys(f"{PREFIX}:{{{name}*")} == {
        f"{PREFIX}:{{{name}{tail}" for tail in ("", *(f"#{i}" for i in range(6)))
    }
    c.delete_queue(QueueUrl=url)
    assert not q.exists() and rc.keys(f"{PREFIX}:{{{name}*") == []  # every shard's keys gone


def test_a_sharded_fifo_queue_keeps_each_groups_order(kq: Server, rc: redis.Redis) -> None:
    c = kq.sqs
    q = Queue(f"f-{uuid.uuid4().hex[:10]}.fifo", client=rc, prefix=PREFIX, shards=4, group_concurrency=1)
    url = c.get_queue_url(QueueName=q.name)["QueueUrl"]
    groups = [f"g{g}" for g in range(8)]
    numbers: dict[str, str] = {}
    for i in range(5):
        entries = [
            {"Id": g, "MessageBody": f"{g}-{i}", "MessageGroupId": g, "MessageDeduplicationId": f"{g}-{i}"}
            for g in groups
        ]
        for e in c.send_message_batch(QueueUrl=url, Entries=entries)["Successful"]:
            numbers[f"{e['Id']}-{i}"] = e["SequenceNumber"]
    # a repeated deduplication id is dropped on its group's shard
    c.send_message(QueueUrl=url, MessageBody="again", MessageGroupId="g0", MessageDeduplicationId="g0-0")
    assert sum(1 for s in q.shard_stats() if s.waiting) >= 2  # the groups spread over the shards
    assert len(set(numbers.values())) == 40 and all(n.isdigit() and len(n) == 20 for n in numbers.values())
    seen: dict[str, list[str]] = {g: [] for g in groups}
    while sum(map(len, seen.values())) < 40:
        got = c.receive_message(QueueUrl=url, MaxNumberOfMessages=10, AttributeNames=["All"], WaitTimeSeconds=1)
        assert got.get("Messages"), seen
        for m in got["Messages"]:
            seen[m["Attributes"]["MessageGroupId"]].append(m["Body"])
            assert m["Attributes"]["SequenceNumber"] == numbers[m["Body"]]
            c.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
    assert seen == {g: [f"{g}-{i}" for i in range(5)] for g in groups}  # each once, in its group's order
    for g in groups:  # a group's sequence numbers grow
        mine = [int(numbers[f"{g}-{i}"]) for i in range(5)]
        assert mine == sorted(mine)
    assert counts(kq, url) == (0, 0, 0)


def test_a_sharded_queues_dead_letters_move_to_its_dead_letter_queue(kq: Server, rc: redis.Redis) -> None:
    c = kq.sqs
    q, name = sharded(rc, shards=3)
    dlq = kq.queue()
    url = c.get_queue_url(QueueName=name)["QueueUrl"]
    c.set_queue_attributes(
        QueueUrl=url,
        Attributes={"RedrivePolicy": json.dumps({"deadLetterTargetArn": kq.arn(dlq), "maxReceiveCount": 1})},
    )
    c.send_message_batch(QueueUrl=url, Entries=[{"Id": str(i), "MessageBody": f"poison-{i}"} for i in range(6)])
    assert all(s.waiting == 2 for s in q.shard_stats())
    first = {m["Body"]: m["MessageId"] for m in receive_all(c, url, 6, VisibilityTimeout=1)}
    # their second receive finds them out of receives: every shard's go to the dead-letter queue
    wait_until(
        lambda: c.receive_message(QueueUrl=url, WaitTimeSeconds=1).get("Messages") is None and kq.count(dlq) == 6, 60
    )
    moved = {m["Body"]: m["MessageId"] for m in receive_all(c, dlq, 6)}
    assert moved == first  # each once, with its MessageId
    assert shard_sums(q) == (0, 0, 0) and q.stats().dead == 0


def receive_all(c: Any, url: str, n: int, **kw: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    while len(out) < n:
        got = c.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1, **kw).get("Messages", [])
        assert got, out
        out += got
    assert len(out) == n
    return out


@pytest.fixture(scope="module")
def spreading(redis_server: RedisServer) -> Iterator[Server]:
    """A server whose CreateQueue makes queues of 4 shards."""
    with serving(redis_server, "--sqs-shards", "4") as server:
        yield server


def test_create_queue_makes_sharded_queues_with_sqs_shards(spreading: Server, kq: Server, rc: redis.Redis) -> None:
    c = spreading.sqs
    url = spreading.queue()
    q = Queue(name_of(url), client=rc, prefix=PREFIX)
    assert q.shards == 4 and rc.get(f"{PREFIX}:{{{q.name}}}:shards") == b"4"
    c.send_message_batch(QueueUrl=url, Entries=[{"Id": str(i), "MessageBody": f"m{i}"} for i in range(8)])
    assert [s.waiting for s in q.shard_stats()] == [2, 2, 2, 2]
    assert spreading.count(url) == kq.count(url) == 8  # another server serves it as it is
    # a FIFO queue is sharded when its deduplication is per message group, which it can keep
    fifo = {"FifoQueue": "true", "ContentBasedDeduplication": "true"}
    one = c.create_queue(QueueName=f"f-{uuid.uuid4().hex[:10]}.fifo", Attributes=fifo)["QueueUrl"]
    grouped = c.create_queue(
        QueueName=f"f-{uuid.uuid4().hex[:10]}.fifo", Attributes={**fifo, "DeduplicationScope": "messageGroup"}
    )["QueueUrl"]
    assert Queue(name_of(one), client=rc, prefix=PREFIX).shards == 1
    assert Queue(name_of(grouped), client=rc, prefix=PREFIX).shards == 4
    err = error_of(lambda: c.set_queue_attributes(QueueUrl=grouped, Attributes={"DeduplicationScope": "queue"}))
    assert err["Error"]["Code"] == "InvalidAttributeValue" and "message group" in err["Error"]["Message"]
    got = c.get_queue_attributes(QueueUrl=grouped, AttributeNames=["DeduplicationScope"])["Attributes"]
    assert got == {"DeduplicationScope": "messageGroup"}
    # the same body in two groups: two messages (content-based deduplication within a group)
    for g in ("a", "b", "a"):
        c.send_message(QueueUrl=grouped, MessageBody="same", MessageGroupId=g)
    assert spreading.count(grouped) == 2
    # the server without the option makes unsharded ones
    assert Queue(name_of(kq.queue()), client=rc, prefix=PREFIX).shards == 1


def test_sqs_shards_needs_the_sqs_api() -> None:
    done = subprocess.run(
        [str(VENV_BIN / "keyqueue"), "--url", "redis://127.0.0.1:1", "serve", "--sqs-shards", "2"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0 and done.stderr.strip() == "Error: --sqs-shards is for the SQS API: give --sqs too"
