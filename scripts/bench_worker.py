"""Worker benchmark: how fast keyqueue workers drain a queue, and how soon an idle worker
starts on a new message.

1. Drain rate with a no-op handler, in 1 and 2 worker processes, beside the classic
   reliable-queue loop on raw redis-py in the same run (LMOVE queue -> processing, handle,
   LREM processing): ratio target >= 2.
2. Wake-up latency of an idle worker process, until its handler starts: from the moment
   ``enqueue`` returns (the message is in the queue) and, more strictly, from the moment
   ``enqueue`` is called (both processes read CLOCK_MONOTONIC, shared on Linux):
   targets 0.5 ms median, 2 ms p99.

It starts its own redis-server on a free loopback port. Run from the repository root:

    .venv/bin/python scripts/bench_worker.py [--messages N] [--quick] [--json]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import statistics
import sys
import time
from typing import Callable

import redis

from keyqueue import Message, Queue, Worker
from keyqueue.server import RedisServer

RAW_QUEUE, RAW_PROCESSING = "raw:queue", "raw:processing"
STARTS, CALLED, RETURNED = "bench:starts", "bench:called", "bench:returned"


def noop(message: Message) -> None:
    pass


def keyqueue_drain(url: str) -> None:
    Worker(Queue("bench", url=url), noop).run(burst=True)


def raw_drain(url: str) -> None:
    """The BLMOVE/LREM pattern, draining until the list is empty."""
    r = redis.Redis.from_url(url)
    while (body := r.lmove(RAW_QUEUE, RAW_PROCESSING, "RIGHT", "LEFT")) is not None:
        r.lrem(RAW_PROCESSING, 1, body)


def _process(target: Callable[[str], None], url: str, ready, go, finished) -> None:  # type: ignore[no-untyped-def]
    ready.release()
    go.wait()
    target(url)
    finished.put(time.monotonic())


def drain_rate(url: str, target: Callable[[str], None], processes: int, n: int) -> float:
    """Messages per second for `processes` processes draining n pre-filled messages."""
    ctx = mp.get_context("spawn")
    ready, go, finished = ctx.Semaphore(0), ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_process, args=(target, url, ready, go, finished)) for _ in range(processes)]
    for p in procs:
        p.start()
    for _ in procs:
        ready.acquire()
    time.sleep(0.2)  # imports done, connections idle
    start = time.monotonic()
    go.set()
    ends = [finished.get(timeout=600) for _ in procs]
    for p in procs:
        p.join()
    return n / (max(ends) - start)


def fill(r: redis.Redis, n: int) -> None:
    r.flushall()
    q = Queue("bench", client=r)
    body = b"x" * 100
    for i in range(0, n, 1000):
        q.enqueue_many([body] * min(1000, n - i))
        r.lpush(RAW_QUEUE, *([body] * min(1000, n - i)))


def record_start(message: Message) -> None:
    started = time.monotonic()
    assert message.queue is not None
    message.queue.client.hset(STARTS, message.id, repr(started))


def latency_worker(url: str) -> None:
    Worker(Queue("lat", url=url), record_start).run()


def wake_latency(url: str, samples: int) -> tuple[list[float], list[float]]:
    """Sorted latencies in ms (from enqueue's return, from enqueue's call)."""
    r = redis.Redis.from_url(url)
    q = Queue("lat", client=r)
    ctx = mp.get_context("spawn")
    p = ctx.Process(target=latency_worker, args=(url,), daemon=True)
    p.start()
    q.enqueue("warm-up")  # wait until the worker handles one
    while r.hlen(STARTS) < 1:
        time.sleep(0.01)
    r.delete(STARTS)
    called, returned = {}, {}
    for _ in range(samples):
        time.sleep(0.02)  # the worker is idle, blocked in its long-poll
        t0 = time.monotonic()
        mid = q.enqueue(b"")
        returned[mid], called[mid] = time.monotonic(), t0
    while r.hlen(STARTS) < samples:
        time.sleep(0.01)
    p.terminate()
    p.join()
    starts = {k.decode(): float(v) for k, v in r.hgetall(STARTS).items()}
    from_return = sorted((starts[m] - returned[m]) * 1000 for m in returned)
    from_call = sorted((starts[m] - called[m]) * 1000 for m in called)
    return from_return, from_call


def summary(lat: list[float]) -> dict[str, float]:
    p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))]
    return {"median_ms": round(statistics.median(lat), 3), "p99_ms": round(p99, 3),
            "max_ms": round(lat[-1], 3)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=60_000)
    ap.add_argument("--samples", type=int, default=300)
    ap.add_argument("--quick", action="store_true", help="small counts, a smoke test")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    n, samples = (3000, 50) if args.quick else (args.messages, args.samples)
    rows, ok = [], True
    with RedisServer() as server:
        r = redis.Redis(port=server.port)
        for processes in (1, 2):
            kq_best = raw_best = 0.0
            for _ in range(2):  # alternate, keep each side's best
                fill(r, n)
                kq_best = max(kq_best, drain_rate(server.url, keyqueue_drain, processes, n))
                raw_best = max(raw_best, drain_rate(server.url, raw_drain, processes, n))
            ratio = kq_best / raw_best
            ok &= ratio >= 2
            rows.append({"processes": processes, "messages": n, "keyqueue_msgs_per_s": round(kq_best),
                         "blmove_lrem_msgs_per_s": round(raw_best), "ratio": round(ratio, 2)})
            print(f"  drained with {processes} process(es)", file=sys.stderr)
        from_return, from_call = wake_latency(server.url, samples)
    latency = {name: summary(lat) for name, lat in (("from_return", from_return), ("from_call", from_call))}
    ok &= latency["from_return"]["median_ms"] <= 0.5 and latency["from_return"]["p99_ms"] <= 2.0
    if args.json:
        print(json.dumps({"drain": rows, "latency": latency}, indent=2))
    else:
        print("| worker processes | messages | keyqueue msg/s | BLMOVE/LREM loop msg/s | ratio (target >= 2) |")
        print("|---:|---:|---:|---:|---:|")
        for row in rows:
            print(f"| {row['processes']} | {row['messages']:,} | {row['keyqueue_msgs_per_s']:,} | "
                  f"{row['blmove_lrem_msgs_per_s']:,} | {row['ratio']:.2f} |")
        print()
        print(f"| idle worker, until the handler starts ({samples} samples) | median ms (target 0.5) "
              "| p99 ms (target 2) | max ms |")
        print("|---|---:|---:|---:|")
        for name, label in (("from_return", "from enqueue's return"), ("from_call", "from enqueue's call")):
            x = latency[name]
            print(f"| {label} | {x['median_ms']:.3f} | {x['p99_ms']:.3f} | {x['max_ms']:.3f} |")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
