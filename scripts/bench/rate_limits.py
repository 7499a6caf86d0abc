"""Rate limits: what a limit costs when it never binds, and how close a binding one gets.

1. Overhead: one process claims and acks N pre-filled messages one at a time (``claim()``
   then ``ack()``) on a queue with ``rate_limit`` and ``max_in_flight`` set so high that they
   never bind, vs the same on a queue without limits (target: >= 0.95x, per round).
   Interleaved rounds (unlimited, limited, unlimited, ...), a freshly flushed server each.
2. Accuracy: P processes (default 8) claim (``claim_many(100, wait=1)``) and ack as fast as
   they can for D seconds (default 30) on a queue with ``rate_limit="R/1"`` (default 1000/1)
   and enough messages never to run dry. Each claim's server time (its deadline minus the
   visibility timeout) puts it in its window; achieved / configured is the mean count of the
   complete windows (the first and last are cut off) over R (target: 0.97-1.00, and no
   window over R).

Run from the repository root (--quick: seconds, a smoke test):

    .venv/bin/python scripts/bench/rate_limits.py [--quick] [--json] [--rounds R] [--mode scripted|commands]
        [--messages N] [--processes P] [--seconds D] [--rate R]

The exit status is 1 when a target is missed.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections import Counter
from typing import Any

import redis
from harness import (
    QUEUE_NAME,
    Options,
    Spread,
    about,
    about_line,
    bodies,
    exit_status,
    interleaved,
    markdown_table,
    prefill,
    spawned,
    throwaway_redis,
    verdict,
)

from keyqueue import Queue

#: Limits that never bind: far above any rate one process reaches.
NEVER = {"rate_limit": "1000000000/1", "max_in_flight": 1_000_000_000}
VISIBILITY = 60.0
MIN_OVERHEAD_RATIO = 0.95
ACCURACY = (0.97, 1.00)


def claim_ack_rate(r: redis.Redis, n: int, scripting: bool, limits: dict[str, Any]) -> float:
    """Messages per second of claim() + ack() one at a time, on a flushed server."""
    r.flushall()
    q = prefill(r, bodies(n), scripting=scripting, **limits)
    q._core.claim_reaping = False  # (nothing to reap: the same work on both sides)
    start = time.perf_counter()
    for _ in range(n):
        m = q.claim()
        assert m is not None
        q.ack(m)
    return n / (time.perf_counter() - start)


def claimer(port: int, scripting: bool, seconds: float, ready: Any, go: Any, finished: Any) -> None:
    """One process of the accuracy run: claim and ack for ``seconds``; its claims per window
    start (server ms), reported as {window start ms: count}."""
    r = redis.Redis(port=port)
    q = Queue(QUEUE_NAME, client=r, scripting=scripting)
    q.length()
    ready.release()
    go.wait()
    end = time.monotonic() + seconds
    claims: Counter[int] = Counter()
    while time.monotonic() < end:
        got = q.claim_many(100, wait=min(1.0, max(end - time.monotonic(), 0.01)))
        for m in got:
            assert m.deadline is not None
            claims[round((m.deadline - VISIBILITY) * 1000)] += 1
        if got:
            q.ack_many(got)
    finished.put(dict(claims))
    r.close()


def accuracy(r: redis.Redis, port: int, scripting: bool, processes: int, seconds: float, rate: int) -> dict[str, Any]:
    r.flushall()
    n = int(rate * (seconds + 5) * 1.2)
    prefill(r, bodies(n), scripting=scripting, rate_limit=f"{rate}/1", visibility_timeout=VISIBILITY)
    run = spawned(claimer, (port, scripting, seconds), processes)
    run.go.set()
    windows: Counter[int] = Counter()
    for claims in run.results(timeout=seconds + 120):
        for ms, count in claims.items():
            windows[ms // 1000] += count
    complete = sorted(windows)[1:-1]
    counts = [windows[w] for w in complete]
    achieved = statistics.mean(counts) / rate if counts else 0.0
    return {
        "processes": processes,
        "seconds": seconds,
        "rate_limit": f"{rate}/1",
        "complete_windows": len(counts),
        "achieved_over_configured": round(achieved, 4),
        "busiest_window": max(windows.values(), default=0),
        "claims": sum(windows.values()),
    }


def main(argv: list[str] | None = None) -> int:
    opts = Options(__doc__, rounds=5)
    opts.add_argument("--mode", choices=["scripted", "commands"], default="scripted")
    opts.add_argument("--messages", type=int, help="messages per overhead side (default 20,000; --quick 500)")
    opts.add_argument("--processes", type=int, help="accuracy run processes (default 8; --quick 2)")
    opts.add_argument("--seconds", type=float, help="accuracy run length (default 30; --quick 3)")
    opts.add_argument("--rate", type=int, help="accuracy run limit per second (default 1000; --quick 100)")
    args = opts.parse(argv)
    n = args.messages or (500 if args.quick else 20_000)
    processes = args.processes or (2 if args.quick else 8)
    seconds = args.seconds or (3.0 if args.quick else 30.0)
    rate = args.rate or (100 if args.quick else 1000)
    scripting = args.mode == "scripted"
    with throwaway_redis() as (server, r):
        line, info = about_line(r), about(r)
        runs = interleaved(
            {
                "unlimited": lambda: claim_ack_rate(r, n, scripting, {}),
                "limited": lambda: claim_ack_rate(r, n, scripting, NEVER),
            },
            args.rounds,
            "claim+ack",
        )
        acc = accuracy(r, server.port, scripting, processes, seconds, rate)
    ratios = Spread.of(k / b for k, b in zip(runs["limited"], runs["unlimited"]))
    overhead_ok = ratios.median >= MIN_OVERHEAD_RATIO
    low, high = ACCURACY
    accuracy_ok = low <= acc["achieved_over_configured"] <= high and acc["busiest_window"] <= rate
    result = {
        **info,
        "mode": args.mode,
        "overhead": {
            "messages": n,
            "rounds": args.rounds,
            "unlimited_msgs_per_s": round(statistics.median(runs["unlimited"])),
            "limited_msgs_per_s": round(statistics.median(runs["limited"])),
            "ratio": ratios.rounded(3),
            "target": f">= {MIN_OVERHEAD_RATIO}",
            "passed": overhead_ok,
        },
        "accuracy": {**acc, "target": f"{low}-{high}", "passed": accuracy_ok},
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(line + f"; mode {args.mode}\n")
        print(
            "\n".join(
                markdown_table(
                    ["measurement", "figure", "target", "result"],
                    "lrll",
                    [
                        [
                            f"claim+ack, limits that never bind / none ({n:,} messages, {args.rounds} rounds)",
                            f"{ratios.text('.3f')} (min / median / max)",
                            f">= {MIN_OVERHEAD_RATIO}",
                            verdict(overhead_ok),
                        ],
                        [
                            f"{processes} processes at {rate}/1 for {seconds:g} s: achieved / configured "
                            f"({acc['complete_windows']} complete windows, busiest {acc['busiest_window']})",
                            f"{acc['achieved_over_configured']:.3f}",
                            f"{low}-{high}",
                            verdict(accuracy_ok),
                        ],
                    ],
                )
            )
        )
    return exit_status(args, overhead_ok and accuracy_ok)


if __name__ == "__main__":
    sys.exit(main())
