"""The demo: producers and consumers on a Redis of its own, one consumer abandoning its work
mid-batch, and the reaper bringing that work back. Ends with an audit of every message."""

from __future__ import annotations

import threading
import time
from collections import Counter
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Callable

from .queue import Queue
from .server import RedisServer


@dataclass
class DemoResult:
    enqueued: int
    processed: int
    duplicates: int
    abandoned: int
    seconds: float

    @property
    def ok(self) -> bool:
        return self.processed == self.enqueued


def run_demo(url: str | None = None, *, messages: int = 5000, consumers: int = 3,
             echo: Callable[[str], None] = print) -> DemoResult:
    with ExitStack() as stack:
        if url is None:
            server = stack.enter_context(RedisServer())
            url = server.url
            echo(f"started redis-server on 127.0.0.1:{server.port}")
        q = Queue("demo", url=url, visibility_timeout=2.0, bucket_seconds=1, max_receives=5)
        q.purge(source="all")
        t0 = time.monotonic()
        q.enqueue_many(f"job {i}" for i in range(messages))
        echo(f"enqueued {messages} messages in {time.monotonic() - t0:.3f}s")
        done: Counter[str] = Counter()
        lock = threading.Lock()
        stop = threading.Event()
        abandoned: list[int] = [0]

        def consume(crash_after: int | None) -> None:
            mine = Queue("demo", url=url)
            handled = 0
            while not stop.is_set():
                batch = mine.claim_many(50, wait=0.2)
                if crash_after is not None and handled >= crash_after:
                    abandoned[0] = len(batch)  # "dies" holding a batch: never acks it
                    return
                with lock:
                    done.update(m.id for m in batch)
                handled += len(batch)
                mine.ack_many(batch)

        def reap() -> None:
            while not stop.wait(0.5):
                q.reap()

        threads = [threading.Thread(target=consume, args=(messages // (consumers * 3) if i == 0 else None,))
                   for i in range(consumers)] + [threading.Thread(target=reap)]
        for t in threads:
            t.start()
        while len(done) < messages and time.monotonic() - t0 < 60:
            s = q.stats()
            echo(f"  processed {len(done):>6}/{messages}  waiting {s.waiting:>6}  "
                 f"in flight {s.processing:>4}")
            time.sleep(0.5)
        stop.set()
        for t in threads:
            t.join()
        result = DemoResult(messages, len(done), sum(done.values()) - len(done), abandoned[0],
                            time.monotonic() - t0)
        echo(f"one consumer abandoned {result.abandoned} claimed messages; the reaper returned them")
        echo(f"processed {result.processed}/{messages} distinct messages, "
             f"{result.duplicates} delivered twice, in {result.seconds:.1f}s: "
             + ("nothing lost" if result.ok else "MESSAGES MISSING"))
        q.destroy()
        return result
