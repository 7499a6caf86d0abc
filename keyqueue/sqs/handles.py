"""Receipt handles: the queue name, the message id and keyqueue's per-delivery receipt,
authenticated with an HMAC whose key is derived from the secret access key, in base64
without padding. The standard alphabet, as SQS's own handles: a handle never starts with
``-``, which command lines (the aws CLI's ``--receipt-handle -...``) take for an option.
Handles in the URL-safe alphabet, which earlier servers made, are read too.

A handle cannot be forged (the MAC), used on another queue (the name is in it and checked
against the URL), or act on a later delivery of the same message (keyqueue's receipt fences
each delivery: a stale one changes nothing)."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from typing import NamedTuple

from .errors import SqsError

MAC_BYTES = 16
#: The URL-safe alphabet's two letters, as the standard alphabet has them.
URL_SAFE = str.maketrans("-_", "+/")


class Handle(NamedTuple):
    queue: str
    id: str
    receipt: str


class Handles:
    """Makes and checks handles for one key prefix with one secret."""

    def __init__(self, secret_access_key: str, prefix: str) -> None:
        # A key of its own, so the secret itself never signs anything but SigV4 requests.
        self._key = hmac.new(secret_access_key.encode(), b"keyqueue sqs receipt handles", hashlib.sha256).digest()
        self._prefix = prefix.encode()

    def _mac(self, payload: bytes) -> bytes:
        return hmac.new(self._key, self._prefix + b"\n" + payload, hashlib.sha256).digest()[:MAC_BYTES]

    def make(self, queue: str, msg_id: str, receipt: str) -> str:
        payload = f"{queue}\n{msg_id}\n{receipt}".encode()
        return base64.b64encode(self._mac(payload) + payload).rstrip(b"=").decode()

    def read(self, handle: object, queue: str) -> Handle:
        """The handle's parts, or ReceiptHandleIsInvalid when it was not made here for ``queue``."""
        if not isinstance(handle, str) or not handle:
            raise SqsError("MissingParameter", "The request must contain the parameter ReceiptHandle.")
        try:
            raw = base64.b64decode(handle.translate(URL_SAFE) + "=" * (-len(handle) % 4), validate=True)
        except (binascii.Error, ValueError):
            raw = b""
        mac, payload = raw[:MAC_BYTES], raw[MAC_BYTES:]
        parts = payload.decode("utf-8", "replace").split("\n")
        if (
            len(raw) <= MAC_BYTES
            or not hmac.compare_digest(mac, self._mac(payload))
            or len(parts) != 3
            or parts[0] != queue
        ):
            raise SqsError(
                "ReceiptHandleIsInvalid", f'The input receipt handle "{handle[:200]}" is not a valid receipt handle.'
            )
        return Handle(*parts)
