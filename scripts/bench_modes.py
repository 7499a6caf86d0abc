"""The cost of the script-free mode: the same operations in both modes, in one run.

Usage: .venv/bin/python scripts/bench_modes.py [--messages N]
Prints msg/s per mode and the script-free/scripted ratio (higher is better for the
script-free mode). Starts its own redis-server on a free port.
"""

from __future__ import annotations

import argparse
import time
from typing import Callable

import redis

from keyqueue import Queue
from keyqueue.server import RedisServer


def rate(n: int, fn: Callable[[], None]) -> float:
    t0 = time.perf_counter()
    fn()
    return n / (time.perf_counter() - t0)


def measure(r: redis.Redis, scripting: bool, n: int) -> dict[str, float]:
    r.flushall()
    q = Queue("bench", client=r, scripting=scripting)
    q.enqueue("warm")
    q.ack(q.claim())  # type: ignore[arg-type]
    out = {}
    out["enqueue (1 per call)"] = rate(n, lambda: [q.enqueue(b"x" * 32) for _ in range(n)] and None)

    def claim_ack_one() -> None:
        for _ in range(n):
            m = q.claim()
            assert m is not None and q.ack(m)

    out["claim + ack (1 per call)"] = rate(n, claim_ack_one)
    big = n * 10
    out["enqueue_many (1000 per call)"] = rate(
        big, lambda: [q.enqueue_many([b"x" * 32] * 1000) for _ in range(big // 1000)] and None)

    def claim_ack_many() -> None:
        while True:
            msgs = q.claim_many(100)
            if not msgs:
                return
            assert q.ack_many(msgs) == len(msgs)

    out["claim_many + ack_many (100 per call)"] = rate(big, claim_ack_many)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=5000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    with RedisServer() as server:
        r = redis.Redis(port=server.port)
        best: dict[bool, dict[str, float]] = {True: {}, False: {}}
        for _ in range(args.rounds):  # interleaved, best of each: the host's noise hits both
            for scripting in (True, False):
                for k, v in measure(r, scripting, args.messages).items():
                    best[scripting][k] = max(best[scripting].get(k, 0.0), v)
        print("| operation | scripted msg/s | script-free msg/s | script-free / scripted |")
        print("|---|---:|---:|---:|")
        for k in best[True]:
            a, b = best[True][k], best[False][k]
            print(f"| {k} | {a:,.0f} | {b:,.0f} | {b / a:.2f}x |")


if __name__ == "__main__":
    main()
