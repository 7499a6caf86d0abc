"""Worker benchmark: how fast keyqueue workers drain a queue, and how soon an idle worker
starts on a new message, each against a raw baseline measured in the same run.

1. Drain rate, 1 and 2 worker processes, default ``Worker`` settings, with a handler that
   does one Redis round trip of its own (INCR), against two raw loops doing the same handler
   work: a Redis Streams consumer (XREADGROUP COUNT 100, the handler per entry, one XACK of
   the batch) and the classic reliable-list loop (LMOVE queue -> processing, handler, LREM).
   Interleaved rounds (Streams, keyqueue, LMOVE, ...), per-round ratios min / median / max;
   every run is checked to have handled each message once. Targets: >= 1.0x the Streams
   consumer, >= 2x the LMOVE loop.
2. Wake-up latency of an idle worker process until its handler starts: from the moment
   ``enqueue`` returns (the message is in the queue) and from the moment ``enqueue`` is
   called (both processes read CLOCK_MONOTONIC, shared on Linux). The producer waits for
   each message to be handled, then pauses 1-5 ms, so the worker is idle in its long-poll
   every time. The same is measured for a raw LPUSH -> BLPOP consumer, the machine's floor.
   Targets: from the call, 0.5 ms median, 2 ms p99.

It starts its own redis-server on a free loopback port. Run from the repository root:

    .venv/bin/python scripts/bench/worker.py [--messages N] [--rounds R] [--samples S] [--quick] [--json]
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import random
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable

import redis
from harness import (
    BODY,
    QUEUE_NAME,
    RAW_PROCESSING,
    RAW_QUEUE,
    Options,
    Spread,
    exit_status,
    interleaved,
    markdown_table,
    ratios,
    server_cpu,
    spawned,
    throwaway_redis,
)

from keyqueue import Message, Queue, Worker

STREAM, GROUP = "raw:stream", "g"
HANDLED = "bench:handled"
STARTS = "bench:starts"

_handler_client: redis.Redis | None = None


def handle() -> None:
    """The handler's own work: one Redis round trip (the same on every side)."""
    global _handler_client
    if _handler_client is None:
        _handler_client = redis.Redis.from_url(os.environ["BENCH_URL"])
    _handler_client.incr(HANDLED)


# -- the three ways to drain -----------------------------------------------------------


def keyqueue_drain(url: str) -> None:
    Worker(Queue(QUEUE_NAME, url=url), lambda m: handle()).run(burst=True)


def streams_drain(url: str) -> None:
    r = redis.Redis.from_url(url)
    consumer = f"c{os.getpid()}"
    while got := r.xreadgroup(GROUP, consumer, {STREAM: ">"}, count=100):
        ids = []
        for _, entries in got:
            for entry_id, _fields in entries:
                handle()
                ids.append(entry_id)
        r.xack(STREAM, GROUP, *ids)


def lmove_drain(url: str) -> None:
    r = redis.Redis.from_url(url)
    while (body := r.lmove(RAW_QUEUE, RAW_PROCESSING, "RIGHT", "LEFT")) is not None:
        handle()
        r.lrem(RAW_PROCESSING, 1, body)


def fill(r: redis.Redis, side: str, n: int) -> None:
    """Only this side's data, on a flushed server."""
    r.flushall()
    for i in range(0, n, 1000):
        k = min(1000, n - i)
        if side == "keyqueue":
            Queue(QUEUE_NAME, client=r).enqueue_many([BODY] * k)
        elif side == "streams":
            pipe = r.pipeline(transaction=False)
            for _ in range(k):
                pipe.xadd(STREAM, {"b": BODY})
            pipe.execute()
        else:
            r.lpush(RAW_QUEUE, *([BODY] * k))
    if side == "streams":
        r.xgroup_create(STREAM, GROUP, id="0")


def drained(r: redis.Redis, side: str, n: int) -> None:
    """Every message handled once and none left: a broken side cannot look fast."""
    handled = int(r.get(HANDLED) or 0)
    if side == "keyqueue":
        s = Queue(QUEUE_NAME, client=r).stats()
        left = s.waiting + s.processing
    elif side == "streams":
        left = r.xpending(STREAM, GROUP)["pending"]
    else:
        left = r.llen(RAW_QUEUE) + r.llen(RAW_PROCESSING)
    if handled != n or left:
        raise RuntimeError(f"{side}: handled {handled} of {n}, {left} left")


SIDES: dict[str, Callable[[str], None]] = {"streams": streams_drain, "keyqueue": keyqueue_drain, "lmove": lmove_drain}
PER_MESSAGE = ("wall", "client_cpu", "redis_cpu")


def _process(side: str, url: str, ready: Any, go: Any, finished: Any) -> None:
    os.environ["BENCH_URL"] = url
    handle()  # the handler's connection is made before the clock starts
    ready.release()
    go.wait()
    cpu = time.process_time()
    SIDES[side](url)
    finished.put((time.monotonic(), time.process_time() - cpu))


@dataclass(frozen=True)
class Drain:
    """One drain: its rate, and per message the CPU its processes spent (every thread, the
    handler's INCR included) and redis-server's own CPU."""

    rate: float
    client_us: float
    redis_us: float


def drain_rate(r: redis.Redis, url: str, side: str, processes: int, n: int) -> Drain:
    """``processes`` processes draining n pre-filled messages."""
    fill(r, side, n)
    started = spawned(_process, (side, url), processes)
    r.delete(HANDLED)  # the warm-up INCRs
    redis_before = server_cpu(r)
    start = time.monotonic()
    started.go.set()
    ends = started.results(600)
    redis_cpu = server_cpu(r) - redis_before
    drained(r, side, n)
    return Drain(n / (max(end for end, _ in ends) - start), sum(c for _, c in ends) / n * 1e6, redis_cpu / n * 1e6)


def drain_rows(r: redis.Redis, url: str, n: int, rounds: int) -> list[dict[str, Any]]:
    rows = []
    for processes in (1, 2):
        # Streams, keyqueue, LMOVE: neighbours in time (reversed every other round)
        runs = interleaved({side: (lambda s=side: drain_rate(r, url, s, processes, n)) for side in SIDES}, rounds)
        rates = {side: [d.rate for d in v] for side, v in runs.items()}
        rows.append(
            {
                "processes": processes,
                "messages": n,
                **{f"{side}_msgs_per_s": round(statistics.median(v)) for side, v in rates.items()},
                "vs_streams": Spread.of(ratios(rates["keyqueue"], rates["streams"])).rounded(),
                "vs_lmove": Spread.of(ratios(rates["keyqueue"], rates["lmove"])).rounded(),
                # per message, medians: the wall time of the drain, the CPU of its processes, redis-server's CPU
                "per_message_us": {
                    side: {
                        "wall": round(statistics.median(1e6 / d.rate for d in v), 2),
                        "client_cpu": round(statistics.median(d.client_us for d in v), 2),
                        "redis_cpu": round(statistics.median(d.redis_us for d in v), 2),
                    }
                    for side, v in runs.items()
                },
            }
        )
        print(f"  drained with {processes} process(es)", file=sys.stderr)
    return rows


# -- wake-up latency -----------------------------------------------------------------------


def record_start(message: Message) -> None:
    started = time.monotonic()
    assert message.queue is not None
    message.queue.client.hset(STARTS, message.id, repr(started))


def latency_worker(url: str) -> None:
    Worker(Queue("lat", url=url), record_start).run()


def raw_latency_worker(url: str) -> None:
    """The floor: a consumer blocked in BLPOP, recording when it got each message."""
    r = redis.Redis.from_url(url)
    while True:
        _, mid = r.blpop(["raw:lat"])
        started = time.monotonic()
        r.hset(STARTS, mid, repr(started))


def wake_latency(url: str, samples: int, raw: bool) -> tuple[list[float], list[float]]:
    """Sorted latencies in ms (from enqueue's return, from its call), each message handled
    before the next is sent, after a 1-5 ms pause: the worker is idle every time."""
    r = redis.Redis.from_url(url)
    r.delete(STARTS)
    q = Queue("lat", client=r)
    ctx = mp.get_context("spawn")
    p = ctx.Process(target=raw_latency_worker if raw else latency_worker, args=(url,), daemon=True)
    p.start()
    counter = iter(range(10**9))

    def send() -> str:
        if raw:
            mid = str(next(counter))
            r.lpush("raw:lat", mid)
            return mid
        return q.enqueue(b"")

    send()  # warm-up: wait until the consumer handled one
    while r.hlen(STARTS) < 1:
        time.sleep(0.001)
    r.delete(STARTS)
    called, returned = {}, {}
    rng = random.Random(7)
    for _ in range(samples):
        time.sleep(rng.uniform(0.001, 0.005))  # idle: blocked in its long-poll
        t0 = time.monotonic()
        mid = send()
        returned[mid], called[mid] = time.monotonic(), t0
        while not r.hexists(STARTS, mid):
            pass  # a tight poll: the next message goes out as soon as this one started
    p.terminate()
    p.join()
    starts = {k.decode(): float(v) for k, v in r.hgetall(STARTS).items()}
    from_return = sorted((starts[m] - returned[m]) * 1000 for m in returned)
    from_call = sorted((starts[m] - called[m]) * 1000 for m in called)
    return from_return, from_call


def summary(lat: list[float]) -> dict[str, float]:
    p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))]
    return {"median_ms": round(statistics.median(lat), 3), "p99_ms": round(p99, 3), "max_ms": round(lat[-1], 3)}


def main(argv: list[str] | None = None) -> int:
    ap = Options(__doc__, rounds=3)
    ap.add_argument("--messages", type=int, default=60_000)
    ap.add_argument("--samples", type=int, default=1000)
    args = ap.parse(argv)
    n, samples = (500, 20) if args.quick else (args.messages, args.samples)
    with throwaway_redis() as (server, r):
        rows = drain_rows(r, server.url, n, args.rounds)
        latency = {}
        for raw in (False, True):
            from_return, from_call = wake_latency(server.url, samples, raw)
            who = "raw" if raw else "keyqueue"
            latency[f"{who}_from_return"], latency[f"{who}_from_call"] = summary(from_return), summary(from_call)
    ok = all(row["vs_streams"]["median"] >= 1.0 and row["vs_lmove"]["median"] >= 2 for row in rows)
    ok &= latency["keyqueue_from_call"]["median_ms"] <= 0.5 and latency["keyqueue_from_call"]["p99_ms"] <= 2.0
    if args.json:
        print(json.dumps({"drain": rows, "latency": latency}, indent=2))
        return exit_status(args, ok)
    spread = "{min:.2f} / {median:.2f} / {max:.2f}".format_map
    print(
        "\n".join(
            markdown_table(
                [
                    "worker processes",
                    "messages",
                    "keyqueue msg/s",
                    "Streams consumer msg/s",
                    "LMOVE loop msg/s",
                    "vs Streams min / median / max (target >= 1)",
                    "vs LMOVE (target >= 2)",
                ],
                "rrrrrrr",
                (
                    [
                        row["processes"],
                        f"{row['messages']:,}",
                        f"{row['keyqueue_msgs_per_s']:,}",
                        f"{row['streams_msgs_per_s']:,}",
                        f"{row['lmove_msgs_per_s']:,}",
                        spread(row["vs_streams"]),
                        spread(row["vs_lmove"]),
                    ]
                    for row in rows
                ),
            )
        )
    )
    print()
    print(
        "\n".join(
            markdown_table(
                [
                    "per message, µs (medians)",
                    "worker processes",
                    "wall time of the drain",
                    "CPU of the processes",
                    "redis-server CPU",
                ],
                "lrrrr",
                (
                    [side, row["processes"], *(f"{row['per_message_us'][side][k]:.2f}" for k in PER_MESSAGE)]
                    for row in rows
                    for side in SIDES
                ),
            )
        )
    )
    print()
    print(
        "\n".join(
            markdown_table(
                [f"idle consumer, until its handler starts ({samples} samples)", "median ms", "p99 ms", "max ms"],
                "lrrr",
                (
                    [label, *(f"{latency[key][k]:.3f}" for k in ("median_ms", "p99_ms", "max_ms"))]
                    for key, label in (
                        ("keyqueue_from_call", "keyqueue worker, from enqueue's call (target 0.5 / 2)"),
                        ("keyqueue_from_return", "keyqueue worker, from enqueue's return"),
                        ("raw_from_call", "raw BLPOP consumer, from LPUSH's call (the floor)"),
                        ("raw_from_return", "raw BLPOP consumer, from LPUSH's return"),
                    )
                ),
            )
        )
    )
    return exit_status(args, ok)


if __name__ == "__main__":
    sys.exit(main())
