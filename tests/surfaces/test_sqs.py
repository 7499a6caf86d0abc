"""The SQS wire API with real clients: boto3 and the aws CLI against ``keyqueue serve --sqs``
on a test redis-server. Tests of plain SQS behaviour run against moto's SQS server too (the
``sqs`` fixture), so they are shown to encode SQS's behaviour, not keyqueue's."""

from __future__ import annotations

import base64
import contextlib
import functools
import hashlib
import json
import os
import struct
import subprocess
import sys
import threading
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable, Iterator
from xml.etree import ElementTree

import boto3
import httpx
import pytest
import redis
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.exceptions import ClientError

from keyqueue import Queue
from keyqueue.server import RedisServer, free_port

from ..support.helpers import run_threads, wait_until

KEY_ID, SECRET = "AKIAKEYQUEUETEST", "kq-test-secret/0123456789abcdef"
PREFIX = "sqst"
VENV_BIN = Path(sys.executable).parent


def client(endpoint: str, key: str = KEY_ID, secret: str = SECRET) -> Any:
    return boto3.client(
        "sqs", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id=key, aws_secret_access_key=secret
    )


class Server:
    def __init__(self, kind: str, endpoint: str) -> None:
        self.kind, self.endpoint = kind, endpoint
        self.sqs = client(endpoint)

    def queue(self, **attributes: str) -> str:
        """A new queue (a unique name), its URL."""
        name = f"t-{uuid.uuid4().hex[:10]}"
        return str(self.sqs.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"])

    def arn(self, url: str) -> str:
        return str(self.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"])

    def count(self, url: str, name: str = "ApproximateNumberOfMessages") -> int:
        return int(self.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=[name])["Attributes"][name])


@contextlib.contextmanager
def serving(redis_server: RedisServer, *options: str) -> Iterator[Server]:
    """``keyqueue serve --sqs`` (with these more options) on a free port, once it answers."""
    port = free_port()
    env = dict(os.environ, KEYQUEUE_SQS_ACCESS_KEY_ID=KEY_ID, KEYQUEUE_SQS_SECRET_ACCESS_KEY=SECRET)
    proc = subprocess.Popen(
        [
            str(VENV_BIN / "keyqueue"),
            "--url",
            redis_server.url,
            "--prefix",
            PREFIX,
            "serve",
            "--sqs",
            *options,
            "--port",
            str(port),
            "--log-level",
            "warning",
        ],
        env=env,
    )
    server = Server("keyqueue", f"http://127.0.0.1:{port}")

    def answers() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"keyqueue serve exited with {proc.returncode}")
        try:
            server.sqs.list_queues()
            return True
        except Exception:
            return False

    try:
        wait_until(answers, 60, 0.2)
        yield server
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture(scope="module")
def keyqueue_server(redis_server: RedisServer) -> Iterator[Server]:
    with serving(redis_server) as server:
        yield server


@pytest.fixture(scope="module")
def moto_server() -> Iterator[Server]:
    from moto.server import ThreadedMotoServer

    port = free_port()
    moto = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    moto.start()
    try:
        yield Server("moto", f"http://127.0.0.1:{port}")
    finally:
        moto.stop()


@pytest.fixture(params=["keyqueue", "moto"])
def sqs(request: pytest.FixtureRequest) -> Server:
    """Each plain-SQS test runs against keyqueue and against moto."""
    return request.getfixturevalue(f"{request.param}_server")  # type: ignore[no-any-return]


@pytest.fixture
def kq(keyqueue_server: Server) -> Server:
    return keyqueue_server


@pytest.fixture
def rc(redis_server: RedisServer) -> Iterator[redis.Redis]:
    client = redis.Redis(port=redis_server.port)
    yield client
    client.close()


def error_of(call: Callable[[], Any]) -> dict[str, Any]:
    with pytest.raises(ClientError) as info:
        call()
    return info.value.response  # type: ignore[no-any-return]


def name_of(url: str) -> str:
    return url.rsplit("/", 1)[1]


# -- digests computed here, independently of keyqueue/sqs/md5.py ---------------------------


def expected_attributes_md5(attributes: dict[str, dict[str, Any]]) -> str:
    """AWS's documented encoding, written out step by step from the wire form."""
    out = b""
    for name in sorted(attributes):
        a = attributes[name]
        if "BinaryValue" in a:
            value = a["BinaryValue"] if isinstance(a["BinaryValue"], bytes) else base64.b64decode(a["BinaryValue"])
            transport = 2
        else:
            value, transport = a["StringValue"].encode("utf-8"), 1
        for part in (name.encode("utf-8"), a["DataType"].encode("utf-8")):
            out += len(part).to_bytes(4, "big") + part
        out += bytes([transport]) + struct.pack("!I", len(value)) + value
    return hashlib.md5(out).hexdigest()


ATTRIBUTES = {
    "colour": {"DataType": "String", "StringValue": "blau \u00fc \U0001f600"},
    "count": {"DataType": "Number", "StringValue": "-12.5e3"},
    "blob": {"DataType": "Binary", "BinaryValue": bytes(range(256))},
    "kind": {"DataType": "String.custom-type", "StringValue": "x"},
}


# -- plain SQS behaviour: keyqueue and moto ----------------------------------------------


def test_queue_lifecycle_urls_tags_and_attributes(sqs: Server) -> None:
    c = sqs.sqs
    url = sqs.queue(VisibilityTimeout="45", DelaySeconds="1")
    name = name_of(url)
    if sqs.kind == "keyqueue":
        assert url == f"{sqs.endpoint}/000000000000/{name}"
    assert c.get_queue_url(QueueName=name)["QueueUrl"] == url
    assert c.create_queue(QueueName=name, Attributes={"VisibilityTimeout": "45"})["QueueUrl"] == url  # same: fine
    assert url in c.list_queues(QueueNamePrefix=name[:6]).get("QueueUrls", [])
    assert "QueueUrls" not in c.list_queues(QueueNamePrefix="no-such-prefix-")
    attrs = c.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert (attrs["VisibilityTimeout"], attrs["DelaySeconds"]) == ("45", "1")
    assert attrs["QueueArn"].endswith(f":{name}") and attrs["QueueArn"].startswith("arn:aws:sqs:us-east-1:")
    assert int(float(attrs["CreatedTimestamp"])) > 1_600_000_000
    c.set_queue_attributes(QueueUrl=url, Attributes={"VisibilityTimeout": "60", "ReceiveMessageWaitTimeSeconds": "2"})
    got = c.get_queue_attributes(QueueUrl=url, AttributeNames=["VisibilityTimeout", "ReceiveMessageWaitTimeSeconds"])
    assert got["Attributes"] == {"VisibilityTimeout": "60", "ReceiveMessageWaitTimeSeconds": "2"}
    # SQS's attribute names that a standard queue lacks are left out, not refused (a client asking
    # FifoQueue to tell the kinds apart); a name SQS does not have is refused
    fifo_names = ["FifoQueue", "ContentBasedDeduplication", "DeduplicationScope", "FifoThroughputLimit"]
    assert not c.get_queue_attributes(QueueUrl=url, AttributeNames=fifo_names).get("Attributes")
    assert (
        error_of(lambda: c.get_queue_attributes(QueueUrl=url, AttributeNames=["Fifo"]))["Error"]["Code"]
        == "InvalidAttributeName"
    )
    c.tag_queue(QueueUrl=url, Tags={"team": "a", "env": "test"})
    c.untag_queue(QueueUrl=url, TagKeys=["env"])
    assert c.list_queue_tags(QueueUrl=url)["Tags"] == {"team": "a"}
    family = [c.create_queue(QueueName=f"{name}-p{i}")["QueueUrl"] for i in range(3)]
    first = c.list_queues(QueueNamePrefix=f"{name}-p", MaxResults=2)
    rest = c.list_queues(QueueNamePrefix=f"{name}-p", MaxResults=2, NextToken=first["NextToken"])
    assert len(first["QueueUrls"]) == 2 and "NextToken" not in rest
    assert sorted(first["QueueUrls"] + rest["QueueUrls"]) == sorted(family)
    c.delete_queue(QueueUrl=url)
    err = error_of(lambda: c.get_queue_url(QueueName=name))
    assert err["Error"]["Code"] == "AWS.SimpleQueueService.NonExistentQueue"
    assert err["Error"]["QueryErrorCode"] == "QueueDoesNotExist"
    assert (
        error_of(lambda: c.send_message(QueueUrl=url, MessageBody="x"))["Error"]["QueryErrorCode"]
        == "QueueDoesNotExist"
    )


def test_a_queue_url_that_names_no_queue(sqs: Server) -> None:
    """A URL without /ACCOUNT/NAME names no queue: QueueDoesNotExist, which clients catch."""
    c = sqs.sqs
    for url in (
        "http://whatever-incorrect-queue-address",
        f"{sqs.endpoint}/",
        f"{sqs.endpoint}/000000000000/no-such-queue-{uuid.uuid4().hex[:8]}",
    ):
        with pytest.raises(c.exceptions.QueueDoesNotExist) as info:
            c.send_message(QueueUrl=url, MessageBody="x")
        err = info.value.response
        assert (err["Error"]["Code"], err["Error"]["QueryErrorCode"], err["ResponseMetadata"]["HTTPStatusCode"]) == (
            "AWS.SimpleQueueService.NonExistentQueue",
            "QueueDoesNotExist",
            400,
        ), url


def test_a_bare_queue_name_serves_as_its_url(sqs: Server) -> None:
    """SQS takes a queue's bare name wherever it takes a QueueUrl (boto3's ``sqs.Queue("emails")``)."""
    c = sqs.sqs
    dlq = sqs.queue()
    name = name_of(sqs.queue())
    policy = json.dumps({"deadLetterTargetArn": sqs.arn(dlq), "maxReceiveCount": 5})
    c.set_queue_attributes(QueueUrl=name, Attributes={"VisibilityTimeout": "40", "RedrivePolicy": policy})
    assert c.get_queue_attributes(QueueUrl=name, AttributeNames=["VisibilityTimeout"])["Attributes"] == {
        "VisibilityTimeout": "40"
    }
    assert [name_of(u) for u in c.list_dead_letter_source_queues(QueueUrl=name_of(dlq))["queueUrls"]] == [name]
    c.tag_queue(QueueUrl=name, Tags={"team": "a", "env": "test"})
    c.untag_queue(QueueUrl=name, TagKeys=["env"])
    assert c.list_queue_tags(QueueUrl=name)["Tags"] == {"team": "a"}
    c.send_message(QueueUrl=name, MessageBody="one")
    c.send_message_batch(QueueUrl=name, Entries=[{"Id": "a", "MessageBody": "two"}, {"Id": "b", "MessageBody": "3"}])
    got: list[dict[str, Any]] = []
    wait_until(
        lambda: (
            got.extend(c.receive_message(QueueUrl=name, MaxNumberOfMessages=10, WaitTimeSeconds=1).get("Messages", []))
            or len(got) == 3
        )
    )
    handles = [m["ReceiptHandle"] for m in got]
    c.change_message_visibility(QueueUrl=name, ReceiptHandle=handles[0], VisibilityTimeout=60)
    changed = c.change_message_visibility_batch(
        QueueUrl=name, Entries=[{"Id": "h1", "ReceiptHandle": handles[1], "VisibilityTimeout": 60}]
    )
    assert [s["Id"] for s in changed["Successful"]] == ["h1"] and not changed.get("Failed")
    c.delete_message(QueueUrl=name, ReceiptHandle=handles[0])
    deleted = c.delete_message_batch(
        QueueUrl=name, Entries=[{"Id": "h1", "ReceiptHandle": handles[1]}, {"Id": "h2", "ReceiptHandle": handles[2]}]
    )
    assert len(deleted["Successful"]) == 2 and not deleted.get("Failed")
    assert sqs.count(name) == 0 and sqs.count(name, "ApproximateNumberOfMessagesNotVisible") == 0
    resource = boto3.resource(
        "sqs",
        endpoint_url=sqs.endpoint,
        region_name="us-east-1",
        aws_access_key_id=KEY_ID,
        aws_secret_access_key=SECRET,
    )
    q = resource.Queue(name)
    q.send_message(MessageBody="four")
    assert q.attributes["ApproximateNumberOfMessages"] == "1"
    q.purge()
    assert sqs.count(name) == 0
    q.delete()
    with pytest.raises(c.exceptions.QueueDoesNotExist):
        c.get_queue_url(QueueName=name)
    with pytest.raises(c.exceptions.QueueDoesNotExist):  # a bare name of no queue is no queue
        c.send_message(QueueUrl=name, MessageBody="x")


def test_send_receive_delete_with_attributes_and_md5s(sqs: Server) -> None:
    c = sqs.sqs
    url = sqs.queue()
    body = 'h\u00e9llo {"json": true} \U0001f600'
    sent = c.send_message(QueueUrl=url, MessageBody=body, MessageAttributes=ATTRIBUTES)
    assert sent["MD5OfMessageBody"] == hashlib.md5(body.encode()).hexdigest()
    assert sent["MD5OfMessageAttributes"] == expected_attributes_md5(ATTRIBUTES)
    before = time.time()
    got = c.receive_message(
        QueueUrl=url, MaxNumberOfMessages=10, AttributeNames=["All"], MessageAttributeNames=["All"]
    )["Messages"]
    assert len(got) == 1
    m = got[0]
    assert (m["Body"], m["MessageId"]) == (body, sent["MessageId"])
    assert m["MD5OfBody"] == sent["MD5OfMessageBody"]
    assert m["MessageAttributes"] == ATTRIBUTES
    assert m["MD5OfMessageAttributes"] == expected_attributes_md5(m["MessageAttributes"])
    a = m["Attributes"]
    assert a["ApproximateReceiveCount"] == "1"
    assert abs(int(a["SentTimestamp"]) / 1000 - before) < 60
    assert int(a["ApproximateFirstReceiveTimestamp"]) >= int(a["SentTimestamp"])
    # only the attributes asked for, and the digest of those
    c.change_message_visibility(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"], VisibilityTimeout=0)
    again = c.receive_message(QueueUrl=url, MessageAttributeNames=["colour", "co*"], WaitTimeSeconds=5)["Messages"][0]
    assert set(again["MessageAttributes"]) == {"colour"}
    assert again["MD5OfMessageAttributes"] == expected_attributes_md5({"colour": ATTRIBUTES["colour"]})
    assert "Attributes" not in again and "MessageAttributes" not in c.receive_message(QueueUrl=url)
    c.delete_message(QueueUrl=url, ReceiptHandle=again["ReceiptHandle"])
    assert sqs.count(url) == 0 and sqs.count(url, "ApproximateNumberOfMessagesNotVisible") == 0


def test_message_attribute_names_by_prefix(sqs: Server) -> None:
    """``X.*`` is the prefix X (Custom.* takes Custom1), not the names starting with 'X.'."""
    c = sqs.sqs
    url = sqs.queue()
    names = ["Custom1", "Custom2", "Custom.a", "Other"]
    sent = {n: {"DataType": "String", "StringValue": n.lower()} for n in names}
    c.send_message(QueueUrl=url, MessageBody="m", MessageAttributes=sent)

    def selected(*wanted: str) -> dict[str, Any]:
        m = c.receive_message(QueueUrl=url, MessageAttributeNames=list(wanted), VisibilityTimeout=0)["Messages"][0]
        if "MessageAttributes" in m:
            assert m["MD5OfMessageAttributes"] == expected_attributes_md5(m["MessageAttributes"])
        return m.get("MessageAttributes", {})  # type: ignore[no-any-return]

    assert set(selected("Custom.*")) == {"Custom1", "Custom2", "Custom.a"}
    assert set(selected("Other", "Custom2.*")) == {"Other", "Custom2"}
    assert selected(".*") == selected("All") == sent
    assert selected("Cust*", "Custom") == {}
    if sqs.kind == "keyqueue":  # SQS takes '*' alone for every attribute too; moto returns none
        assert selected("*") == sent
    c = sqs.sqs
    url = sqs.queue()
    entries = [{"Id": f"m{i}", "MessageBody": f"body {i}"} for i in range(10)]
    entries[3]["DelaySeconds"] = 1
    entries[4]["MessageAttributes"] = {"k": {"DataType": "String", "StringValue": "v"}}
    sent = c.send_message_batch(QueueUrl=url, Entries=entries)
    assert not sent.get("Failed") and sorted(s["Id"] for s in sent["Successful"]) == sorted(e["Id"] for e in entries)
    by_id = {s["Id"]: s for s in sent["Successful"]}
    assert by_id["m4"]["MD5OfMessageAttributes"] == expected_attributes_md5(entries[4]["MessageAttributes"])
    assert all(
        s["MD5OfMessageBody"] == hashlib.md5(f"body {s['Id'][1:]}".encode()).hexdigest() for s in sent["Successful"]
    )
    got: list[dict[str, Any]] = []
    wait_until(
        lambda: (
            got.extend(c.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1).get("Messages", []))
            or len(got) == 10
        )
    )
    assert sorted(m["Body"] for m in got) == sorted(e["MessageBody"] for e in entries)
    handles = [{"Id": f"d{i}", "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(got)]
    deleted = c.delete_message_batch(QueueUrl=url, Entries=handles)
    assert len(deleted["Successful"]) == 10 and not deleted.get("Failed")
    assert sqs.count(url, "ApproximateNumberOfMessagesNotVisible") == 0

    def code(call: Callable[[], Any]) -> str:
        return str(error_of(call)["Error"]["QueryErrorCode"])

    eleven = [{"Id": str(i), "MessageBody": "x"} for i in range(11)]
    assert code(lambda: c.send_message_batch(QueueUrl=url, Entries=eleven)) == "TooManyEntriesInBatchRequest"
    twice = [{"Id": "a", "MessageBody": "x"}, {"Id": "a", "MessageBody": "y"}]
    assert code(lambda: c.send_message_batch(QueueUrl=url, Entries=twice)) == "BatchEntryIdsNotDistinct"
    assert code(lambda: c.send_message_batch(QueueUrl=url, Entries=[])) == "EmptyBatchRequest"
    assert code(lambda: c.delete_message_batch(QueueUrl=url, Entries=[])) == "EmptyBatchRequest"
    bad_id = [{"Id": "a b", "MessageBody": "x"}]
    assert code(lambda: c.send_message_batch(QueueUrl=url, Entries=bad_id)) == "InvalidBatchEntryId"
    assert sqs.count(url) == 0  # a refused batch sends nothing


def test_messages_up_to_1_mib(sqs: Server) -> None:
    """SQS's limit is 1 MiB (MaximumMessageSize 1,024-1,048,576, default 1,048,576), with its texts."""
    c = sqs.sqs
    url = sqs.queue()
    assert c.get_queue_attributes(QueueUrl=url, AttributeNames=["MaximumMessageSize"])["Attributes"] == {
        "MaximumMessageSize": "1048576"
    }
    # 1 MiB of ASCII, and 1 MiB of UTF-8 that botocore writes as 3 MiB of JSON (every 'é' is \u00e9)
    for text in ("x" * 1_048_576, "\u00e9" * 524_288):
        c.send_message(QueueUrl=url, MessageBody=text)
        got = c.receive_message(QueueUrl=url, WaitTimeSeconds=5)["Messages"][0]
        assert got["Body"] == text
        c.delete_message(QueueUrl=url, ReceiptHandle=got["ReceiptHandle"])

    def error(call: Callable[[], Any]) -> tuple[str, str]:
        err = error_of(call)["Error"]
        return err["Code"], err["Message"]

    assert error(lambda: c.send_message(QueueUrl=url, MessageBody="x" * 1_048_577)) == (
        "InvalidParameterValue",
        "One or more parameters are invalid. Reason: Message must be shorter than 1048576 bytes.",
    )
    entries = [{"Id": str(i), "MessageBody": "x" * 104_858} for i in range(10)]
    assert error(lambda: c.send_message_batch(QueueUrl=url, Entries=entries)) == (
        "AWS.SimpleQueueService.BatchRequestTooLong",
        "Batch requests cannot be longer than 1048576 bytes. You have sent 1048580 bytes.",
    )
    c.set_queue_attributes(QueueUrl=url, Attributes={"MaximumMessageSize": "500000"})
    assert c.get_queue_attributes(QueueUrl=url, AttributeNames=["MaximumMessageSize"])["Attributes"] == {
        "MaximumMessageSize": "500000"
    }
    assert error(lambda: c.send_message(QueueUrl=url, MessageBody="x" * 500_001))[1].endswith(
        "Message must be shorter than 500000 bytes."
    )
    for size in ("1023", "1048577"):
        assert (
            error(lambda: c.create_queue(QueueName=f"{name_of(url)}-big", Attributes={"MaximumMessageSize": size}))[0]
            == "InvalidAttributeValue"
        ), size
    assert sqs.count(url) == 0


def test_sqs_error_texts_for_attributes_and_tags(sqs: Server) -> None:
    """SQS's codes and wording for a bad attribute name or type, too many tags, no tag keys."""
    c = sqs.sqs
    url = sqs.queue()

    def error(call: Callable[[], Any]) -> tuple[str, str]:
        err = error_of(call)["Error"]
        return err["Code"], err["Message"]

    def send(name: str, data_type: str) -> Callable[[], Any]:
        return lambda: c.send_message(
            QueueUrl=url, MessageBody="x", MessageAttributes={name: {"DataType": data_type, "StringValue": "v"}}
        )

    assert error(send("a b", "String")) == (
        "InvalidParameterValue",
        "The message attribute name 'a b' is invalid. "
        "Attribute name can contain A-Z, a-z, 0-9, underscore (_), hyphen (-), "
        "and period (.) characters.",
    )
    assert error(send("ab", "Text.x")) == (
        "InvalidParameterValue",
        "The message attribute 'ab' has an invalid "
        "message attribute type, the set of supported type prefixes is Binary, "
        "Number, and String.",
    )
    assert error(lambda: c.tag_queue(QueueUrl=url, Tags={f"k{i}": "v" for i in range(51)})) == (
        "InvalidParameterValue",
        f"Too many tags added for queue {name_of(url)}.",
    )
    assert error(lambda: c.untag_queue(QueueUrl=url, TagKeys=[])) == (
        "InvalidParameterValue",
        "Tag keys must be between 1 and 128 characters in length.",
    )
    assert not c.list_queue_tags(QueueUrl=url).get("Tags")


def test_receive_parameter_limits(sqs: Server) -> None:
    c = sqs.sqs
    url = sqs.queue()
    for kwargs in (
        {"MaxNumberOfMessages": 11},
        {"MaxNumberOfMessages": 0},
        {"WaitTimeSeconds": 21},
        {"VisibilityTimeout": 43_201},
    ):
        err = error_of(lambda: c.receive_message(QueueUrl=url, **kwargs))
        assert err["Error"]["Code"] == "InvalidParameterValue", kwargs
    err = error_of(lambda: c.create_queue(QueueName="bad.name"))
    assert err["Error"]["Code"] == "InvalidParameterValue"
    err = error_of(lambda: c.create_queue(QueueName=name_of(url), Attributes={"VisibilityTimeout": "99"}))
    assert err["Error"]["Code"] == "QueueAlreadyExists" and err["Error"]["QueryErrorCode"] == "QueueNameExists"
    err = error_of(lambda: c.delete_message(QueueUrl=url, ReceiptHandle="not-a-handle"))
    assert err["Error"]["Code"] == "ReceiptHandleIsInvalid"


def test_long_poll_returns_a_message_sent_from_another_thread(sqs: Server) -> None:
    c = sqs.sqs
    url = sqs.queue()
    sender = client(sqs.endpoint)
    t = threading.Timer(1.0, lambda: sender.send_message(QueueUrl=url, MessageBody="late"))
    started = time.monotonic()
    t.start()
    got = c.receive_message(QueueUrl=url, WaitTimeSeconds=15).get("Messages", [])
    t.join()
    assert [m["Body"] for m in got] == ["late"]
    assert 0.9 <= time.monotonic() - started < 14  # it waited for the message, and not for the whole wait


def test_visibility_expiry_redelivers_with_the_receive_count(sqs: Server) -> None:
    c = sqs.sqs
    url = sqs.queue()
    c.send_message(QueueUrl=url, MessageBody="again")
    first = c.receive_message(QueueUrl=url, VisibilityTimeout=1, AttributeNames=["All"])["Messages"][0]
    assert "Messages" not in c.receive_message(QueueUrl=url)  # invisible for now

    def redelivered() -> list[dict[str, Any]]:
        return c.receive_message(QueueUrl=url, WaitTimeSeconds=1, AttributeNames=["All"]).get("Messages", [])

    second = wait_until(redelivered, 30)[0]
    assert second["MessageId"] == first["MessageId"] and second["ReceiptHandle"] != first["ReceiptHandle"]
    assert second["Attributes"]["ApproximateReceiveCount"] == "2"
    assert (
        second["Attributes"]["ApproximateFirstReceiveTimestamp"]
        == first["Attributes"]["ApproximateFirstReceiveTimestamp"]
    )
    assert second["Attributes"]["SentTimestamp"] == first["Attributes"]["SentTimestamp"]
    c.delete_message(QueueUrl=url, ReceiptHandle=second["ReceiptHandle"])
    assert sqs.count(url) == 0 and sqs.count(url, "ApproximateNumberOfMessagesNotVisible") == 0


def test_change_visibility_and_visibility_zero(sqs: Server) -> None:
    c = sqs.sqs
    url = sqs.queue()
    c.send_message(QueueUrl=url, MessageBody="m")
    m = c.receive_message(QueueUrl=url, VisibilityTimeout=0)["Messages"][0]  # visible again at once
    m = c.receive_message(QueueUrl=url, VisibilityTimeout=60, AttributeNames=["All"])["Messages"][0]
    assert m["Attributes"]["ApproximateReceiveCount"] == "2"
    c.change_message_visibility(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"], VisibilityTimeout=0)
    m = c.receive_message(QueueUrl=url, VisibilityTimeout=60)["Messages"][0]
    c.change_message_visibility_batch(
        QueueUrl=url, Entries=[{"Id": "a", "ReceiptHandle": m["ReceiptHandle"], "VisibilityTimeout": 1}]
    )
    wait_until(lambda: c.receive_message(QueueUrl=url, WaitTimeSeconds=1).get("Messages"), 30)
    err = error_of(
        lambda: c.change_message_visibility(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"], VisibilityTimeout=43_201)
    )
    assert err["Error"]["Code"] == "InvalidParameterValue"
    # a queue whose VisibilityTimeout is 0: every receive leaves the message visible
    zero = sqs.queue(VisibilityTimeout="0")
    assert c.get_queue_attributes(QueueUrl=zero, AttributeNames=["VisibilityTimeout"])["Attributes"] == {
        "VisibilityTimeout": "0"
    }
    c.send_message(QueueUrl=zero, MessageBody="z")
    counts = [
        c.receive_message(QueueUrl=zero, AttributeNames=["All"])["Messages"][0]["Attributes"]["ApproximateReceiveCount"]
        for _ in range(2)
    ]
    assert counts == ["1", "2"]


def test_delay_seconds_hides_a_message_until_due(sqs: Server) -> None:
    c = sqs.sqs
    url = sqs.queue()
    sent_at = time.monotonic()
    c.send_message(QueueUrl=url, MessageBody="later", DelaySeconds=2)
    assert "Messages" not in c.receive_message(QueueUrl=url)
    assert sqs.count(url, "ApproximateNumberOfMessagesDelayed") == 1
    got = wait_until(lambda: c.receive_message(QueueUrl=url, WaitTimeSeconds=1).get("Messages"), 30)
    assert got[0]["Body"] == "later" and time.monotonic() - sent_at >= 1.9


def test_purge_queue_empties_it(sqs: Server) -> None:
    c = sqs.sqs
    url = sqs.queue()
    c.send_message_batch(QueueUrl=url, Entries=[{"Id": str(i), "MessageBody": "x"} for i in range(5)])
    c.receive_message(QueueUrl=url, MaxNumberOfMessages=2)
    c.purge_queue(QueueUrl=url)
    assert sqs.count(url) == 0 and sqs.count(url, "ApproximateNumberOfMessagesNotVisible") == 0


def test_redrive_policy_moves_a_message_to_the_dead_letter_queue(sqs: Server) -> None:
    c = sqs.sqs
    dlq = sqs.queue()
    policy = json.dumps({"deadLetterTargetArn": sqs.arn(dlq), "maxReceiveCount": 2})
    src = sqs.queue(RedrivePolicy=policy)
    c.send_message(
        QueueUrl=src, MessageBody="poison", MessageAttributes={"k": {"DataType": "String", "StringValue": "v"}}
    )
    sent_id = first = None
    for _ in range(2):  # two receives allowed; each lets the visibility timeout pass
        m = wait_until(
            lambda: c.receive_message(QueueUrl=src, VisibilityTimeout=1, WaitTimeSeconds=1, AttributeNames=["All"]).get(
                "Messages"
            ),
            30,
        )[0]
        sent_id = sent_id or m["MessageId"]
        first = first or m["Attributes"]["ApproximateFirstReceiveTimestamp"]
    # the third receive finds it out of receives: it goes to the dead-letter queue instead
    dead = wait_until(
        lambda: (
            c.receive_message(QueueUrl=src, WaitTimeSeconds=1).get("Messages") is None
            and c.receive_message(
                QueueUrl=dlq, WaitTimeSeconds=1, MessageAttributeNames=["All"], AttributeNames=["All"]
            ).get("Messages")
        ),
        30,
    )[0]
    assert dead["Body"] == "poison" and dead["MessageId"] == sent_id
    # its receives and first receive go with it, as in SQS: 2 in the source, then this one
    assert (dead["Attributes"]["ApproximateReceiveCount"], dead["Attributes"]["ApproximateFirstReceiveTimestamp"]) == (
        "3",
        first,
    )
    assert dead["MessageAttributes"] == {"k": {"DataType": "String", "StringValue": "v"}}
    assert json.loads(
        c.get_queue_attributes(QueueUrl=src, AttributeNames=["RedrivePolicy"])["Attributes"]["RedrivePolicy"]
    ) == json.loads(policy)
    assert c.list_dead_letter_source_queues(QueueUrl=dlq)["queueUrls"] == [src]


def test_message_retention_period(sqs: Server) -> None:
    c = sqs.sqs
    url = sqs.queue()
    got = c.get_queue_attributes(QueueUrl=url, AttributeNames=["MessageRetentionPeriod"])["Attributes"]
    assert got == {"MessageRetentionPeriod": "345600"}  # 4 days when CreateQueue was given none
    c.set_queue_attributes(QueueUrl=url, Attributes={"MessageRetentionPeriod": "60"})
    got = c.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert got["MessageRetentionPeriod"] == "60"
    longest = sqs.queue(MessageRetentionPeriod="1209600")
    got = c.get_queue_attributes(QueueUrl=longest, AttributeNames=["MessageRetentionPeriod"])["Attributes"]
    assert got == {"MessageRetentionPeriod": "1209600"}


# -- keyqueue only -------------------------------------------------------------------------
# (moto 5 has no StartMessageMoveTask, accepts bodies and attributes that SQS refuses, and
# does not check signatures: those tests run against keyqueue alone.)


def test_message_retention_period_out_of_range(kq: Server) -> None:
    """SQS's range, 60 s to 14 days (moto 5 takes any value)."""
    c = kq.sqs
    url = kq.queue()
    for bad in ("59", "1209601", "0", "4 days"):
        err = error_of(lambda: c.set_queue_attributes(QueueUrl=url, Attributes={"MessageRetentionPeriod": bad}))
        assert err["Error"]["Code"] == "InvalidAttributeValue"
        err = error_of(lambda: kq.queue(MessageRetentionPeriod=bad))
        assert err["Error"]["Code"] == "InvalidAttributeValue"
    got = c.get_queue_attributes(QueueUrl=url, AttributeNames=["MessageRetentionPeriod"])["Attributes"]
    assert got == {"MessageRetentionPeriod": "345600"}


def test_start_message_move_task_moves_dead_letters_back(kq: Server) -> None:
    c = kq.sqs
    dlq = kq.queue()
    src = kq.queue(RedrivePolicy=json.dumps({"deadLetterTargetArn": kq.arn(dlq), "maxReceiveCount": "1"}))
    c.send_message_batch(QueueUrl=src, Entries=[{"Id": str(i), "MessageBody": f"m{i}"} for i in range(3)])
    c.receive_message(QueueUrl=src, MaxNumberOfMessages=10, VisibilityTimeout=1)
    wait_until(
        lambda: c.receive_message(QueueUrl=src, WaitTimeSeconds=1).get("Messages") is None and kq.count(dlq) == 3, 30
    )
    got = c.receive_message(QueueUrl=dlq, MaxNumberOfMessages=10, AttributeNames=["All"], VisibilityTimeout=1)
    assert {m["Attributes"]["DeadLetterQueueSourceArn"] for m in got["Messages"]} == {kq.arn(src)}
    err = error_of(lambda: c.start_message_move_task(SourceArn=kq.arn(src)))  # not a dead-letter queue
    assert err["Error"]["Code"] == "InvalidParameterValue"
    # ListDeadLetterSourceQueues pages as SQS does (moto ignores MaxResults)
    src2 = kq.queue(RedrivePolicy=json.dumps({"deadLetterTargetArn": kq.arn(dlq), "maxReceiveCount": "5"}))
    first = c.list_dead_letter_source_queues(QueueUrl=dlq, MaxResults=1)
    rest = c.list_dead_letter_source_queues(QueueUrl=dlq, MaxResults=1, NextToken=first["NextToken"])
    assert first["queueUrls"] + rest["queueUrls"] == sorted([src, src2]) and "NextToken" not in rest
    wait_until(lambda: kq.count(dlq) == 3, 30)
    handle = c.start_message_move_task(SourceArn=kq.arn(dlq))["TaskHandle"]
    wait_until(lambda: c.list_message_move_tasks(SourceArn=kq.arn(dlq))["Results"][0]["Status"] == "COMPLETED", 30)
    task = c.list_message_move_tasks(SourceArn=kq.arn(dlq))["Results"][0]
    assert task["ApproximateNumberOfMessagesMoved"] == 3 and handle
    back = c.receive_message(QueueUrl=src, MaxNumberOfMessages=10, AttributeNames=["All"], VisibilityTimeout=1)[
        "Messages"
    ]
    assert sorted(m["Body"] for m in back) == ["m0", "m1", "m2"]
    assert all(
        "DeadLetterQueueSourceArn" not in m["Attributes"] and m["Attributes"]["ApproximateReceiveCount"] == "1"
        for m in back
    )  # moved back: a fresh start
    assert kq.count(dlq) == 0
    # a slow task (1 message a second) cancelled part way; a destination of our choosing
    wait_until(
        lambda: c.receive_message(QueueUrl=src, WaitTimeSeconds=1).get("Messages") is None and kq.count(dlq) == 3, 30
    )
    elsewhere = kq.queue()
    handle = c.start_message_move_task(
        SourceArn=kq.arn(dlq), DestinationArn=kq.arn(elsewhere), MaxNumberOfMessagesPerSecond=1
    )["TaskHandle"]
    wait_until(lambda: kq.count(elsewhere) >= 1, 30)
    # and counted (a message is enqueued where it goes before it is counted as moved)
    wait_until(
        lambda: c.list_message_move_tasks(SourceArn=kq.arn(dlq))["Results"][0]["ApproximateNumberOfMessagesMoved"] >= 1,
        30,
    )
    moved = c.cancel_message_move_task(TaskHandle=handle)["ApproximateNumberOfMessagesMoved"]
    assert 1 <= moved < 3
    assert c.list_message_move_tasks(SourceArn=kq.arn(dlq), MaxResults=10)["Results"][0]["Status"] == "CANCELLED"
    err = error_of(lambda: c.cancel_message_move_task(TaskHandle=handle))
    assert err["Error"]["Code"] == "InvalidParameterValue"


def test_error_codes_statuses_and_the_query_error_header(kq: Server) -> None:
    c = kq.sqs
    url = kq.queue()
    cases: list[tuple[Callable[[], Any], str, str, int]] = [
        (
            lambda: c.get_queue_url(QueueName="nope-nope"),
            "QueueDoesNotExist",
            "AWS.SimpleQueueService.NonExistentQueue",
            400,
        ),
        (
            lambda: c.send_message(QueueUrl=url, MessageBody=""),
            "MissingRequiredParameterException",
            "MissingParameter",
            400,
        ),
        (
            lambda: c.send_message(QueueUrl=url, MessageBody="a\x00b"),
            "InvalidMessageContents",
            "InvalidMessageContents",
            400,
        ),
        (
            lambda: c.send_message(QueueUrl=url, MessageBody="x" * 1_048_577),
            "InvalidParameterValueException",
            "InvalidParameterValue",
            400,
        ),
        (
            lambda: c.send_message(
                QueueUrl=url, MessageBody="x", MessageAttributes={"a": {"DataType": "String", "StringValue": ""}}
            ),
            "InvalidParameterValueException",
            "InvalidParameterValue",
            400,
        ),
        (
            lambda: c.send_message(
                QueueUrl=url, MessageBody="x", MessageAttributes={"n": {"DataType": "Number", "StringValue": "12x"}}
            ),
            "InvalidParameterValueException",
            "InvalidParameterValue",
            400,
        ),
        (
            lambda: c.send_message(QueueUrl=url, MessageBody="x", DelaySeconds=901),
            "InvalidParameterValueException",
            "InvalidParameterValue",
            400,
        ),
        (
            lambda: c.set_queue_attributes(QueueUrl=url, Attributes={"Nope": "1"}),
            "InvalidAttributeName",
            "InvalidAttributeName",
            400,
        ),
        (
            lambda: c.set_queue_attributes(QueueUrl=url, Attributes={"VisibilityTimeout": "43201"}),
            "InvalidAttributeValue",
            "InvalidAttributeValue",
            400,
        ),
        (
            lambda: c.create_queue(QueueName="x", Attributes={"FifoQueue": "true"}),  # (not named .fifo)
            "InvalidParameterValueException",
            "InvalidParameterValue",
            400,
        ),
        (
            lambda: c.send_message_batch(
                QueueUrl=url, Entries=[{"Id": str(i), "MessageBody": "x" * 104_858} for i in range(10)]
            ),
            "BatchRequestTooLong",
            "AWS.SimpleQueueService.BatchRequestTooLong",
            400,
        ),
        (
            lambda: c.send_message_batch(QueueUrl=url, Entries=[{"Id": str(i), "MessageBody": "x"} for i in range(11)]),
            "TooManyEntriesInBatchRequest",
            "AWS.SimpleQueueService.TooManyEntriesInBatchRequest",
            400,
        ),
        # each entry fits, but bodies and attributes together are over 1 MiB (SQS counts both)
        (
            lambda: c.send_message_batch(
                QueueUrl=url,
                Entries=[
                    {
                        "Id": str(i),
                        "MessageBody": "x" * 524_200,
                        "MessageAttributes": {"a": {"DataType": "String", "StringValue": "y" * 100}},
                    }
                    for i in range(2)
                ],
            ),
            "BatchRequestTooLong",
            "AWS.SimpleQueueService.BatchRequestTooLong",
            400,
        ),
        # text SQS refuses (a lone surrogate) anywhere is the caller's error, not a 500
        (
            lambda: c.tag_queue(QueueUrl=url, Tags={"team": "a\ud800"}),
            "InvalidParameterValueException",
            "InvalidParameterValue",
            400,
        ),
        (
            lambda: c.tag_queue(QueueUrl=url, Tags={"k" * 129: "v"}),
            "InvalidParameterValueException",
            "InvalidParameterValue",
            400,
        ),
        (
            lambda: c.set_queue_attributes(QueueUrl=url, Attributes={"KmsMasterKeyId": "a\ud800"}),
            "InvalidAttributeValue",
            "InvalidAttributeValue",
            400,
        ),
        (
            lambda: c.delete_message(QueueUrl=url, ReceiptHandle="garbage"),
            "ReceiptHandleIsInvalid",
            "ReceiptHandleIsInvalid",
            404,
        ),
        (
            lambda: c.send_message(QueueUrl="http://h/000000000000/", MessageBody="x"),
            "QueueDoesNotExist",
            "AWS.SimpleQueueService.NonExistentQueue",
            400,
        ),
        (
            lambda: c.send_message(QueueUrl="http://[h/000000000000/x", MessageBody="x"),
            "QueueDoesNotExist",
            "AWS.SimpleQueueService.NonExistentQueue",
            400,
        ),
    ]
    for call, shape, code, status in cases:
        err = error_of(call)
        assert (
            err["Error"].get("QueryErrorCode", err["Error"]["Code"]),
            err["Error"]["Code"],
            err["ResponseMetadata"]["HTTPStatusCode"],
        ) == (shape, code, status)
        assert err["ResponseMetadata"]["HTTPHeaders"]["x-amzn-query-error"] == f"{code};Sender"
    assert kq.count(url) == 0
    assert "Tags" not in c.list_queue_tags(QueueUrl=url)
    bad_type = {"a": {"DataType": "String.\ud800", "StringValue": "v"}}
    batch = c.send_message_batch(
        QueueUrl=url,
        Entries=[
            {"Id": "ok", "MessageBody": "fine"},
            {"Id": "bad", "MessageBody": "a\x01"},
            {"Id": "type", "MessageBody": "x", "MessageAttributes": bad_type},
        ],
    )
    assert [s["Id"] for s in batch["Successful"]] == ["ok"]
    assert [(f["Id"], f["Code"], f["SenderFault"]) for f in batch["Failed"]] == [
        ("bad", "InvalidMessageContents", True),
        ("type", "InvalidParameterValue", True),
    ]
    # an entry's error that quotes a lone surrogate the request sent is still a reply (was a 500)
    named = c.send_message_batch(
        QueueUrl=url,
        Entries=[
            {"Id": "n", "MessageBody": "x", "MessageAttributes": {"\ud800": {"DataType": "String", "StringValue": "v"}}}
        ],
    )
    assert [(f["Id"], f["Code"]) for f in named["Failed"]] == [("n", "InvalidParameterValue")]
    deleted = c.delete_message_batch(QueueUrl=url, Entries=[{"Id": "h", "ReceiptHandle": "\ud800"}])
    assert [(f["Id"], f["Code"], f["Message"]) for f in deleted["Failed"]] == [
        ("h", "ReceiptHandleIsInvalid", 'The input receipt handle "\ud800" is not a valid receipt handle.')
    ]


def sign(
    url: str, target: str, body: bytes, *, key: str = KEY_ID, secret: str = SECRET, when: datetime | None = None
) -> dict[str, str]:
    """Headers of a SigV4-signed SQS JSON request made at ``when``, as an SDK signs it."""
    stamp = (when or datetime.now(timezone.utc)).strftime("%Y%m%dT%H%M%SZ")
    headers = {"Content-Type": "application/x-amz-json-1.0", "X-Amz-Target": target, "X-Amz-Date": stamp}
    request = AWSRequest(method="POST", url=url, data=body, headers=headers)
    request.context["timestamp"] = stamp
    signer = SigV4Auth(Credentials(key, secret), "sqs", "us-east-1")
    signature = signer.signature(signer.string_to_sign(request, signer.canonical_request(request)), request)
    signed = signer.signed_headers(signer.headers_to_sign(request))
    return {
        **headers,
        "Authorization": f"AWS4-HMAC-SHA256 Credential={key}/{stamp[:8]}/us-east-1/sqs/aws4_request, "
        f"SignedHeaders={signed}, Signature={signature}",
    }


def test_requests_must_be_signed_with_the_configured_credentials(kq: Server) -> None:
    url = kq.endpoint + "/"
    body = b"{}"
    ok = httpx.post(url, content=body, headers=sign(url, "AmazonSQS.ListQueues", body))
    assert ok.status_code == 200

    def refused(headers: dict[str, str], content: bytes = body) -> tuple[int, str, str]:
        r = httpx.post(url, content=content, headers=headers)
        return r.status_code, r.json()["__type"].split("#")[1], r.headers["x-amzn-query-error"].split(";")[0]

    unsigned = {"Content-Type": "application/x-amz-json-1.0", "X-Amz-Target": "AmazonSQS.ListQueues"}
    assert refused(unsigned) == (403, "MissingAuthenticationToken", "MissingAuthenticationToken")
    assert refused(sign(url, "AmazonSQS.ListQueues", body, secret="wrong"))[:2] == (403, "SignatureDoesNotMatch")
    assert refused(sign(url, "AmazonSQS.ListQueues", body, key="AKIAOTHER"))[:2] == (403, "InvalidClientTokenId")
    stale = sign(url, "AmazonSQS.ListQueues", body, when=datetime.now(timezone.utc) - timedelta(minutes=6))
    assert refused(stale)[:2] == (403, "SignatureDoesNotMatch")
    future = sign(url, "AmazonSQS.ListQueues", body, when=datetime.now(timezone.utc) + timedelta(minutes=6))
    assert refused(future)[:2] == (403, "SignatureDoesNotMatch")
    # a signed request whose body or operation was changed afterwards
    assert refused(sign(url, "AmazonSQS.ListQueues", body), b'{"QueueNamePrefix":"x"}')[:2] == (
        403,
        "SignatureDoesNotMatch",
    )
    changed = {**sign(url, "AmazonSQS.ListQueues", body), "X-Amz-Target": "AmazonSQS.DeleteQueue"}
    assert refused(changed)[:2] == (403, "SignatureDoesNotMatch")
    assert refused(sign(url, "AmazonSQS.NoSuchThing", body))[:2] == (400, "InvalidAction")
    # boto3 with a wrong secret or key id
    for key, secret, code in ((KEY_ID, "nope", "SignatureDoesNotMatch"), ("AKIANOPE", SECRET, "InvalidClientTokenId")):
        err = error_of(lambda: client(kq.endpoint, key, secret).list_queues())
        assert (err["Error"]["Code"], err["ResponseMetadata"]["HTTPStatusCode"]) == (code, 403)


def test_the_query_protocol_is_refused_in_xml_an_old_sdk_reads(kq: Server) -> None:
    """A form-encoded (query protocol) request gets the query protocol's XML error, well formed,
    as an SDK that speaks it parses it: code InvalidAction and the reason."""
    r = httpx.post(kq.endpoint + "/", data={"Action": "ListQueues", "Version": "2012-11-05"})
    assert r.status_code == 400 and r.headers["content-type"] == "text/xml"
    ns = {"q": "http://queue.amazonaws.com/doc/2012-11-05/"}
    error = ElementTree.fromstring(r.content).find("q:Error", ns)
    assert error is not None
    assert (error.findtext("q:Type", namespaces=ns), error.findtext("q:Code", namespaces=ns)) == (
        "Sender",
        "InvalidAction",
    )
    message = error.findtext("q:Message", namespaces=ns) or ""
    assert "X-Amz-Target: AmazonSQS.<Operation>" in message and "JSON protocol" in message


def test_receipt_handles_cannot_be_forged_moved_or_replayed(kq: Server) -> None:
    c = kq.sqs
    url, other = kq.queue(), kq.queue()
    c.send_message(QueueUrl=url, MessageBody="m")
    c.send_message(QueueUrl=other, MessageBody="o")
    first = c.receive_message(QueueUrl=url, VisibilityTimeout=1)["Messages"][0]["ReceiptHandle"]
    raw = bytearray(base64.b64decode(first + "=" * (-len(first) % 4)))
    raw[-1] ^= 1  # the receipt of another delivery, the MAC left as it was
    tampered = base64.b64encode(bytes(raw)).rstrip(b"=").decode()
    for handle, queue in ((tampered, url), (first, other), (first[:-4], url)):
        err = error_of(lambda: c.delete_message(QueueUrl=queue, ReceiptHandle=handle))
        assert err["Error"]["Code"] == "ReceiptHandleIsInvalid"
    assert kq.count(other) == 1
    second = wait_until(
        lambda: c.receive_message(QueueUrl=url, WaitTimeSeconds=1, VisibilityTimeout=60).get("Messages"), 30
    )[0]
    # the first delivery's handle, replayed: no error, as SQS, but it changes nothing
    c.delete_message(QueueUrl=url, ReceiptHandle=first)
    err = error_of(lambda: c.change_message_visibility(QueueUrl=url, ReceiptHandle=first, VisibilityTimeout=0))
    assert err["Error"]["Code"] == "InvalidParameterValue"
    assert kq.count(url, "ApproximateNumberOfMessagesNotVisible") == 1
    c.delete_message(QueueUrl=url, ReceiptHandle=second["ReceiptHandle"])
    assert kq.count(url, "ApproximateNumberOfMessagesNotVisible") == 0


def test_sqs_queues_are_keyqueue_queues_both_ways(kq: Server, rc: redis.Redis) -> None:
    c = kq.sqs
    # made through SQS, used by the library
    url = kq.queue(VisibilityTimeout="7", MaximumMessageSize="2048")
    name = name_of(url)
    assert rc.hgetall(f"{PREFIX}:{{{name}}}:config")[b"visibility_timeout"] == b"7"
    assert rc.sismember(f"{PREFIX}:queues", name)
    assert rc.hget(f"{PREFIX}:{{{name}}}:meta", "created")
    c.send_message(QueueUrl=url, MessageBody="to the library", MessageAttributes=ATTRIBUTES)
    q = Queue(name, client=rc, prefix=PREFIX)
    assert q.settings.visibility_timeout == 7 and q.settings.max_body_bytes == 2048
    m = q.claim()
    assert m is not None and m.text == "to the library" and m.attributes and m.first_claimed_at
    item = rc.hgetall(f"{PREFIX}:{{{name}}}:item:{m.id}")
    assert item[b"a"] == m.attributes and int(item[b"f"]) == round(m.first_claimed_at * 1000)
    assert m.ack() and kq.count(url) == 0
    assert q.check(settle=0).consistent
    # made by the library, used through SQS
    lib = Queue(f"lib-{uuid.uuid4().hex[:8]}", client=rc, prefix=PREFIX, visibility_timeout=9)
    lib_id = lib.enqueue(b"from the library")
    lib_url = c.get_queue_url(QueueName=lib.name)["QueueUrl"]
    assert lib_url in c.list_queues(QueueNamePrefix="lib-")["QueueUrls"]
    assert c.get_queue_attributes(QueueUrl=lib_url, AttributeNames=["VisibilityTimeout"])["Attributes"] == {
        "VisibilityTimeout": "9"
    }
    got = c.receive_message(QueueUrl=lib_url, AttributeNames=["All"])["Messages"][0]
    assert got["Body"] == "from the library" and got["MD5OfBody"] == hashlib.md5(b"from the library").hexdigest()
    assert lib.stats().processing == 1 and lib.peek(1, source="processing")[0].id == lib_id
    c.delete_message(QueueUrl=lib_url, ReceiptHandle=got["ReceiptHandle"])
    assert lib.stats().processing == 0 and lib.counters()["acked"] == 1
    # a setting changed by the library shows through SQS; one set through SQS reaches the library
    Queue(lib.name, client=rc, prefix=PREFIX, visibility_timeout=11)
    wait_until(
        lambda: (
            c.get_queue_attributes(QueueUrl=lib_url, AttributeNames=["VisibilityTimeout"])["Attributes"][
                "VisibilityTimeout"
            ]
            == "11"
        ),
        10,
    )
    c.set_queue_attributes(QueueUrl=lib_url, Attributes={"VisibilityTimeout": "13"})
    assert lib.refresh_settings().visibility_timeout == 13
    c.delete_queue(QueueUrl=lib_url)
    assert not lib.exists() and rc.keys(f"{PREFIX}:{{{lib.name}}}:*") == []


def test_message_retention_period_is_the_queues_retention(kq: Server, rc: redis.Redis) -> None:
    c = kq.sqs
    url = kq.queue()
    name = name_of(url)
    assert rc.hget(f"{PREFIX}:{{{name}}}:config", "retention") == b"345600"
    c.set_queue_attributes(QueueUrl=url, Attributes={"MessageRetentionPeriod": "7200"})
    assert Queue(name, client=rc, prefix=PREFIX).settings.retention == 7200
    # a retention set through the library, even under SQS's 60 s, is what receives apply
    q = Queue(name, client=rc, prefix=PREFIX, retention=1)
    wait_until(
        lambda: (
            c.get_queue_attributes(QueueUrl=url, AttributeNames=["MessageRetentionPeriod"])["Attributes"]
            == {"MessageRetentionPeriod": "1"}
        ),
        10,
    )
    c.send_message(QueueUrl=url, MessageBody="short-lived")
    sent = q.peek(1)[0].enqueued_at
    wait_until(lambda: rc.time()[0] + rc.time()[1] / 1e6 >= sent + 1.1, 10, 0.1)  # its age passed 1 s
    assert "Messages" not in c.receive_message(QueueUrl=url)  # the receive deleted it instead
    assert q.counters()["expired"] == 1
    # a library queue made without one keeps messages for ever: no MessageRetentionPeriod
    lib = Queue(f"lib-{uuid.uuid4().hex[:8]}", client=rc, prefix=PREFIX, visibility_timeout=5)
    lib_url = c.get_queue_url(QueueName=lib.name)["QueueUrl"]
    assert (
        "MessageRetentionPeriod" not in c.get_queue_attributes(QueueUrl=lib_url, AttributeNames=["All"])["Attributes"]
    )


def test_a_message_moved_to_the_dead_letter_queue_keeps_its_first_enqueue_time(kq: Server, rc: redis.Redis) -> None:
    c = kq.sqs
    dlq = kq.queue()
    src = kq.queue(RedrivePolicy=json.dumps({"deadLetterTargetArn": kq.arn(dlq), "maxReceiveCount": 1}))
    c.send_message(QueueUrl=src, MessageBody="poison")
    first = c.receive_message(QueueUrl=src, VisibilityTimeout=1, AttributeNames=["All"])["Messages"][0]
    dead_queue = Queue(name_of(dlq), client=rc, prefix=PREFIX)
    # the next receive after its visibility timeout finds it out of receives: it moves
    moved = wait_until(
        lambda: c.receive_message(QueueUrl=src, WaitTimeSeconds=1).get("Messages") is None and dead_queue.peek(1), 30
    )[0]
    assert round(moved.enqueued_at * 1000) == int(first["Attributes"]["SentTimestamp"])  # its retention counts from it


def aws_cli(endpoint: str, tmp_path: Path) -> Callable[..., Any]:
    """``aws sqs ARGS`` against ``endpoint`` with the test's keys and no config file: its JSON
    output (the run itself with ``check=False``); keyword arguments are more environment."""
    env = dict(
        os.environ,
        AWS_ACCESS_KEY_ID=KEY_ID,
        AWS_SECRET_ACCESS_KEY=SECRET,
        AWS_DEFAULT_REGION="us-east-1",
        AWS_CONFIG_FILE=str(tmp_path / "none"),
        AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"),
    )

    def aws(*args: str, check: bool = True, **extra: str) -> Any:
        done = subprocess.run(
            [str(VENV_BIN / "aws"), "--endpoint-url", endpoint, "--output", "json", "sqs", *args],
            env={**env, **extra},
            capture_output=True,
            text=True,
            timeout=120,
        )
        if check:
            assert done.returncode == 0, done.stderr
            return json.loads(done.stdout) if done.stdout.strip() else {}
        return done

    return aws


@pytest.mark.timeout(300)  # aws CLI processes: 31 s on one starved core
def test_the_aws_cli_works_against_it(kq: Server, tmp_path: Path) -> None:
    aws = aws_cli(kq.endpoint, tmp_path)

    name = f"cli-{uuid.uuid4().hex[:8]}"
    url = aws("create-queue", "--queue-name", name)["QueueUrl"]
    assert url.endswith(f"/000000000000/{name}")
    sent = aws(
        "send-message",
        "--queue-url",
        url,
        "--message-body",
        "from the cli",
        "--message-attributes",
        '{"a": {"DataType": "String", "StringValue": "b"}}',
    )
    assert sent["MD5OfMessageBody"] == hashlib.md5(b"from the cli").hexdigest()
    got = aws(
        "receive-message",
        "--queue-url",
        url,
        "--attribute-names",
        "All",
        "--message-attribute-names",
        "All",
        "--wait-time-seconds",
        "5",
    )["Messages"][0]
    assert (got["Body"], got["MessageAttributes"]["a"]["StringValue"]) == ("from the cli", "b")
    assert got["Attributes"]["ApproximateReceiveCount"] == "1"
    aws("delete-message", "--queue-url", url, "--receipt-handle", got["ReceiptHandle"])
    attrs = aws("get-queue-attributes", "--queue-url", url, "--attribute-names", "All")["Attributes"]
    assert attrs["ApproximateNumberOfMessages"] == "0" and attrs["ApproximateNumberOfMessagesNotVisible"] == "0"
    denied = aws("list-queues", check=False, AWS_SECRET_ACCESS_KEY="wrong")
    assert denied.returncode != 0 and "SignatureDoesNotMatch" in denied.stderr
    missing = aws("get-queue-url", "--queue-name", "no-such-queue-here", check=False)
    assert missing.returncode != 0 and "NonExistentQueue" in missing.stderr


def test_the_trace_header_system_attribute(kq: Server) -> None:
    c = kq.sqs
    url = kq.queue()
    trace = {"AWSTraceHeader": {"DataType": "String", "StringValue": "Root=1-5759e988-bd862e3fe1be46a994272793"}}
    sent = c.send_message(QueueUrl=url, MessageBody="traced", MessageSystemAttributes=trace)
    assert sent["MD5OfMessageSystemAttributes"] == expected_attributes_md5(trace)
    got = c.receive_message(QueueUrl=url, MessageSystemAttributeNames=["AWSTraceHeader"])["Messages"][0]
    assert got["Attributes"] == {"AWSTraceHeader": trace["AWSTraceHeader"]["StringValue"]}
    err = error_of(
        lambda: c.send_message(
            QueueUrl=url, MessageBody="x", MessageSystemAttributes={"Other": {"DataType": "String", "StringValue": "v"}}
        )
    )
    assert err["Error"]["Code"] == "InvalidParameterValue"


def test_two_hundred_concurrent_long_poll_receives(kq: Server) -> None:
    """200 boto3 long-polls at once on one serve --sqs (its pool: 100 connections) beside the
    sends that feed them: no error, every message received once."""
    from botocore.config import Config

    url = kq.queue()
    sqs = boto3.client(
        "sqs",
        endpoint_url=kq.endpoint,
        region_name="us-east-1",
        aws_access_key_id=KEY_ID,
        aws_secret_access_key=SECRET,
        config=Config(max_pool_connections=250, retries={"mode": "standard", "total_max_attempts": 1}),
    )
    got: list[str] = []
    lock = threading.Lock()
    end = time.monotonic() + 60

    def receive() -> None:
        while time.monotonic() < end:
            with lock:
                if len(got) >= 200:
                    return
            reply = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=2, MaxNumberOfMessages=1)
            for m in reply.get("Messages", []):
                with lock:
                    got.append(m["Body"])
                sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])

    sends = [functools.partial(sqs.send_message, QueueUrl=url, MessageBody=f"m{i}") for i in range(200)]
    assert run_threads([receive] * 200 + sends, 90) == []
    assert sorted(got) == sorted(f"m{i}" for i in range(200))


def test_an_idle_connection_outlives_a_pause_of_several_seconds(kq: Server) -> None:
    """A client that pauses between calls finds its pooled connection still open (a server
    that closes idle connections after a few seconds races every such client's next
    request: "connection closed")."""
    import http.client
    from urllib.parse import urlsplit

    address = urlsplit(kq.endpoint)
    conn = http.client.HTTPConnection(address.hostname or "", address.port, timeout=30)
    try:
        conn.request("GET", "/healthz")
        first = conn.getresponse()
        first.read()
        assert first.status == 200
        sock = conn.sock
        time.sleep(6)  # the pause itself: longer than uvicorn's default keep-alive (5 s)
        conn.request("GET", "/healthz")
        reply = conn.getresponse()
        assert reply.status == 200 and conn.sock is sock  # the same connection, still open
    finally:
        conn.close()


def test_serve_gives_uvicorn_a_keep_alive_longer_than_a_minute(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the test above shows by a pause, without depending on when uvicorn's timer runs."""
    import uvicorn

    from keyqueue.serve import serve_app

    class Stop(Exception):
        pass

    given: dict[str, Any] = {}

    def config(*args: Any, **kw: Any) -> None:
        given.update(kw)
        raise Stop

    monkeypatch.setattr(uvicorn, "Config", config)
    with pytest.raises(Stop):
        serve_app(
            url="redis://127.0.0.1:1/0",
            shown_url="redis://127.0.0.1:1/0",
            prefix="kq",
            host="127.0.0.1",
            port=0,
            read_only=True,
            token=None,
            sqs=None,
            queue_options={},
        )
    assert given["timeout_keep_alive"] >= 60


def test_a_move_task_waits_out_a_rate_limit_on_its_source(kq: Server, rc: redis.Redis) -> None:
    """A dead-letter queue whose claims a keyqueue rate limit holds back: the task waits for
    the next window instead of ending with messages left behind."""
    c = kq.sqs
    dlq = kq.queue()
    kq.queue(RedrivePolicy=json.dumps({"deadLetterTargetArn": kq.arn(dlq), "maxReceiveCount": "1"}))
    dest = kq.queue()
    c.send_message_batch(QueueUrl=dlq, Entries=[{"Id": str(i), "MessageBody": f"m{i}"} for i in range(6)])
    Queue(dlq.rsplit("/", 1)[1], client=rc, prefix=PREFIX, rate_limit="2/1")
    c.start_message_move_task(SourceArn=kq.arn(dlq), DestinationArn=kq.arn(dest))
    tasks = lambda: c.list_message_move_tasks(SourceArn=kq.arn(dlq))["Results"]  # noqa: E731
    wait_until(lambda: tasks()[0]["Status"] != "RUNNING", 60)
    assert (tasks()[0]["Status"], tasks()[0]["ApproximateNumberOfMessagesMoved"]) == ("COMPLETED", 6)
    assert (kq.count(dest), kq.count(dlq)) == (6, 0)
