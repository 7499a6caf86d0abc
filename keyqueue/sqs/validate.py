"""SQS's parameter rules and limits, checked before anything reaches Redis, with SQS's error
codes: names, integers in range, bodies, message attributes, batch entries."""

from __future__ import annotations

import base64
import binascii
import re
from decimal import Decimal, InvalidOperation
from typing import Any, Mapping

from .errors import SqsError, invalid, missing
from .md5 import Attribute

#: A queue name through SQS: 1-80 of these characters, a FIFO queue's ending in ``.fifo``.
QUEUE_NAME = re.compile(r"[A-Za-z0-9_-]{1,80}|[A-Za-z0-9_-]{1,75}\.fifo")
#: MessageGroupId and MessageDeduplicationId: 1-128 letters, digits and punctuation.
FIFO_ID = re.compile(r"[!-~]{1,128}")
BATCH_ID = re.compile(r"[A-Za-z0-9_-]{1,80}")
ATTRIBUTE_NAME = re.compile(r"[A-Za-z0-9_.-]+")
MAX_ATTRIBUTE_NAME = 256
#: Characters SQS accepts in a body or a string attribute (XML 1.0's Char).
BAD_CHARS = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")

#: SQS's largest message (body and attributes), MaximumMessageSize's upper bound and default.
MAX_MESSAGE_BYTES = 1_048_576
MAX_BATCH_ENTRIES = 10
MAX_ATTRIBUTES = 10
MAX_VISIBILITY = 43_200
MAX_WAIT = 20
MAX_DELAY = 900
MAX_TAG_KEY = 128
MAX_TAG_VALUE = 256


def queue_name(name: object, fifo: bool | None = None) -> str:
    """A queue name; with ``fifo`` (CreateQueue) also its kind: a FIFO queue's name ends in
    ``.fifo`` and only a FIFO queue's does, refused in SQS's words either way."""
    if name is None:
        raise missing("QueueName")
    if not isinstance(name, str) or not QUEUE_NAME.fullmatch(name) or fifo is False and is_fifo(name):
        raise invalid("Can only include alphanumeric characters, hyphens, or underscores. 1 to 80 in length")
    if fifo and not is_fifo(name):
        raise invalid(
            "The name of a FIFO queue can only include alphanumeric characters, hyphens, or "
            "underscores, must end with .fifo suffix and be 1 to 80 in length."
        )
    return name


def is_fifo(name: str) -> bool:
    return name.endswith(".fifo")


def fifo_id(params: Mapping[str, Any], name: str) -> str | None:
    """MessageGroupId or MessageDeduplicationId, when given."""
    value = params.get(name)
    if value is None:
        return None
    if not isinstance(value, str) or not FIFO_ID.fullmatch(value):
        raise invalid(
            f"Value {value} for parameter {name} is invalid. Reason: it must be 1 to 128 "
            "alphanumeric or punctuation characters."
        )
    return value


def string(params: Mapping[str, Any], name: str, *, required: bool = False) -> str | None:
    value = params.get(name)
    if value is None:
        if required:
            raise missing(name)
        return None
    if not isinstance(value, str):
        raise invalid(f"Value {value!r} for parameter {name} is invalid. Reason: must be a string.")
    return value


def integer(params: Mapping[str, Any], name: str, low: int, high: int, default: int | None = None) -> int | None:
    """An integer parameter in [low, high], ``default`` when absent."""
    value = params.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise invalid(f"Value {value} for parameter {name} is invalid. Reason: Must be between {low} and {high}.")
    return value


def body(params: Mapping[str, Any]) -> str:
    text = params.get("MessageBody")
    if text is None or text == "":
        raise missing("MessageBody")
    if not isinstance(text, str):
        raise invalid("Value for parameter MessageBody is invalid. Reason: must be a string.")
    contents(text)
    return text


def is_text(value: object) -> bool:
    """A string SQS accepts as text (no control characters, no lone surrogates)."""
    return isinstance(value, str) and not BAD_CHARS.search(value)


def contents(text: str) -> None:
    if BAD_CHARS.search(text):
        raise SqsError(
            "InvalidMessageContents",
            "Invalid characters found. Valid unicode characters are #x9 | #xA | #xD | "
            "#x20 to #xD7FF | #xE000 to #xFFFD | #x10000 to #x10FFFF",
        )


def message_attributes(raw: object, *, system: bool = False) -> dict[str, Attribute]:
    """MessageAttributes (or MessageSystemAttributes) as {name: (DataType, value)}."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise invalid("MessageAttributes must be a map.")
    if len(raw) > MAX_ATTRIBUTES:
        raise invalid(f"Number of message attributes [{len(raw)}] exceeds the allowed maximum [{MAX_ATTRIBUTES}].")
    out: dict[str, Attribute] = {}
    for name, spec in raw.items():
        if system:
            if name != "AWSTraceHeader":
                raise invalid(f"Message system attribute name '{name}' is invalid.")
        else:
            attribute_name(name)
        out[name] = attribute_value(name, spec)
    return out


def attribute_name(name: str) -> None:
    """SQS's rules for a message attribute's name, refused in SQS's words (the characters'
    text is SQS's own; the other rules are told in the same form)."""
    if not ATTRIBUTE_NAME.fullmatch(name):
        reason = "Attribute name can contain A-Z, a-z, 0-9, underscore (_), hyphen (-), and period (.) characters."
    elif len(name) > MAX_ATTRIBUTE_NAME:
        reason = f"Attribute name can be up to {MAX_ATTRIBUTE_NAME} characters long."
    elif name.lower().startswith(("aws.", "amazon.")):
        reason = "Attribute name can't start with AWS. or Amazon. (or any casing variations)."
    elif name.startswith(".") or name.endswith(".") or ".." in name:
        reason = "Attribute name must not start or end with a period, or have periods in a sequence."
    else:
        return
    raise invalid(f"The message attribute name '{name}' is invalid. {reason}")


def attribute_value(name: str, spec: object) -> Attribute:
    if not isinstance(spec, dict):
        raise invalid(f"The message attribute '{name}' must be a map.")
    data_type = spec.get("DataType")
    if not isinstance(data_type, str) or not data_type:
        raise invalid(f"The message attribute '{name}' must contain non-empty message attribute type.")
    base = data_type.split(".", 1)[0]
    if base not in ("String", "Number", "Binary"):
        raise invalid(
            f"The message attribute '{name}' has an invalid message attribute type, the set of "
            "supported type prefixes is Binary, Number, and String."
        )
    if len(data_type) > 256 or not is_text(data_type):
        raise invalid(
            f"The message attribute '{name}' has an invalid message attribute type: a type is text "
            "of up to 256 characters."
        )
    if spec.get("StringListValues") or spec.get("BinaryListValues"):
        raise invalid(f"Message attribute list values in '{name}' are not supported.")
    if base == "Binary":
        value = spec.get("BinaryValue")
        if not isinstance(value, str) or not value:
            raise invalid(f"The message attribute '{name}' with type 'Binary' must use field 'Binary'.")
        try:
            return data_type, base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raise invalid(f"The message attribute '{name}' holds a BinaryValue that is not base64.") from None
    text = spec.get("StringValue")
    if not isinstance(text, str) or not text:
        raise invalid(
            f"The message attribute '{name}' must contain non-empty message attribute value "
            f"for message attribute type '{base}'."
        )
    if base == "Number":
        try:
            number = Decimal(text)
        except InvalidOperation:
            number = None
        if number is None or not number.is_finite() or len(number.as_tuple().digits) > 38:
            raise invalid(f"Can't cast the value of message (user) attribute '{name}' to a number.")
    else:
        contents(text)
    return data_type, text


def size_of(text: str, attributes: Mapping[str, Attribute]) -> int:
    """A message's size as SQS counts it against MaximumMessageSize: the body and every
    attribute's name, type and value."""
    n = len(text.encode("utf-8"))
    for name, (data_type, value) in attributes.items():
        n += len(name.encode()) + len(data_type.encode())
        n += len(value) if isinstance(value, bytes) else len(value.encode("utf-8"))
    return n


def entry_size(entry: Mapping[str, Any]) -> int:
    """A batch entry's size as SQS counts it toward the batch's total, before the entry is
    checked: its body and its attributes' names, types and values (what is not text or
    base64 counts as nothing; the entry's own checks refuse it)."""
    n = _bytes(entry.get("MessageBody"))
    raw = entry.get("MessageAttributes")
    for name, spec in raw.items() if isinstance(raw, dict) else ():
        n += _bytes(name)
        if isinstance(spec, dict):
            n += _bytes(spec.get("DataType")) + _bytes(spec.get("StringValue"))
            try:
                n += len(base64.b64decode(spec.get("BinaryValue") or b"", validate=True))
            except (binascii.Error, ValueError, TypeError):
                pass
    return n


def _bytes(value: object) -> int:
    return len(value.encode("utf-8", "replace")) if isinstance(value, str) else 0


def tags(raw: object) -> dict[str, str]:
    """A queue's tags as SQS allows them: a map of keys of 1-128 characters to values of up
    to 256, both text."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise invalid("Tags must be a map of tag keys to tag values.")
    for key, value in raw.items():
        tag_key(key)
        if not is_text(value) or len(value) > MAX_TAG_VALUE:
            raise invalid(
                f"Tag value for key {key!r} is invalid. Reason: a tag value is text of up to "
                f"{MAX_TAG_VALUE} characters."
            )
    return raw


def tag_key(key: object) -> str:
    if not is_text(key) or not 1 <= len(str(key)) <= MAX_TAG_KEY:
        raise invalid(f"Tag key {key!r} is invalid. Reason: a tag key is text of 1 to {MAX_TAG_KEY} characters.")
    return str(key)


def entries(params: Mapping[str, Any], action: str, key: str = "Entries") -> list[dict[str, Any]]:
    """A batch's entries: 1-10, each with a distinct valid Id."""
    got = params.get(key)
    if got is None:
        raise missing(key)
    if not isinstance(got, list) or not got:
        raise SqsError("EmptyBatchRequest", f"There should be at least one {action}RequestEntry in the request.")
    if len(got) > MAX_BATCH_ENTRIES:
        raise SqsError(
            "TooManyEntriesInBatchRequest",
            f"Maximum number of entries per request are {MAX_BATCH_ENTRIES}. You have sent {len(got)}.",
        )
    seen: set[str] = set()
    for entry in got:
        entry_id = entry.get("Id") if isinstance(entry, dict) else None
        if entry_id is None:
            raise missing(f"{action}RequestEntry.Id")
        if not isinstance(entry_id, str) or not BATCH_ID.fullmatch(entry_id):
            raise SqsError(
                "InvalidBatchEntryId",
                "A batch entry id can only contain alphanumeric characters, "
                "hyphens and underscores. It can be at most 80 letters long.",
            )
        if entry_id in seen:
            raise SqsError("BatchEntryIdsNotDistinct", f"Id {entry_id} repeated.")
        seen.add(entry_id)
    return got
