"""A first delivery stored lean, in both modes.

A claim writes most messages' first delivery as two fields, the receipt ``c`` (``1-<claim
ms>``, a grouped message's with ``g`` after it) and the deadline ``d``: every field a claim writes costs Redis time on every message.
While ``r`` is absent beside ``c``, the receives and deliveries (``r``, ``n``) are 1 and the
first delivery's time (``f``) is the receipt's. Readers fill them in (:func:`implied`); whatever
deletes the receipt writes them out first (:func:`written_out`, :func:`written_out_owned`),
as ``first_written`` in ``_lib.lua`` does for the scripts.
"""

from __future__ import annotations

import re
from typing import Any

Commands = list[tuple[Any, ...]]  # (roundtrip's Command, which imports this module's readers)

_FIRST = re.compile(rb"1-(\d+)g?")  # (a grouped message's receipt ends in g)


def implied(r: bytes | None, c: bytes | None) -> dict[bytes, bytes]:
    """The fields a lean first delivery leaves out (empty when it is not one)."""
    if r is not None or c is None:
        return {}
    m = _FIRST.fullmatch(c)
    return {b"r": b"1", b"n": b"1", **({b"f": m.group(1)} if m else {})}


def written_out(item_key: str, r: bytes | None, c: bytes | None) -> Commands:
    """What to write before deleting the receipt of an item whose ``r`` and ``c`` were read."""
    fields = implied(r, c)
    return [("HSET", item_key, *(x for pair in fields.items() for x in pair))] if fields else []


def written_out_owned(item_key: str, receipt: str) -> Commands:
    """The same for a current delivery whose ``r`` was not read: its receipt, which matched
    ``c``, tells whether it is a first delivery, and HSETNX writes only what is missing."""
    m = _FIRST.fullmatch(receipt.encode())
    if not m:
        return []
    return [("HSETNX", item_key, field, value) for field, value in ((b"r", b"1"), (b"n", b"1"), (b"f", m.group(1)))]
