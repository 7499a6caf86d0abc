"""How long reaping expired deliveries takes: one ``Queue.reap()`` of 100,000 deliveries whose
visibility timeout has passed, its wall time, its Redis time, how many script calls it takes
and the longest of them (SLOWLOG), 3 runs, on a throwaway redis-server of its own.
Target: the whole reap within 1 s, no script call over 10 ms.

    .venv/bin/python scripts/bench/reaping.py [--quick] [--json]

The exit status is 1 when a target is missed.
"""

from __future__ import annotations

import statistics
import sys
import time
from dataclasses import dataclass
from typing import Any

import redis
from harness import (
    MESSAGES,
    QUICK_MESSAGES,
    Options,
    bodies,
    exit_status,
    expect,
    one_table,
    prefill,
    script_call_durations,
    verdict,
)


@dataclass
class ReapRun:
    messages: int
    seconds: float
    redis_seconds: float
    calls: int
    median_call_ms: float
    max_call_ms: float

    @property
    def passed(self) -> bool:
        return self.seconds <= 1.0 and self.max_call_ms <= 10.0


def reap_expired(r: redis.Redis, n: int, runs: int = 3) -> list[ReapRun]:
    """Time one ``Queue.reap()`` of ``n`` deliveries whose visibility timeout has passed."""
    out = []
    for _ in range(runs):
        r.flushall()
        q = prefill(r, bodies(n))
        q._core.claim_reaping = False  # the claims below take longer than the timeout
        claimed = 0
        while got := q.claim_many(1000, visibility_timeout=1):
            claimed += len(got)
        expect(claimed, n, "claim before the reap")
        due = time.monotonic() + 1.1
        while time.monotonic() < due:
            time.sleep(due - time.monotonic())
        result: list[Any] = []
        spans: list[float] = []

        def reap() -> None:  # timed alone: not the SLOWLOG set-up and reading around it
            start = time.perf_counter()
            result.append(q.reap())
            spans.append(time.perf_counter() - start)

        # SLOWLOG only from 1 ms: logging every command (the ones inside the scripts too)
        # would slow the reap itself down by a third
        calls, times = script_call_durations(r, reap, slower_than_us=1000)
        expect(result[0].requeued, n, "reap")
        usec = r.info("commandstats")["cmdstat_evalsha"]["usec"] / 1e6
        out.append(
            ReapRun(n, spans[0], usec, calls, statistics.median(times) if times else 0.0, max(times, default=0.0))
        )
    return out


def main(argv: list[str] | None = None) -> int:
    args = Options(__doc__).parse(argv)
    reaps = one_table(
        args,
        lambda r: reap_expired(r, *((QUICK_MESSAGES, 1) if args.quick else (MESSAGES, 3))),
        "reaps",
        [
            "reaping expired deliveries",
            "seconds",
            "Redis seconds",
            "script calls",
            "median ms per call",
            "max ms per call",
            "target",
            "result",
        ],
        "lrrrrrll",
        lambda x: [
            f"{x.messages:,}",
            f"{x.seconds:.3f}",
            f"{x.redis_seconds:.3f}",
            x.calls,
            f"{x.median_call_ms:.2f}",
            f"{x.max_call_ms:.2f}",
            "<= 1 s, no call > 10 ms",
            verdict(x.passed),
        ],
    )
    return exit_status(args, all(x.passed for x in reaps))


if __name__ == "__main__":
    sys.exit(main())
