"""One delivery: ack, extend, release, dead letter, each a WATCHed transaction on the message."""

from __future__ import annotations

from typing import Sequence

from ...core.first_delivery import written_out_owned
from ...core.roundtrip import Command, Op, one
from .base import ATTEMPTS, CommandBase, _signal, refuse_groups


class Settle(CommandBase):
    def ack(self, pairs: Sequence[tuple[str, str]], bucket_ms: int) -> Op[int]:
        """Each id is acked on its own terms, so chunks of them commit independently."""
        self._refuse_grouped([receipt for _, receipt in pairs])
        acked = 0
        for i in range(0, len(pairs), self.watch_chunk):
            acked += yield from self._ack(pairs[i : i + self.watch_chunk], bucket_ms)
        return acked

    def _ack(self, pairs: Sequence[tuple[str, str]], bucket_ms: int) -> Op[int]:
        k = self.keys
        for _ in range(ATTEMPTS):
            _, current = yield from self._current([k.processing, k.timers, k.counters], pairs)
            if not current:
                (yield from one(("UNWATCH",)))
                return 0
            tx: list[Command] = [("SREM", k.processing, *(mid for mid, _ in current))]
            for mid, d in current:
                tx += self._drop_timer(mid, d, bucket_ms)
            tx += [("DEL", *(k.item(mid) for mid, _ in current)), ("HINCRBY", k.counters, "acked", len(current))]
            if (yield from self._commit(tx)) is not None:
                return len(current)
        return 0

    def _refuse_grouped(self, receipts: Sequence[str]) -> None:
        """An ack or a dead letter of a grouped message (its receipt ends in g: claim.lua) must
        release its group's next in the same step, which this mode does not do."""
        if any(receipt.endswith("g") for receipt in receipts):
            refuse_groups(True, self.keys.name)

    def extend(self, msg_id: str, receipt: str, ms: int, bucket_ms: int) -> Op[int | None]:
        """The new deadline in ms, None when the delivery is not current."""
        k = self.keys

        def change(now: int, d: int) -> Op[list[Command]]:
            return (yield from self._to_timer(msg_id, now + ms, bucket_ms))

        at = yield from self._one(msg_id, receipt, [k.processing, k.timers], bucket_ms, change)
        return None if at is None else at + ms

    def release(
        self, msg_id: str, receipt: str, delay_ms: int, bucket_ms: int, error: str | None, unreceive: bool = False
    ) -> Op[bool]:
        k = self.keys
        ik = k.item(msg_id)

        def change(now: int, d: int) -> Op[list[Command]]:
            tx: list[Command] = [("SREM", k.processing, msg_id), *written_out_owned(ik, receipt)]
            if error is not None:
                tx.append(("HSET", ik, "e", error))
            if unreceive:  # a current delivery has at least one receive
                tx.append(("HINCRBY", ik, "r", -1))
            if delay_ms > 0:  # (a grouped delivery, whose receipt ends in g, still counts in its group: j)
                timer = yield from self._to_timer(msg_id, now + delay_ms, bucket_ms)
                grouped: list[Command] = [("HSET", ik, "j", "1")] if receipt.endswith("g") else []
                return [*tx, ("HDEL", ik, "c"), *grouped, *timer]
            return [
                *tx,
                ("HDEL", ik, "c", "d"),
                ("RPUSH", k.queue, msg_id),
                ("SADD", k.items, msg_id),
                *_signal(k.signal),
            ]

        typed = [k.processing, k.timers, k.queue, k.items, k.signal]
        return (yield from self._one(msg_id, receipt, typed, bucket_ms, change)) is not None

    def dead_letter(self, msg_id: str, receipt: str, reason: str, bucket_ms: int) -> Op[bool]:
        self._refuse_grouped([receipt])
        k = self.keys
        ik = k.item(msg_id)

        def change(now: int, d: int) -> Op[list[Command]]:
            tx: list[Command] = [
                ("SREM", k.processing, msg_id),
                *written_out_owned(ik, receipt),
                ("HDEL", ik, "c", "d"),
                ("RPUSH", k.dead, msg_id),
                ("HINCRBY", k.counters, "dead_lettered", 1),
            ]
            return [*tx, ("HSET", ik, "x", now, *(("e", reason) if reason else ()))]
            yield  # a generator, as change() must be

        return (
            yield from self._one(msg_id, receipt, [k.processing, k.timers, k.dead, k.counters], bucket_ms, change)
        ) is not None
