"""One delivery: ack, extend, release, dead letter (each checks its receipt)."""

from __future__ import annotations

from typing import Sequence

from ...core.roundtrip import Op
from .scripts import CHUNK, ScriptBase


def ack_args(pairs: Sequence[tuple[str, str]], bucket_ms: int) -> list[object]:
    """ack.lua's arguments: the pairs whose receipt does not end in g (not grouped) first,
    counted, then the grouped ones, whose group the script reads, each once (a grouped
    delivery listed twice would free two of its group's next)."""
    plain = [p for p in pairs if not p[1].endswith("g")]
    grouped = list(dict.fromkeys(p for p in pairs if p[1].endswith("g")))
    return [bucket_ms, len(plain), *(x for pair in (*plain, *grouped) for x in pair)]


class Settle(ScriptBase):
    def ack(self, pairs: Sequence[tuple[str, str]], bucket_ms: int) -> Op[int]:
        calls = [(self.ack_keys, ack_args(pairs[i : i + CHUNK], bucket_ms)) for i in range(0, len(pairs), CHUNK)]
        return sum((yield from self.call_many("ack", calls)))

    def extend(self, msg_id: str, receipt: str, ms: int, bucket_ms: int) -> Op[int | None]:
        """The new deadline in ms, None when the delivery is not current."""
        k = self.keys
        new = yield from self.call("extend", [k.processing, k.timers, k.item(msg_id)], [bucket_ms, msg_id, receipt, ms])
        return int(new) or None

    def release(
        self, msg_id: str, receipt: str, delay_ms: int, bucket_ms: int, error: str | None, unreceive: bool = False
    ) -> Op[bool]:
        k = self.keys
        keys = [k.processing, k.timers, k.item(msg_id), k.queue, k.items, k.signal]
        args = [
            bucket_ms,
            msg_id,
            receipt,
            delay_ms,
            error or "",
            "0" if error is None else "1",
            "1" if unreceive else "0",
        ]
        return (yield from self.call("release", keys, args)) == 1

    def dead_letter(self, msg_id: str, receipt: str, reason: str, bucket_ms: int) -> Op[bool]:
        k = self.keys
        return (
            yield from self.call(
                "dead_letter",
                [k.processing, k.timers, k.item(msg_id), k.dead, k.counters],
                [bucket_ms, msg_id, receipt, reason],
            )
        ) == 1
