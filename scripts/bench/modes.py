"""The cost of the script-free mode: the same operations in both modes, in one run.

Prints msg/s per mode, each the best of interleaved rounds (``--rounds``, default 3: the
host's noise hits both modes), and the script-free/scripted ratio (higher is better for the
script-free mode). Starts its own redis-server on a free port.

    .venv/bin/python scripts/bench/modes.py [--quick] [--messages N] [--rounds R]
"""

from __future__ import annotations

import sys
from typing import Callable

import redis
from harness import QUEUE_NAME, Options, interleaved, markdown_table, throwaway_redis, timed

from keyqueue import Queue


def rate(n: int, work: Callable[[], object]) -> float:
    return n / timed(work)


def measure(r: redis.Redis, scripting: bool, n: int) -> dict[str, float]:
    r.flushall()
    q = Queue(QUEUE_NAME, client=r, scripting=scripting)
    q.enqueue("warm")
    q.ack(q.claim())  # type: ignore[arg-type]
    out = {}
    out["enqueue (1 per call)"] = rate(n, lambda: [q.enqueue(b"x" * 32) for _ in range(n)])

    def claim_ack_one() -> None:
        for _ in range(n):
            m = q.claim()
            assert m is not None and q.ack(m)

    out["claim + ack (1 per call)"] = rate(n, claim_ack_one)
    big = n * 10
    out["enqueue_many (1000 per call)"] = rate(
        big, lambda: [q.enqueue_many([b"x" * 32] * 1000) for _ in range(big // 1000)]
    )

    def claim_ack_many() -> None:
        while msgs := q.claim_many(100):
            assert q.ack_many(msgs) == len(msgs)

    out["claim_many + ack_many (100 per call)"] = rate(big, claim_ack_many)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = Options(__doc__, rounds=3, min_rounds=1, json=False)
    ap.add_argument("--messages", type=int, default=5000)
    args = ap.parse(argv)
    n = 100 if args.quick else args.messages
    with throwaway_redis() as (_, r):
        runs = interleaved(
            {"scripted": lambda: measure(r, True, n), "script-free": lambda: measure(r, False, n)}, args.rounds
        )
    best = {mode: {op: max(run[op] for run in rounds) for op in rounds[0]} for mode, rounds in runs.items()}
    print(
        "\n".join(
            markdown_table(
                ["operation", "scripted msg/s", "script-free msg/s", "script-free / scripted"],
                "lrrr",
                (
                    [op, f"{a:,.0f}", f"{best['script-free'][op]:,.0f}", f"{best['script-free'][op] / a:.2f}x"]
                    for op, a in best["scripted"].items()
                ),
            )
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
