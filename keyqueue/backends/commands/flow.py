"""Flow control for the script-free claim: what the limits in the config hash leave a claim,
read in the claim's first round trip and settled in its commit, with no round trip of its own.

The rate limit's window counter is reserved (INCRBY) before any id is taken and what goes
unused is given back (DECRBY): claimers at once never take more than the window allows, and
a claimer that dies holding a reservation only lowers that window's count. The in-flight
cap is checked by counting ``processing`` (on one server, every shard's of a sharded queue)
right after a claimer's own SADDs: those that keep their ids never exceed it together (of two
claimers, the later to add counts the earlier one)."""

from __future__ import annotations

from typing import Any

from ...core.backend import FlowScope
from ...core.replies import text
from ...core.roundtrip import Command
from ...errors import CorruptQueue, InvalidArgument
from ...keys import QueueKeys
from ...settings import parse_rate, to_ms


def counted(keys: QueueKeys, scope: FlowScope | None) -> list[str]:
    """The processing sets whose deliveries the in-flight cap counts."""
    return [keys.processing, *(() if scope is None else scope.processing)]


class Flow:
    """One claim pass's limits, as read at server time ``now`` (ms)."""

    def __init__(
        self, keys: QueueKeys, now: int, limits: Any, throttle: Any, held: int, scope: FlowScope | None = None
    ) -> None:
        self.k = keys
        self.now = now
        #: The processing sets the in-flight cap counts.
        self.processing = counted(keys, scope)
        #: As ``Claimed.limited_ms``: None while no limit cut the claim.
        self.limited_ms: int | None = None
        self.rate_key: str | None = None
        self.reserved_count = 0
        self.free: int | None = None
        self.cap: int | None = None
        self.limit = 0
        self.window_end = 0
        rate_text, cap = (None, None) if limits is None else (limits[0], limits[1])
        if throttle is not None:
            try:
                until = int(throttle)
            except ValueError:
                raise CorruptQueue(keys.throttle, "holds a throttle time that is not a number") from None
            if until > now:
                self.limited_ms = until - now
                self.free = 0
                return
        try:
            self.cap = int(cap) if cap is not None and cap != b"" else None
            if self.cap is not None and scope is not None:
                self.cap = scope.cap(self.cap)
            rate = parse_rate(text(rate_text)) if rate_text not in (None, b"") else None
        except (ValueError, InvalidArgument):
            raise CorruptQueue(keys.config, "holds a bad flow-control setting") from None
        if self.cap is not None:
            self.free = max(self.cap - held, 0)
        if rate is not None:
            window = to_ms(rate[1])
            w = now // window
            self.limit = rate[0] if scope is None else scope.limit(rate[0], w)
            self.rate_key, self.window_end = (keys if scope is None else scope.keys).rate(w), (w + 1) * window

    def full_window(self, key: str | None, used: Any) -> None:
        """Refuse at once when ``used``, the count read of window counter ``key``, shows this
        window (the same key) already full: no reservation to make and give back."""
        if self.rate_key is None or key != self.rate_key or self.free == 0:
            return
        if isinstance(used, bytes) and used.isdigit() and int(used) >= self.limit:
            self.limited_ms = self.window_end - self.now
            self.free = 0

    def claim_time(self, taken: int) -> int:
        """A delivery's start (ms): when its messages were taken (``taken``), but never before
        the limits were read nor past the rate limit's window it was counted in."""
        taken = max(taken, self.now)
        return min(taken, self.window_end - 1) if self.rate_key else taken

    def cut(self, count: int) -> int:
        """How many of ``count`` list heads the claim may try."""
        if self.free is not None and self.free < count:
            if self.limited_ms is None:
                self.limited_ms = -1
            return self.free
        return count

    @property
    def keys(self) -> list[str]:
        """Keys the claim writes beyond its usual ones (their types checked with the rest)."""
        return [self.rate_key] if self.rate_key else []

    def reserve(self, n: int) -> list[Command]:
        if not self.rate_key:
            return []
        self.reserved_count = n
        return [("INCRBY", self.rate_key, n), ("PEXPIRE", self.rate_key, self.window_end - self.now)]

    def reserved(self, total: int, n: int, at: int) -> int:
        """How many of the ``n`` ids just reserved fit in the window (``total``: its count at
        server time ``at``). None of them once the window has ended: its counter may have expired
        and started again from zero (the claim is tried again at once, in the next window)."""
        if at >= self.window_end:
            self.limited_ms = 0
            return 0
        allowed = max(0, min(n, self.limit - (total - n)))
        if allowed < n:
            self.limited_ms = self.window_end - self.now
        return allowed

    def count_held(self) -> list[Command]:
        return [("SCARD", key) for key in self.processing] if self.free is not None else []

    def over(self, replies: list[Any], won: int) -> int:
        """How many of the ``won`` ids this claimer must give back for the in-flight cap."""
        if not replies or self.cap is None:
            return 0
        over = max(0, min(won, sum(int(r) for r in replies) - self.cap))
        if over and self.limited_ms is None:
            self.limited_ms = -1
        return over

    def settle(self, reserved: int, delivered: int, refused: bool) -> list[Command]:
        """The commit's part: the unused reservation given back, a refused claim counted."""
        out: list[Command] = []
        if self.rate_key and reserved > delivered:
            out += [
                ("DECRBY", self.rate_key, reserved - delivered),
                ("PEXPIRE", self.rate_key, self.window_end - self.now),
            ]
        if refused:
            out.append(("HINCRBY", self.k.counters, "throttled", 1))
        return out
