"""``spark.readStream.format("keyqueue")``: consume a queue as a stream, at-least-once.

Each micro-batch claims up to max-rows-per-trigger messages with the visibility timeout
when Spark asks for the latest offset, and records what it claimed (ids and receipts) in
the helper hash ``P:{NAME}:stream:<source>`` under the batch number, so a query restarted
from its checkpoint replays a batch exactly. Messages are acknowledged once Spark has
committed the batch that held them: at ``commit(end)``, or when Spark asks for the next
offset (it does so only after the previous batch is in the commit log). A thread of the
reader extends the deadlines of everything claimed and not yet acknowledged while the
query lives; a stopped or crashed query's messages come back by their visibility timeout.
"""

from __future__ import annotations

import logging
import threading
import uuid
from dataclasses import dataclass
from typing import Iterator, Sequence

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from ..core import manifest
from ..core.manifest import Pairs
from ..message import Message
from ..queue import Queue
from ..transport.sync import run
from .options import Options
from .snapshot import PER_PARTITION, Ids, messages, utc

log = logging.getLogger("keyqueue.spark")

SCHEMA = "id string, body binary, receives int, enqueued_at timestamp"
#: A manifest outlives a query that is never restarted by this long (seconds).
MANIFEST_TTL = 7 * 24 * 3600
#: Most messages one micro-batch takes when Spark sets no row limit.
MAX_PER_BATCH = 100_000
#: Messages per claim call.
CLAIM_CHUNK = 1000


def stubs(q: Queue, pairs: Pairs) -> list[Message]:
    """Messages carrying only what ack and extend need: id and receipt."""
    return [Message(mid, b"", receipt, 0, 0.0, None, None, queue=q) for mid, receipt in pairs]


@dataclass
class Offset:
    source: str
    batch: int

    @classmethod
    def of(cls, d: dict[str, object]) -> Offset:
        return cls(str(d["source"]), int(d["batch"]))  # type: ignore[call-overload]

    def to_dict(self) -> dict[str, object]:
        return {"source": self.source, "batch": self.batch}


class StreamSource(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Lives in one long-lived Python process on the driver for the whole query; ``read``
    runs on pickled copies in the executors, so it uses only ``opts``."""

    def __init__(self, opts: Options) -> None:
        self.opts = opts
        self.source = uuid.uuid4().hex
        self._q: Queue | None = None
        self._lock = threading.Lock()
        self._held: dict[int, Pairs] = {}
        self._rows: dict[int, list[tuple[object, ...]]] = {}  # batches claimed by this process
        self._loaded: set[str] = set()
        self._target: int | None = None
        self._stop = threading.Event()

    def __getstate__(self) -> dict[str, object]:
        return {"opts": self.opts, "source": self.source}  # what read() needs in executors

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__init__(state["opts"])  # type: ignore[misc]

    # -- the driver side -------------------------------------------------------------------

    def _queue(self) -> Queue:
        if self._q is None:
            self._q = self.opts.open()
            threading.Thread(target=self._extend_loop, name="keyqueue-extend", daemon=True).start()
        return self._q

    def _vis(self) -> float:
        q = self._queue()
        return self.opts.visibility_timeout or q.settings.visibility_timeout

    def _load(self, source: str) -> None:
        """After a restart: the batches this source claimed and Spark has not committed."""
        if source in self._loaded:
            return
        self._loaded.add(source)
        q = self._queue()
        stored = run(q.client, manifest.batches(q.keys, source))
        with self._lock:
            for b, pairs in stored.items():
                self._held.setdefault(b, pairs)

    def initialOffset(self) -> dict[str, object]:
        return Offset(self.source, 0).to_dict()

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.opts.max_rows)

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._queue().length()

    def latestOffset(self, start: dict[str, object], limit: ReadLimit) -> dict[str, object]:
        at = Offset.of(start)
        self._load(at.source)
        self._ack_through(at)  # Spark asks for a new offset only after committing `start`
        n = limit.max_rows if isinstance(limit, ReadMaxRows) else MAX_PER_BATCH
        if self._target is not None:
            n = min(n, self._target)
        q = self._queue()
        got: list[Message] = []
        while len(got) < n:
            more = q.claim_many(min(n - len(got), CLAIM_CHUNK), visibility_timeout=self._vis())
            if not more:
                break
            got += more
        if not got:
            return start
        if self._target is not None:
            self._target -= len(got)
        end = Offset(at.source, at.batch + 1)
        pairs: Pairs = [(m.id, m.receipt) for m in got if m.receipt is not None]
        rows = [_row(m) for m in got]
        run(q.client, manifest.record(q.keys, end.source, end.batch, pairs, MANIFEST_TTL))
        with self._lock:
            self._held[end.batch] = pairs
            self._rows[end.batch] = rows
        return end.to_dict()

    def partitions(self, start: dict[str, object], end: dict[str, object]) -> Sequence[InputPartition]:
        first, last = Offset.of(start), Offset.of(end)
        self._load(last.source)
        ids: list[str] = []
        rows: list[tuple[object, ...]] = []
        with self._lock:
            for b in range(first.batch + 1, last.batch + 1):
                if b in self._rows:  # claimed by this process: the rows came with the claim
                    rows += self._rows[b]
                else:  # a batch replayed after a restart: read its messages again
                    ids += [mid for mid, _ in self._held.get(b, [])]
        parts: list[InputPartition] = [Rows(rows[i : i + PER_PARTITION]) for i in range(0, len(rows), PER_PARTITION)]
        parts += [Ids(ids[i : i + PER_PARTITION]) for i in range(0, len(ids), PER_PARTITION)]
        return parts or [Rows([])]  # at least one: given none, PySpark calls read(None)

    def commit(self, end: dict[str, object]) -> None:
        self._ack_through(Offset.of(end))

    def _ack_through(self, end: Offset) -> None:
        with self._lock:
            done = sorted(b for b in self._held if b <= end.batch)
            pairs = [p for b in done for p in self._held.pop(b)]
            for b in done:
                self._rows.pop(b, None)
        if not done:
            return
        q = self._queue()
        acked = q.ack_many(stubs(q, pairs)) if pairs else 0
        run(q.client, manifest.forget(q.keys, end.source, done))
        if acked < len(pairs):
            log.info(
                "acknowledged %d of %d messages of batches %s (the rest were redelivered "
                "after their visibility timeout)",
                acked,
                len(pairs),
                done,
            )

    def _extend_loop(self) -> None:
        """Keep what this query holds invisible until Spark commits it. Spark never calls
        ``stop()``, but the process holding this reader ends with its query (seen with
        PySpark 4.3: stop(), a failed batch, the end of AvailableNow), and this thread with
        it; then the messages come back by their deadline."""
        q = self._queue()
        vis = self._vis()
        while not self._stop.wait(max(vis / 3, 0.2)):
            with self._lock:
                held = {b: list(p) for b, p in self._held.items()}
            for b, pairs in held.items():
                lost = {m.id for m in stubs(q, pairs) if not self._extend(q, m, vis)}
                if lost:
                    with self._lock:
                        if b in self._held:
                            self._held[b] = [p for p in self._held[b] if p[0] not in lost]

    def _extend(self, q: Queue, m: Message, vis: float) -> bool:
        try:
            return q.extend(m, vis)
        except Exception as exc:  # noqa: BLE001  Redis away: try again next round
            log.warning("extending message %s failed: %s", m.id, exc)
            return True

    def stop(self) -> None:
        self._stop.set()

    # -- the executor side -----------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[tuple[object, ...]]:
        if isinstance(partition, Rows):
            yield from partition.rows
            return
        assert isinstance(partition, Ids)
        yield from map(_row, messages(self.opts, partition.ids))


@dataclass
class Rows(InputPartition):
    rows: list[tuple[object, ...]]


def _row(m: Message) -> tuple[object, ...]:
    return (m.id, m.body, m.receives, utc(m.enqueued_at))
