"""Reading raw replies (RESP2 or RESP3 shapes) and the item hash, for both modes."""

from __future__ import annotations

from typing import Any, Sequence, TypeVar, overload

from redis.exceptions import NoPermissionError, ResponseError, TryAgainError

from ..errors import CorruptQueue
from .first_delivery import implied
from .results import Fields

#: The error a script gets, on a cluster, for a key of a slot that is migrating away.
NON_LOCAL_KEY = "Script attempted to access a non local key"

#: Bytes per body field unless the server says otherwise (its hash-max-listpack-value):
#: a body of up to 100 fields is stored in fields b, b1, b2, ... (as _lib.lua does), so the
#: item hash stays a compact listpack; a larger body is one field b.
FIELD = 64

D = TypeVar("D")


def text(v: Any, errors: str = "strict") -> str:
    return v.decode("utf-8", errors) if isinstance(v, bytes) else str(v)


def maybe_text(v: Any) -> str | None:
    return None if v is None else text(v, "replace")


def name(v: Any) -> str:
    """A key name, member or list entry as text that never raises: bytes that are not UTF-8
    (damage an fsck may meet) come out escaped."""
    return text(v, "backslashreplace")


@overload
def int_or(v: Any) -> int: ...
@overload
def int_or(v: Any, default: D) -> int | D: ...
def int_or(v: Any, default: Any = 0) -> Any:
    """An integer reply or field, ``default`` when absent or not a number (``int_or(v, None)``
    keeps an absent timer apart from timer 0)."""
    try:
        return int(v)
    except (TypeError, ValueError):
        return default


def ok(reply: Any) -> Any:
    """A reply, or the error reply raised (a command of a round trip that must not fail)."""
    if isinstance(reply, Exception):
        raise reply
    return reply


def body_fields(body: bytes, size: int = FIELD) -> list[bytes]:
    """HSET arguments for a body, split like ``_lib.lua``'s body_fields."""
    if len(body) <= size or len(body) > size * 100:
        return [b"b", body]
    out = [b"b", body[:size]]
    for k, i in enumerate(range(size, len(body), size), start=1):
        out += [b"b%d" % k, body[i : i + size]]
    return out


def hash_reply(raw: Sequence[Any] | dict[Any, Any] | None) -> dict[bytes, bytes]:
    """An HGETALL reply (a flat list under RESP2, a map under RESP3) as a dict."""
    if not raw:
        return {}
    if isinstance(raw, dict):
        return dict(raw)
    return {raw[i]: raw[i + 1] for i in range(0, len(raw), 2)}


def item_fields(raw: Sequence[Any] | dict[Any, Any] | None) -> dict[bytes, bytes]:
    """An item hash with its body reassembled under b"b", and the fields a lean first
    delivery leaves out filled in."""
    f = hash_reply(raw)
    parts = sorted((int(k[1:]), k) for k in f if len(k) > 1 and k[:1] == b"b" and k[1:].isdigit())
    if parts:
        f[b"b"] = f.get(b"b", b"") + b"".join(f.pop(k) for _, k in parts)
    for k, v in implied(f.get(b"r"), f.get(b"c")).items():
        f.setdefault(k, v)
    return f


def fields_of(msg_id: str, f: dict[bytes, bytes]) -> Fields:
    d = f.get(b"d")
    c = f.get(b"c")
    first = f.get(b"f")
    s = f.get(b"s")
    g = f.get(b"g")
    return Fields(
        msg_id,
        f.get(b"b", b""),
        int_or(f.get(b"t")),
        int_or(f.get(b"r")),
        None if d is None else int(d),
        None if c is None else text(c),
        maybe_text(f.get(b"e")),
        f.get(b"a"),
        None if first is None else int(first),
        None if s is None else int(s),
        None if g is None else text(g),
    )


def flat_fields(reply: Sequence[Any], start: int = 0) -> list[Fields]:
    """A script's flat reply, 11 values a message (id, b, t, r, d, c, e, a, f, s, g), as Fields."""
    out = []
    for i in range(start, len(reply), 11):
        mid, body, t, r, d, c, e, a, f, s, g = reply[i : i + 11]
        # ids and receipts are ASCII the scripts wrote: decoded inline (a claim reads 100 at once)
        out.append(
            Fields(
                mid.decode() if type(mid) is bytes else text(mid),
                b"" if body is None else body,
                int_or(t),
                int_or(r),
                None if d is None else int(d),
                None if c is None else (c.decode() if type(c) is bytes else text(c)),
                None if e is None else text(e, "replace"),
                a,
                None if f is None else int(f),
                None if s is None else int(s),
                None if g is None else text(g),
            )
        )
    return out


def scored(raw: Sequence[Any]) -> list[tuple[Any, float]]:
    """ZRANGE ... WITHSCORES as (member, score) pairs: a flat list under RESP2, pairs under RESP3."""
    if raw and isinstance(raw[0], (list, tuple)):
        return [(m, float(sc)) for m, sc in raw]
    return [(raw[j], float(raw[j + 1])) for j in range(0, len(raw), 2)]


def zscore_pair(first: Sequence[Any]) -> float | None:
    """The score of ZRANGE key 0 0 WITHSCORES (the first pair of ``scored``)."""
    pairs = scored(first)
    return pairs[0][1] if pairs else None


def error_for(exc: Exception, default_key: str) -> Exception:
    """The exception to raise for an error reply: CorruptQueue for a key of the wrong type
    (named by a script, else ``default_key``), the reply itself otherwise."""
    msg = str(exc) if isinstance(exc, ResponseError) else ""
    if msg.startswith("KQCORRUPT "):
        return CorruptQueue(msg.split()[1])
    if "WRONGTYPE" in msg:
        return CorruptQueue(default_key)
    if NON_LOCAL_KEY in msg:  # (a slot migrating: transient, as TRYAGAIN is)
        return TryAgainError(msg)
    if isinstance(exc, NoPermissionError) and ("'evalsha'" in msg or "'script" in msg):
        return type(exc)(
            f"{msg} (this Redis user may not run scripts: use the script-free mode, "
            "Queue(..., scripting=False) or keyqueue --no-scripting)"
        )
    return exc


def raise_errors(commands: Sequence[Sequence[Any]], replies: Sequence[Any], default_key: str) -> None:
    """Raise for the first error reply, naming the key of its command."""
    for cmd, reply in zip(commands, replies):
        if isinstance(reply, ResponseError):
            raise error_for(reply, str(cmd[1]) if len(cmd) > 1 else default_key)
