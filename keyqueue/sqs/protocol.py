"""The wire: AWS JSON 1.0 requests (``X-Amz-Target: AmazonSQS.<Operation>``) and replies,
error replies as SQS sends them (``__type`` and ``x-amzn-query-error``), and the refusal of
the old query protocol (form-encoded ``Action=...``), which keyqueue does not answer."""

from __future__ import annotations

import json
import uuid
from typing import Any
from xml.sax.saxutils import escape

from .errors import SqsError

TARGET_PREFIX = "AmazonSQS."
JSON_TYPE = b"application/x-amz-json-1.0"
#: What the JSON protocol's ``__type`` names errors by (boto3 keeps the part after '#').
SHAPE_NAMESPACE = "com.amazonaws.sqs#"

Headers = list[tuple[bytes, bytes]]


def request_id() -> str:
    return str(uuid.uuid4())


def parse(target: str | None, body: bytes) -> tuple[str, dict[str, Any]]:
    """The operation named by X-Amz-Target and its parameters."""
    if not target or not target.startswith(TARGET_PREFIX):
        raise SqsError(
            "InvalidAction", f"Could not find operation {target!r}: X-Amz-Target must be {TARGET_PREFIX}<Operation>."
        )
    try:
        params = json.loads(body) if body.strip() else {}
    except (ValueError, UnicodeDecodeError):
        raise SqsError("InvalidParameterValue", "The request body is not valid JSON.") from None
    if not isinstance(params, dict):
        raise SqsError("InvalidParameterValue", "The request body must be a JSON object.")
    return target[len(TARGET_PREFIX) :], params


def reply(result: dict[str, Any], rid: str) -> tuple[int, Headers, bytes]:
    try:
        body = json.dumps(result, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate the request sent, echoed in a batch entry's error: escaped
        body = json.dumps(result, separators=(",", ":")).encode()
    return 200, _headers(rid, len(body)), body


def error_reply(error: SqsError, rid: str) -> tuple[int, Headers, bytes]:
    body = json.dumps(
        {"__type": SHAPE_NAMESPACE + error.json_type, "message": error.message}, separators=(",", ":")
    ).encode("utf-8")
    headers = _headers(rid, len(body))
    headers.append((b"x-amzn-query-error", f"{error.code};{error.fault}".encode()))
    return error.status, headers, body


def query_refusal(rid: str) -> tuple[int, Headers, bytes]:
    """The query protocol's own error shape (XML), so an old SDK shows the reason: escaped,
    or the '<Operation>' in it makes the reply XML no SDK can parse."""
    message = (
        "keyqueue answers the SQS JSON protocol (AWS JSON 1.0, X-Amz-Target: AmazonSQS.<Operation>) "
        "only, not the query protocol (form-encoded Action=...): use an AWS SDK that speaks JSON "
        "to SQS (botocore/boto3 and the aws CLI since late 2023, and every current SDK)."
    )
    body = (
        '<?xml version="1.0"?><ErrorResponse xmlns="http://queue.amazonaws.com/doc/2012-11-05/">'
        f"<Error><Type>Sender</Type><Code>InvalidAction</Code><Message>{escape(message)}</Message><Detail/>"
        f"</Error><RequestId>{rid}</RequestId></ErrorResponse>"
    ).encode()
    return (
        400,
        [
            (b"content-type", b"text/xml"),
            (b"content-length", str(len(body)).encode()),
            (b"x-amzn-requestid", rid.encode()),
        ],
        body,
    )


def _headers(rid: str, length: int) -> Headers:
    return [
        (b"content-type", JSON_TYPE),
        (b"content-length", str(length).encode()),
        (b"x-amzn-requestid", rid.encode()),
    ]
