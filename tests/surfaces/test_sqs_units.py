"""The SQS layer's pure parts, without a server: SigV4's time window, receipt handles, SQS's
validation rules, the stored attribute form."""

from __future__ import annotations

import base64
import calendar
import time
import uuid

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from keyqueue.sqs.auth import Verifier
from keyqueue.sqs.errors import SqsError
from keyqueue.sqs.handles import Handles
from keyqueue.sqs.md5 import md5_of_attributes
from keyqueue.sqs.operations import sequence_number
from keyqueue.sqs.queues import MESSAGE_IDS, uuid5
from keyqueue.sqs.stored import Stored
from keyqueue.sqs.validate import attribute_name, attribute_value, body, entry_size, fifo_id, queue_name, tags

from .test_sqs import ATTRIBUTES, expected_attributes_md5


def shape_of(call: object) -> str:
    with pytest.raises(SqsError) as info:
        call()  # type: ignore[operator]
    return info.value.shape


def signed(stamp: str, secret: str = "s3cret") -> tuple[str, dict[str, str], bytes]:
    url, payload = "http://127.0.0.1:9/", b'{"QueueNamePrefix":"a"}'
    req = AWSRequest(
        method="POST",
        url=url,
        data=payload,
        headers={"X-Amz-Target": "AmazonSQS.ListQueues", "X-Amz-Date": stamp, "Host": "127.0.0.1:9"},
    )
    req.context["timestamp"] = stamp
    signer = SigV4Auth(Credentials("AKID", secret), "sqs", "eu-west-1")
    sig = signer.signature(signer.string_to_sign(req, signer.canonical_request(req)), req)
    names = signer.signed_headers(signer.headers_to_sign(req))
    headers = {k.lower(): v for k, v in req.headers.items()}
    headers["authorization"] = (
        f"AWS4-HMAC-SHA256 Credential=AKID/{stamp[:8]}/eu-west-1/sqs/aws4_request, "
        f"SignedHeaders={names}, Signature={sig}"
    )
    return url, headers, payload


def test_signatures_hold_within_five_minutes_of_their_date_only() -> None:
    stamp = "20240301T120000Z"
    at = calendar.timegm(time.strptime(stamp, "%Y%m%dT%H%M%SZ"))
    url, headers, payload = signed(stamp)
    v = Verifier("AKID", "s3cret")
    for now in (at - 300, at, at + 300):
        v.verify("POST", url, headers, payload, now=now)
    for now in (at - 301, at + 301):
        with pytest.raises(SqsError, match="Signature (expired|not yet current)"):
            v.verify("POST", url, headers, payload, now=now)
    assert (
        shape_of(lambda: Verifier("AKID", "other").verify("POST", url, headers, payload, now=at))
        == "SignatureDoesNotMatch"
    )
    assert shape_of(lambda: v.verify("PUT", url, headers, payload, now=at)) == "SignatureDoesNotMatch"
    assert shape_of(lambda: v.verify("POST", url + "?x=1", headers, payload, now=at)) == "SignatureDoesNotMatch"
    no_host = {k: v for k, v in headers.items() if k != "host"}
    assert shape_of(lambda: v.verify("POST", url, no_host, payload, now=at)) == "SignatureDoesNotMatch"
    assert (
        shape_of(lambda: v.verify("POST", url, {**headers, "authorization": "Bearer x"}, payload, now=at))
        == "IncompleteSignature"
    )


def test_receipt_handles_are_bound_to_secret_prefix_queue_and_delivery() -> None:
    h = Handles("secret", "kq")
    handle = h.make("orders", "42", "3-1700000000000")
    assert h.read(handle, "orders") == ("orders", "42", "3-1700000000000")
    assert shape_of(lambda: h.read(handle, "other")) == "ReceiptHandleIsInvalid"
    assert shape_of(lambda: Handles("another", "kq").read(handle, "orders")) == "ReceiptHandleIsInvalid"
    assert shape_of(lambda: Handles("secret", "kq2").read(handle, "orders")) == "ReceiptHandleIsInvalid"
    raw = base64.b64decode(handle + "=" * (-len(handle) % 4))
    for i in range(len(raw)):  # any one byte changed anywhere
        bad = base64.b64encode(raw[:i] + bytes([raw[i] ^ 0x20]) + raw[i + 1 :]).decode()
        assert shape_of(lambda: h.read(bad, "orders")) == "ReceiptHandleIsInvalid", i
    assert shape_of(lambda: h.read("", "orders")) == "MissingParameter"
    assert shape_of(lambda: h.read("!!!", "orders")) == "ReceiptHandleIsInvalid"


def test_no_receipt_handle_starts_with_a_dash_and_url_safe_ones_still_read() -> None:
    """A handle starting with "-" is taken for an option by command lines (``aws sqs
    delete-message --receipt-handle -Uw...`` fails); in the URL-safe alphabet one in 64 did.
    Handles in that alphabet, made before, are still read."""
    h = Handles("secret", "kq")
    made = [(str(i), h.make("orders", str(i), "1-1700000000000")) for i in range(1000)]
    assert [handle for _, handle in made if handle.startswith("-")] == []
    assert all(h.read(handle, "orders").id == i for i, handle in made)
    old = [base64.urlsafe_b64encode(base64.b64decode(handle + "=" * (-len(handle) % 4))).decode() for _, handle in made]
    assert any(o.startswith("-") for o in old) and any("_" in o for o in old)  # (the cases the next line reads)
    assert all(h.read(o.rstrip("="), "orders").id == i for (i, _), o in zip(made, old))


def test_sqs_rules_for_names_bodies_and_attributes() -> None:
    assert queue_name("a-Z_09" * 13 + "ab") == "a-Z_09" * 13 + "ab"  # 80 characters
    for bad in ("a" * 81, "", "a.b", "a b", "a" * 76 + ".fifo", ".fifo", "a.b.fifo"):
        assert shape_of(lambda: queue_name(bad)) == "InvalidParameterValue", bad
    assert queue_name("a" * 75 + ".fifo", True) == "a" * 75 + ".fifo"  # 80 with the suffix
    assert shape_of(lambda: queue_name("q.fifo", False)) == "InvalidParameterValue"  # a standard queue's name
    assert shape_of(lambda: queue_name("q", True)) == "InvalidParameterValue"  # a FIFO queue's name
    assert body({"MessageBody": "tab\tnew\nline \U0010ffff"})
    for bad in ("\x00", "\x1f", "\ufffe", "\ud800"):
        assert shape_of(lambda: body({"MessageBody": "a" + bad})) == "InvalidMessageContents", repr(bad)
    for ok in ("a", "a.b-c_d", "A" * 256):
        attribute_name(ok)
    for bad in ("AWS.x", "amazon.y", ".a", "a.", "a..b", "a b", "A" * 257, ""):
        assert shape_of(lambda: attribute_name(bad)) == "InvalidParameterValue", bad
    # the rules moto does not check are told in the form of SQS's text for the characters
    for bad, reason in (
        ("aWs.x", "can't start with AWS. or Amazon."),
        ("a..b", "periods in a sequence"),
        ("A" * 257, "up to 256 characters"),
    ):
        with pytest.raises(SqsError, match=f"^The message attribute name '{bad}' is invalid. .*{reason}"):
            attribute_name(bad)
    assert attribute_value("n", {"DataType": "Number.int", "StringValue": "-1.5E+10"}) == ("Number.int", "-1.5E+10")
    assert attribute_value("b", {"DataType": "Binary", "BinaryValue": "AAE="}) == ("Binary", b"\x00\x01")
    for spec in (
        {"DataType": "Number", "StringValue": "1" * 39},
        {"DataType": "Number", "StringValue": "NaN"},
        {"DataType": "Text", "StringValue": "x"},
        {"DataType": "String"},
        {"DataType": "Binary", "BinaryValue": "***"},
        {"DataType": "String.\ud800", "StringValue": "x"},
        {"DataType": "Number.\x00", "StringValue": "1"},
    ):
        assert shape_of(lambda: attribute_value("a", spec)) == "InvalidParameterValue", spec


def test_stored_form_round_trips_and_attribute_digests_agree() -> None:
    attrs = {k: (v["DataType"], v.get("BinaryValue", v.get("StringValue"))) for k, v in ATTRIBUTES.items()}
    s = Stored(attrs, {"AWSTraceHeader": ("String", "Root=1-abc")}, "mid", "src", 1700000000000)
    again = Stored.load(s.dump())
    assert again == s and Stored().dump() is None and Stored.load(b"not json") == Stored()
    # the test's own encoding (which the parity tests hold against moto's digests too)
    assert md5_of_attributes(attrs) == expected_attributes_md5(ATTRIBUTES)


def test_message_ids_are_the_standard_uuid5() -> None:
    for name in ("q/1700000000/1", "orders//42", "x" * 300):
        assert uuid5(name) == str(uuid.uuid5(MESSAGE_IDS, name))


def test_tags_and_batch_sizes_as_sqs_counts_them() -> None:
    assert tags({"k" * 128: "v" * 256, "team": ""}) == {"k" * 128: "v" * 256, "team": ""}
    for bad in ({"": "v"}, {"k" * 129: "v"}, {"k": "v" * 257}, {"k": "\ud800"}, {"\x00": "v"}, {"k": 1}, ["k"]):
        assert shape_of(lambda: tags(bad)) == "InvalidParameterValue", bad
    entry = {
        "Id": "a",
        "MessageBody": "é" * 10,
        "MessageAttributes": {
            "s": {"DataType": "String", "StringValue": "abc"},
            "b": {"DataType": "Binary", "BinaryValue": "AAE="},
            "junk": 5,
            "bad": {"DataType": "Binary", "BinaryValue": "***"},
        },
    }
    assert entry_size(entry) == 20 + (1 + 6 + 3) + (1 + 6 + 2) + 4 + (3 + 6)
    assert entry_size({"Id": "a"}) == 0


def test_a_queue_read_that_a_change_overtakes_does_not_fill_the_cache(redis_server, monkeypatch) -> None:
    """A request reading a queue (awaiting Redis) while another request changes it and
    forgets it answers with what it read, but leaves no stale copy for the next request."""
    import asyncio

    import redis.asyncio

    from keyqueue.aio import Queue
    from keyqueue.sqs.queues import Directory

    async def scenario() -> dict[str, str]:
        client = redis.asyncio.Redis(port=redis_server.port)
        d = Directory(client, "cachet", "us-east-1")
        await d.create("q", {}, {"env": "test"})
        d.forget("q")
        gate, reading = asyncio.Event(), asyncio.Event()
        original = Queue.refresh_settings

        async def held(self: Queue) -> object:  # after the metadata was read
            reading.set()
            await gate.wait()
            return await original(self)

        monkeypatch.setattr(Queue, "refresh_settings", held)
        read = asyncio.create_task(d.get("q"))
        await reading.wait()
        monkeypatch.setattr(Queue, "refresh_settings", original)
        await d.queue("q").set_metadata({}, remove=["tag:env"])  # as UntagQueue does
        d.forget("q")
        gate.set()
        assert (await read).tags == {"env": "test"}  # what it read, for its own request
        tags = (await d.get("q")).tags
        await client.aclose()
        return tags

    assert asyncio.run(scenario()) == {}


def test_fifo_ids_and_sequence_numbers() -> None:
    punctuation = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"
    for ok in ("g", "a" * 128, punctuation, "Az09"):
        assert fifo_id({"MessageGroupId": ok}, "MessageGroupId") == ok
    assert fifo_id({}, "MessageGroupId") is None
    for bad in ("", "a" * 129, "a b", "é", "a\n", 7):
        assert shape_of(lambda: fifo_id({"MessageDeduplicationId": bad}, "MessageDeduplicationId")) == (
            "InvalidParameterValue"
        ), repr(bad)
    numbers = [sequence_number(str(i)) for i in (1, 9, 10, 12345678901234567890)]
    assert numbers[0] == "00000000000000000001" and all(len(n) == 20 for n in numbers)
    assert sorted(numbers) == numbers  # as strings and as integers
    # the stored MessageDeduplicationId goes through dump and load
    assert Stored.load(Stored(dedup_id="d-1").dump()).dedup_id == "d-1"
