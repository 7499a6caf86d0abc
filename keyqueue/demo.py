"""``keyqueue demo``: worker processes and a reaper on a Redis of its own (or --url). One
worker is SIGKILLed mid-batch; its messages come back after their visibility timeout, and
an audit accounts for every message. Each handler records its delivery in an audit hash,
so duplicates (work done, ack lost with the killed process) are counted, not hidden."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Callable

from .message import Message
from .queue import Queue
from .server import RedisServer

QUEUE = "demo"
AUDIT_KEY = "keyqueue-demo:deliveries"  # message id -> times a handler completed it
VISIBILITY = 3.0


def handle(message: Message) -> None:
    """The demo's handler: a little work, then a record of the delivery."""
    time.sleep(0.002)
    assert message.queue is not None
    message.queue.client.hincrby(AUDIT_KEY, message.id, 1)


@dataclass
class DemoResult:
    enqueued: int
    processed: int
    deliveries: int
    in_flight_at_kill: int  # the queue's deliveries in flight when a worker was killed
    seconds: float

    @property
    def duplicates(self) -> int:
        return self.deliveries - self.processed

    @property
    def lost(self) -> int:
        return self.enqueued - self.processed

    @property
    def ok(self) -> bool:
        return self.lost == 0


def _spawn(url: str, prefix: str, *args: str) -> subprocess.Popen[bytes]:
    env = dict(os.environ, KEYQUEUE_URL=url)  # not on the command line, where ps shows it
    return subprocess.Popen(
        [sys.executable, "-m", "keyqueue", "--prefix", prefix, *args], env=env, stdin=subprocess.DEVNULL
    )


def run_demo(
    url: str | None = None,
    *,
    prefix: str = "kq",
    messages: int = 2000,
    workers: int = 3,
    echo: Callable[[str], None] | None = None,
) -> DemoResult:
    out = echo or (lambda line: print(line, flush=True))
    live = echo is None and sys.stdout.isatty()
    with ExitStack() as stack:
        if url is None:
            server = stack.enter_context(RedisServer())
            url = server.url
            out(f"started redis-server on 127.0.0.1:{server.port} (no --url given)")
        q = Queue(QUEUE, url=url, prefix=prefix, visibility_timeout=VISIBILITY, bucket_seconds=1)
        q.purge(source="all")
        q.client.delete(AUDIT_KEY)
        t0 = time.monotonic()
        for i in range(0, messages, 1000):
            q.enqueue_many(f"job {n}" for n in range(i, min(i + 1000, messages)))
        out(f"enqueued {messages} messages")

        procs = [
            _spawn(url, prefix, "worker", "keyqueue.demo:handle", "-q", QUEUE, "-c", "4", "--log-level", "error")
            for _ in range(workers)
        ]
        procs.append(_spawn(url, prefix, "reaper", QUEUE, "--interval", "0.5", "--log-level", "error"))
        stack.callback(_stop_all, procs)
        out(f"started {workers} worker processes (4 threads each) and a reaper")

        victim, in_flight_at_kill = procs[0], -1
        last_line = 0.0
        while time.monotonic() - t0 < 120:
            done = q.client.hlen(AUDIT_KEY)
            s = q.stats()
            if in_flight_at_kill < 0 and done >= messages // 3:
                in_flight_at_kill = s.processing
                victim.send_signal(signal.SIGKILL)
                victim.wait()
                out(
                    f"\nSIGKILLed worker pid {victim.pid} mid-batch ({in_flight_at_kill} messages in flight "
                    f"over the {workers} workers); what it held comes back after its {VISIBILITY:.0f}s "
                    "visibility timeout"
                )
            line = (
                f"processed {done:>6}/{messages}  waiting {s.waiting:>6}  in flight {s.processing:>4}"
                f"  t={time.monotonic() - t0:5.1f}s"
            )
            if live:
                bar = "#" * int(30 * done / messages)
                sys.stdout.write(f"\r[{bar:<30}] {line}")
                sys.stdout.flush()
            elif time.monotonic() - last_line >= 1.0:
                out(line)
                last_line = time.monotonic()
            if done >= messages and s.processing == 0:
                break
            time.sleep(0.1)
        if live:
            sys.stdout.write("\n")
        codes = _stop_all(procs[1:])
        deliveries = sum(int(v) for v in q.client.hvals(AUDIT_KEY))
        result = DemoResult(
            messages, q.client.hlen(AUDIT_KEY), deliveries, max(in_flight_at_kill, 0), time.monotonic() - t0
        )
        out(f"workers and reaper stopped with SIGTERM, exit codes {codes}")
        out(
            f"audit: {result.enqueued} enqueued, {result.processed} processed, {result.lost} lost, "
            f"{result.duplicates} processed twice (done by the killed worker, ack lost with it), "
            f"in {result.seconds:.1f}s"
        )
        out("every message accounted for" if result.ok else "MESSAGES LOST")
        q.destroy()
        q.client.delete(AUDIT_KEY)
        return result


def _stop_all(procs: list[subprocess.Popen[bytes]]) -> list[int | None]:
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    codes: list[int | None] = []
    for p in procs:
        try:
            codes.append(p.wait(timeout=40))
        except subprocess.TimeoutExpired:
            p.kill()
            codes.append(p.wait())
    return codes
