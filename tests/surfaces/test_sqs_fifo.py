"""SQS FIFO queues through ``keyqueue serve --sqs``, with boto3 and the aws CLI. What is SQS's
own behaviour runs against moto's SQS server too (the ``sqs`` fixture); where moto differs
from SQS, the test asserts on keyqueue alone and says why."""

from __future__ import annotations

import hashlib
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
import redis

from keyqueue import Queue

from ..support.helpers import wait_until
from . import test_sqs
from .test_sqs import PREFIX, Server, aws_cli, error_of

# the servers and clients of the SQS tests (moto's too), shared
keyqueue_server, moto_server, sqs, kq, rc = (
    test_sqs.keyqueue_server,
    test_sqs.moto_server,
    test_sqs.sqs,
    test_sqs.kq,
    test_sqs.rc,
)


def fifo_queue(s: Server, **attributes: str) -> str:
    name = f"f-{uuid.uuid4().hex[:10]}.fifo"
    return str(s.sqs.create_queue(QueueName=name, Attributes={"FifoQueue": "true", **attributes})["QueueUrl"])


def code(call: Any) -> str:
    return str(error_of(call)["Error"]["Code"])


def with_dead_letters(s: Server) -> tuple[str, str]:
    """A FIFO queue (content-based deduplication) whose messages go to a FIFO dead-letter
    queue at their second receive: both URLs."""
    dlq = fifo_queue(s)
    policy = json.dumps({"deadLetterTargetArn": s.arn(dlq), "maxReceiveCount": 1})
    return fifo_queue(s, ContentBasedDeduplication="true", RedrivePolicy=policy), dlq


def receive(s: Server, url: str, n: int = 10, **kw: Any) -> list[dict[str, Any]]:
    got = s.sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=n, AttributeNames=["All"], **kw)
    return list(got.get("Messages", []))


def test_a_fifo_queue_needs_both_the_name_and_the_attribute(sqs: Server) -> None:
    c = sqs.sqs
    name = f"f-{uuid.uuid4().hex[:10]}"
    assert code(lambda: c.create_queue(QueueName=name, Attributes={"FifoQueue": "true"})) == "InvalidParameterValue"
    url = fifo_queue(sqs)
    assert url.endswith(".fifo")
    assert c.get_queue_url(QueueName=url.rsplit("/", 1)[1])["QueueUrl"] == url
    attrs = c.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert attrs["FifoQueue"] == "true" and attrs["ContentBasedDeduplication"] == "false"
    assert attrs["DeduplicationScope"] == "queue" and attrs["FifoThroughputLimit"] == "perQueue"
    c.set_queue_attributes(QueueUrl=url, Attributes={"ContentBasedDeduplication": "true"})
    got = c.get_queue_attributes(QueueUrl=url, AttributeNames=["ContentBasedDeduplication", "FifoQueue"])
    assert got["Attributes"] == {"ContentBasedDeduplication": "true", "FifoQueue": "true"}


def test_a_fifo_name_without_the_attribute_is_refused(kq: Server) -> None:
    # SQS refuses a standard queue named *.fifo (moto creates one)
    c = kq.sqs
    name = f"f-{uuid.uuid4().hex[:10]}.fifo"
    assert code(lambda: c.create_queue(QueueName=name)) == "InvalidParameterValue"
    assert code(lambda: c.create_queue(QueueName=name, Attributes={"FifoQueue": "false"})) == "InvalidParameterValue"
    assert code(lambda: c.create_queue(QueueName="x" * 76 + ".fifo", Attributes={"FifoQueue": "true"})) == (
        "InvalidParameterValue"
    )
    # the FIFO attributes belong to FIFO queues; FifoQueue is given at creation only
    std = kq.queue()
    assert code(lambda: c.set_queue_attributes(QueueUrl=std, Attributes={"ContentBasedDeduplication": "true"})) == (
        "InvalidAttributeName"
    )
    assert code(lambda: c.create_queue(QueueName=f"s-{uuid.uuid4().hex[:10]}", Attributes={"FifoQueue": "false"})) == (
        "InvalidAttributeName"
    )
    for name in ("DeduplicationScope", "FifoThroughputLimit"):
        err = error_of(lambda: c.set_queue_attributes(QueueUrl=std, Attributes={name: "x"}))["Error"]
        assert (err["Code"], err["Message"]) == (
            "InvalidAttributeName",
            f"You can specify the {name} only when FifoQueue is set to true.",
        )
    url = fifo_queue(kq)
    c.set_queue_attributes(QueueUrl=url, Attributes={"FifoQueue": "true"})  # (what it is: a no-op)
    err = error_of(lambda: c.set_queue_attributes(QueueUrl=url, Attributes={"FifoQueue": "false"}))["Error"]
    assert (err["Code"], err["Message"]) == (
        "InvalidAttributeValue",
        "Invalid value for the parameter FifoQueue. Reason: Modifying queue type is not supported.",
    )
    assert code(lambda: c.set_queue_attributes(QueueUrl=url, Attributes={"DeduplicationScope": "x"})) == (
        "InvalidAttributeValue"
    )
    # high throughput: perMessageGroupId only with DeduplicationScope messageGroup
    per_group = {"FifoThroughputLimit": "perMessageGroupId"}
    assert code(lambda: c.set_queue_attributes(QueueUrl=url, Attributes=per_group)) == "InvalidAttributeValue"
    assert code(lambda: fifo_queue(kq, **per_group)) == "InvalidAttributeValue"
    c.set_queue_attributes(QueueUrl=url, Attributes={**per_group, "DeduplicationScope": "messageGroup"})
    got = c.get_queue_attributes(QueueUrl=url, AttributeNames=["FifoThroughputLimit", "DeduplicationScope"])
    assert got["Attributes"] == {"FifoThroughputLimit": "perMessageGroupId", "DeduplicationScope": "messageGroup"}
    # the same name again is the same queue (the booleans in any case)
    again = {"FifoQueue": "True", "ContentBasedDeduplication": "FALSE"}
    assert c.create_queue(QueueName=url.rsplit("/", 1)[1], Attributes=again)["QueueUrl"] == url
    assert code(lambda: c.create_queue(QueueName=url.rsplit("/", 1)[1], Attributes={"FifoQueue": "yes"})) == (
        "InvalidAttributeValue"
    )
    assert url in c.list_queues()["QueueUrls"]


def test_message_group_id_is_required_and_a_deduplication_id_or_content_based(sqs: Server) -> None:
    c = sqs.sqs
    url = fifo_queue(sqs)
    assert code(lambda: c.send_message(QueueUrl=url, MessageBody="a", MessageDeduplicationId="d")) == (
        "MissingParameter"
    )
    assert code(lambda: c.send_message(QueueUrl=url, MessageBody="a", MessageGroupId="g")) == "InvalidParameterValue"
    assert code(
        lambda: c.send_message(
            QueueUrl=url, MessageBody="a", MessageGroupId="g", MessageDeduplicationId="d", DelaySeconds=5
        )
    ) == ("InvalidParameterValue")
    assert sqs.count(url) == 0


def test_deduplication_over_the_window_explicit_id_over_content(sqs: Server) -> None:
    c = sqs.sqs
    url = fifo_queue(sqs, ContentBasedDeduplication="true")
    first = c.send_message(QueueUrl=url, MessageBody="same", MessageGroupId="g")
    c.send_message(QueueUrl=url, MessageBody="same", MessageGroupId="h")  # per queue, not per group
    c.send_message(QueueUrl=url, MessageBody="same", MessageGroupId="g", MessageDeduplicationId="other")
    c.send_message(QueueUrl=url, MessageBody="new", MessageGroupId="g", MessageDeduplicationId="other")
    assert sqs.count(url) == 2
    got = receive(sqs, url, 1)
    assert [m["Body"] for m in got] == ["same"]
    assert got[0]["MessageId"] == first["MessageId"]
    assert got[0]["Attributes"]["MessageDeduplicationId"] == hashlib.sha256(b"same").hexdigest()
    assert got[0]["Attributes"]["MessageGroupId"] == "g"
    c.delete_message(QueueUrl=url, ReceiptHandle=got[0]["ReceiptHandle"])
    got = receive(sqs, url, 1)
    assert [(m["Body"], m["Attributes"]["MessageDeduplicationId"]) for m in got] == [("same", "other")]


def test_deduplication_outlives_delete_not_purge_and_a_duplicate_answers_the_first(kq: Server) -> None:
    # SQS deduplicates for 5 minutes from the first send, deleted or not, and answers a
    # duplicate with the first's MessageId (moto forgets a deleted message's id and makes a new
    # one); PurgeQueue clears the deduplication too
    c = kq.sqs
    url = fifo_queue(kq)
    first = c.send_message(QueueUrl=url, MessageBody="a", MessageGroupId="g", MessageDeduplicationId="d")
    (m,) = receive(kq, url)
    c.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
    again = c.send_message(QueueUrl=url, MessageBody="b", MessageGroupId="g", MessageDeduplicationId="d")
    assert again["MessageId"] == first["MessageId"] and again["SequenceNumber"] == first["SequenceNumber"]
    assert receive(kq, url) == [] and kq.count(url) == 0
    c.purge_queue(QueueUrl=url)
    after = c.send_message(QueueUrl=url, MessageBody="c", MessageGroupId="g", MessageDeduplicationId="d")
    assert after["MessageId"] != first["MessageId"]
    c.send_message(QueueUrl=url, MessageBody="d", MessageGroupId="h", MessageDeduplicationId="e")
    assert [m["Body"] for m in receive(kq, url)] == ["c", "d"]


def test_each_group_in_order_and_blocked_while_in_flight(sqs: Server) -> None:
    c = sqs.sqs
    url = fifo_queue(sqs)
    for i in range(4):
        for g in ("a", "b"):
            c.send_message(QueueUrl=url, MessageBody=f"{g}{i}", MessageGroupId=g, MessageDeduplicationId=f"{g}{i}")
    first = receive(sqs, url, VisibilityTimeout=60)
    assert first and len(first) <= 8
    for g in ("a", "b"):  # a receive may hold several of a group: then in their order
        bodies = [m["Body"] for m in first if m["Attributes"]["MessageGroupId"] == g]
        assert bodies == [f"{g}{i}" for i in range(len(bodies))]
    # nothing more of a group while any of it is in flight
    assert receive(sqs, url) == []
    delivered = [m["Body"] for m in first]
    while len(delivered) < 8:
        for m in first:
            c.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
        first = receive(sqs, url, VisibilityTimeout=60)
        assert first
        delivered += [m["Body"] for m in first]
    for g in ("a", "b"):
        assert [b for b in delivered if b[0] == g] == [f"{g}{i}" for i in range(4)]


def test_a_released_message_comes_back_before_the_next_of_its_group(sqs: Server) -> None:
    c = sqs.sqs
    url = fifo_queue(sqs, ContentBasedDeduplication="true")
    for body in ("1", "2"):
        c.send_message(QueueUrl=url, MessageBody=body, MessageGroupId="g")
    got = receive(sqs, url, 1)
    assert [m["Body"] for m in got] == ["1"]
    c.change_message_visibility(QueueUrl=url, ReceiptHandle=got[0]["ReceiptHandle"], VisibilityTimeout=0)
    got = receive(sqs, url, 1)
    assert [m["Body"] for m in got] == ["1"] and got[0]["Attributes"]["ApproximateReceiveCount"] == "2"


def test_sequence_numbers_grow_within_the_queue(sqs: Server) -> None:
    c = sqs.sqs
    url = fifo_queue(sqs)
    sent = [
        c.send_message(QueueUrl=url, MessageBody=str(i), MessageGroupId=f"g{i % 3}", MessageDeduplicationId=str(i))
        for i in range(5)
    ]
    numbers = [s["SequenceNumber"] for s in sent]
    assert all(n.isdigit() for n in numbers)
    if sqs.kind == "keyqueue":  # (moto's are random digits, SQS's grow)
        assert [int(n) for n in numbers] == sorted(int(n) for n in numbers) and len(set(numbers)) == 5
        assert all(len(n) == 20 for n in numbers)
    got = receive(sqs, url)
    assert got and all(m["Attributes"]["SequenceNumber"] == numbers[int(m["Body"])] for m in got)


def test_a_batch_of_several_groups_keeps_each_groups_order(sqs: Server) -> None:
    c = sqs.sqs
    url = fifo_queue(sqs)
    entries = [
        {
            "Id": f"e{i}",
            "MessageBody": f"{'ab'[i % 2]}{i}",
            "MessageGroupId": "ab"[i % 2],
            "MessageDeduplicationId": str(i),
        }
        for i in range(6)
    ]
    out = c.send_message_batch(QueueUrl=url, Entries=entries)
    assert [e["Id"] for e in out["Successful"]] == [f"e{i}" for i in range(6)] and not out.get("Failed")
    assert all(e["SequenceNumber"].isdigit() for e in out["Successful"])
    if sqs.kind == "keyqueue":
        numbers = [int(e["SequenceNumber"]) for e in out["Successful"]]
        assert numbers == sorted(numbers)
    delivered: list[str] = []
    while len(delivered) < 6:
        got = receive(sqs, url)
        assert got
        delivered += [m["Body"] for m in got]
        c.delete_message_batch(
            QueueUrl=url, Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(got)]
        )
    assert [b for b in delivered if b[0] == "a"] == ["a0", "a2", "a4"]
    assert [b for b in delivered if b[0] == "b"] == ["b1", "b3", "b5"]


def test_a_batch_with_an_entry_lacking_its_group_or_deduplication_id_fails_whole(sqs: Server) -> None:
    c = sqs.sqs
    url = fifo_queue(sqs)
    ok = {"Id": "ok", "MessageBody": "a", "MessageGroupId": "g", "MessageDeduplicationId": "d1"}
    for bad in (
        {"Id": "nogroup", "MessageBody": "b", "MessageDeduplicationId": "d2"},
        {"Id": "nodedup", "MessageBody": "b", "MessageGroupId": "g"},  # (no content-based deduplication)
    ):
        refused = code(lambda: c.send_message_batch(QueueUrl=url, Entries=[ok, bad]))
        # (SQS answers InvalidParameterValue for both; moto says MissingParameter for the group)
        assert refused == "InvalidParameterValue" or sqs.kind == "moto" and refused == "MissingParameter"
    assert sqs.count(url) == 0


def test_a_batch_entry_with_its_own_delay_fails_alone(kq: Server) -> None:
    c = kq.sqs
    url = fifo_queue(kq, ContentBasedDeduplication="true")
    out = c.send_message_batch(
        QueueUrl=url,
        Entries=[
            {"Id": "ok", "MessageBody": "a", "MessageGroupId": "g"},
            {"Id": "delayed", "MessageBody": "c", "MessageGroupId": "g", "DelaySeconds": 3},
        ],
    )
    assert [e["Id"] for e in out["Successful"]] == ["ok"]
    assert {e["Id"]: e["Code"] for e in out["Failed"]} == {"delayed": "InvalidParameterValue"}


def test_the_json_error_types_are_sqs_own(kq: Server) -> None:
    """The JSON protocol's __type of the two common errors, as SQS names them (boto3's
    QueryErrorCode); the query code (boto3's Code) is the short one."""
    c = kq.sqs
    url = fifo_queue(kq)
    missing = error_of(lambda: c.send_message(QueueUrl=url, MessageBody="a", MessageDeduplicationId="d"))["Error"]
    assert (missing["Code"], missing["QueryErrorCode"]) == ("MissingParameter", "MissingRequiredParameterException")
    invalid = error_of(lambda: c.send_message(QueueUrl=url, MessageBody="a", MessageGroupId="g"))["Error"]
    assert (invalid["Code"], invalid["QueryErrorCode"]) == ("InvalidParameterValue", "InvalidParameterValueException")


def test_queue_delay_applies_and_standard_queues_refuse_fifo_parameters(kq: Server) -> None:
    c = kq.sqs
    url = fifo_queue(kq, DelaySeconds="1", ContentBasedDeduplication="true")
    c.send_message(QueueUrl=url, MessageBody="later", MessageGroupId="g")
    assert kq.count(url, "ApproximateNumberOfMessagesDelayed") == 1
    got = c.receive_message(QueueUrl=url, WaitTimeSeconds=5).get("Messages", [])
    assert [m["Body"] for m in got] == ["later"]
    std = kq.queue()
    assert code(lambda: c.send_message(QueueUrl=std, MessageBody="a", MessageDeduplicationId="d")) == (
        "InvalidParameterValue"
    )
    # a dead-letter queue is of its source's kind
    fifo_policy = json.dumps({"deadLetterTargetArn": kq.arn(url), "maxReceiveCount": 2})
    std_policy = json.dumps({"deadLetterTargetArn": kq.arn(kq.queue()), "maxReceiveCount": 2})
    assert code(lambda: c.set_queue_attributes(QueueUrl=std, Attributes={"RedrivePolicy": fifo_policy})) == (
        "InvalidParameterValue"
    )
    assert code(lambda: c.set_queue_attributes(QueueUrl=url, Attributes={"RedrivePolicy": std_policy})) == (
        "InvalidParameterValue"
    )


def test_a_fifo_dead_letter_queue_keeps_the_group(sqs: Server) -> None:
    c = sqs.sqs
    src, dlq = with_dead_letters(sqs)
    for body in ("a1", "a2"):
        c.send_message(QueueUrl=src, MessageBody=body, MessageGroupId="a")
    first = receive(sqs, src, 1, VisibilityTimeout=1)
    assert [m["Body"] for m in first] == ["a1"]
    # out of receives, a1 goes to the dead-letter queue; its group goes on with a2
    nxt = wait_until(lambda: receive(sqs, src, 1, WaitTimeSeconds=1), 30)
    assert [m["Body"] for m in nxt] == ["a2"]
    dead = wait_until(lambda: receive(sqs, dlq, 1, WaitTimeSeconds=1), 30)
    assert [(m["Body"], m["Attributes"]["MessageGroupId"]) for m in dead] == [("a1", "a")]
    assert dead[0]["MessageId"] == first[0]["MessageId"]


def test_a_move_task_puts_fifo_dead_letters_back_in_their_groups(kq: Server) -> None:
    c = kq.sqs
    src, dlq = with_dead_letters(kq)
    for body, group in (("a1", "a"), ("b1", "b")):
        c.send_message(QueueUrl=src, MessageBody=body, MessageGroupId=group)
    assert len(receive(kq, src, VisibilityTimeout=1)) == 2
    wait_until(lambda: not receive(kq, src, WaitTimeSeconds=1) and kq.count(dlq) == 2, 30)
    assert code(lambda: c.start_message_move_task(SourceArn=kq.arn(dlq), DestinationArn=kq.arn(kq.queue()))) == (
        "InvalidParameterValue"
    )
    c.start_message_move_task(SourceArn=kq.arn(dlq))
    wait_until(lambda: c.list_message_move_tasks(SourceArn=kq.arn(dlq))["Results"][0]["Status"] == "COMPLETED", 30)
    back = receive(kq, src)
    assert sorted((m["Body"], m["Attributes"]["MessageGroupId"]) for m in back) == [("a1", "a"), ("b1", "b")]
    assert kq.count(dlq) == 0


def test_deduplication_scope_message_group(kq: Server) -> None:
    c = kq.sqs
    url = fifo_queue(kq, DeduplicationScope="messageGroup", FifoThroughputLimit="perMessageGroupId")
    for g in ("a", "b", "a"):
        c.send_message(QueueUrl=url, MessageBody=g, MessageGroupId=g, MessageDeduplicationId="d")
    assert kq.count(url) == 2
    attrs = c.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert attrs["DeduplicationScope"] == "messageGroup" and attrs["FifoThroughputLimit"] == "perMessageGroupId"


def test_the_library_sees_a_fifo_queue_as_a_grouped_queue(kq: Server, rc: redis.Redis) -> None:
    c = kq.sqs
    url = fifo_queue(kq, ContentBasedDeduplication="true")
    name = url.rsplit("/", 1)[1]
    c.send_message(QueueUrl=url, MessageBody="one", MessageGroupId="g")
    c.send_message(QueueUrl=url, MessageBody="two", MessageGroupId="g")
    q = Queue(name, client=rc, prefix=PREFIX)
    assert (
        q.settings.group_concurrency == 1
        and q.settings.dedup_window == 300
        and len(q) == 2
        and q.groups() == [("g", 1, 1)]
    )
    m = q.claim()
    assert m is not None and m.body == b"one" and m.group == "g"
    assert q.claim() is None
    assert m.ack()
    q.enqueue("three", group="g")
    got: list[tuple[str, str]] = []
    while len(got) < 2:
        batch = receive(kq, url)
        assert batch
        got += [(x["Body"], x["Attributes"]["MessageGroupId"]) for x in batch]
        for x in batch:
            c.delete_message(QueueUrl=url, ReceiptHandle=x["ReceiptHandle"])
    assert got == [("two", "g"), ("three", "g")]


@pytest.mark.timeout(300)  # aws CLI processes
def test_the_aws_cli_sends_and_receives_in_order(kq: Server, tmp_path: Path) -> None:
    aws = aws_cli(kq.endpoint, tmp_path)
    name = f"cli-{uuid.uuid4().hex[:8]}.fifo"
    url = aws(
        "create-queue",
        "--queue-name",
        name,
        "--attributes",
        "FifoQueue=true,ContentBasedDeduplication=true",
    )["QueueUrl"]
    sent = [aws("send-message", "--queue-url", url, "--message-body", b, "--message-group-id", "g") for b in ("x", "y")]
    assert int(sent[0]["SequenceNumber"]) < int(sent[1]["SequenceNumber"])
    got = aws("receive-message", "--queue-url", url, "--max-number-of-messages", "10", "--attribute-names", "All")[
        "Messages"
    ]
    assert [(m["Body"], m["Attributes"]["SequenceNumber"]) for m in got] == [("x", sent[0]["SequenceNumber"])]
