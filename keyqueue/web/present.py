"""How values read on the page and in the API: numbers, ages, times, rates, message bodies
(escaped by the templates, cut here) and sparkline points. No I/O."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any, Sequence

from ..message import BaseMessage, json_body

#: Characters of a body shown in a message row; the whole (up to FULL_CHARS) unfolds.
PREVIEW_CHARS = 160
FULL_CHARS = 20_000
#: Characters of a last_error shown in a dead letter's row (a traceback unfolds).
ERROR_CHARS = 300
#: Bytes of a binary body shown as hex.
HEX_BYTES = 48
#: Sparkline size in CSS pixels.
SPARK_W, SPARK_H = 150, 28
#: Characters a page cannot show: a UTF-8 body with one of them (NULs, a protobuf) is shown as hex.
UNPRINTABLE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


@dataclass(frozen=True)
class BodyView:
    """A body for a human: ``text`` (to be escaped by the template), cut; binary bodies
    as a hex preview."""

    preview: str
    full: str
    size: int
    binary: bool
    cut: bool


def body_view(body: bytes) -> BodyView:
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is None or UNPRINTABLE.search(text):
        hexed = body[:HEX_BYTES].hex(" ")
        return BodyView(hexed, hexed, len(body), True, len(body) > HEX_BYTES)
    return BodyView(text[:PREVIEW_CHARS], text[:FULL_CHARS], len(body), False, len(text) > PREVIEW_CHARS)


def api_message(m: BaseMessage) -> dict[str, Any]:
    """A message of ``GET /api/queues/NAME/messages``: the body as text, or base64 with
    ``body_base64`` true (as ``keyqueue peek --json``)."""
    body, b64 = json_body(m.body)
    return {
        "id": m.id,
        "body": body,
        "body_base64": b64,
        "receives": m.receives,
        "enqueued_at": m.enqueued_at,
        "deadline": m.deadline,
        "last_error": m.last_error,
    }


def number(n: int) -> str:
    return f"{n:,}".replace(",", "\u2009")  # thin space: 12 345


def duration(seconds: float | None) -> str:
    """``850 ms``, ``42 s``, ``3 m 05 s``, ``2 h 10 m``, ``4 d 3 h``; ``–`` for None."""
    if seconds is None:
        return "\u2013"
    s = abs(seconds)
    if s < 1:
        return f"{s * 1000:.0f} ms"
    if s < 60:
        return f"{s:.1f} s" if s < 10 else f"{s:.0f} s"
    m, sec = divmod(int(s), 60)
    if m < 60:
        return f"{m} m {sec:02d} s"
    h, m = divmod(m, 60)
    if h < 48:
        return f"{h} h {m:02d} m"
    d, h = divmod(h, 24)
    return f"{d} d {h} h"


def rate(per_second: float | None) -> str:
    if per_second is None:
        return "\u2013"
    if per_second == 0:
        return "0/s"
    if per_second < 10:
        return f"{per_second:.2f}/s"
    return f"{per_second:,.0f}/s".replace(",", "\u2009")


def when(epoch: float | None) -> str:
    """A server-clock time as UTC, to the second."""
    if epoch is None:
        return "\u2013"
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(epoch))


def relative(epoch: float | None, now: float) -> str:
    """``in 25 s`` or ``4.0 s ago``."""
    if epoch is None:
        return "\u2013"
    delta = epoch - now
    return f"in {duration(delta)}" if delta >= 0 else f"{duration(delta)} ago"


def points(series: Sequence[float], top: float, width: int = SPARK_W, height: int = SPARK_H) -> str:
    """SVG polyline points of ``series`` (oldest first) across the whole width, scaled to
    ``top`` (the largest value drawn)."""
    if len(series) < 2:
        return ""
    top = top or 1.0
    step = width / (len(series) - 1)
    return " ".join(f"{i * step:.1f},{height - 1 - (v / top) * (height - 2):.1f}" for i, v in enumerate(series))


def top(*series: Sequence[float]) -> float:
    return max((v for s in series for v in s), default=0.0)
