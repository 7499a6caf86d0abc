"""MD5OfMessageBody and MD5OfMessageAttributes as SQS computes them: SDKs that verify them
(Java, .NET, Go) reject a reply whose digests differ from their own."""

from __future__ import annotations

import hashlib
import struct
from typing import Mapping

#: An attribute as the wire carries it: (DataType, value); value is str for String and
#: Number types, bytes for Binary ones.
Attribute = tuple[str, "str | bytes"]


def md5_of_body(body: str) -> str:
    return hashlib.md5(body.encode("utf-8")).hexdigest()


def md5_of_attributes(attributes: Mapping[str, Attribute]) -> str:
    """AWS's encoding: for each attribute, by name: the name, the data type (each a 4-byte
    big-endian length and UTF-8 bytes), one transport byte (1 string or number, 2 binary),
    then the value (4-byte length and bytes)."""
    digest = hashlib.md5()
    for name in sorted(attributes):
        data_type, value = attributes[name]
        raw = value if isinstance(value, bytes) else value.encode("utf-8")
        for part in (name.encode("utf-8"), data_type.encode("utf-8")):
            digest.update(struct.pack(">I", len(part)) + part)
        digest.update(b"\x02" if isinstance(value, bytes) else b"\x01")
        digest.update(struct.pack(">I", len(raw)) + raw)
    return digest.hexdigest()
