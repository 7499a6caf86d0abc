"""Reading without changing: peek and stats."""

from __future__ import annotations

from ...core.replies import flat_fields, int_or
from ...core.results import Counts, Fields
from ...core.roundtrip import Op
from .scripts import ScriptBase


class Inspect(ScriptBase):
    def peek(self, source: str, count: int) -> Op[list[Fields]]:
        return flat_fields((yield from self.call("peek", self.state_keys, [source, count])))

    def stats(self) -> Op[Counts]:
        waiting, processing, delayed, dead, oldest, now, held = yield from self.call("stats", self.state_keys, [])
        return Counts(
            int(waiting),
            int(processing),
            int(delayed),
            int(dead),
            None if oldest is None else int_or(oldest),
            int(now),
            int(held),
        )
