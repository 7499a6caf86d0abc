"""How long one call of the long operations holds Redis: purge of 100,000 waiting messages
and requeue of 100,000 in processing, each done in bounded script calls; the number of calls
and their median and longest server-side duration (SLOWLOG), on a throwaway redis-server of
its own.

    .venv/bin/python scripts/bench/long_operations.py [--quick] [--json]
"""

from __future__ import annotations

import statistics
import sys
from dataclasses import dataclass

import redis
from harness import MESSAGES, QUICK_MESSAGES, Options, bodies, one_table, prefill, script_call_durations


@dataclass
class BatchResult:
    operation: str
    messages: int
    calls: int
    median_ms: float
    max_ms: float


def long_operations(r: redis.Redis, n: int) -> list[BatchResult]:
    """How long one call of purge and requeue holds Redis, over n messages."""
    data = bodies(n)
    out = []
    for name, prepare in (
        ("purge waiting", lambda q: q.purge),
        ("requeue processing", lambda q: (q.claim_many(n), lambda: q.requeue(source="processing"))[1]),
    ):
        r.flushall()
        q = prefill(r, data)
        work = prepare(q)
        calls, times = script_call_durations(r, work)
        out.append(BatchResult(name, n, calls, statistics.median(times), times[-1]))
    return out


def main(argv: list[str] | None = None) -> int:
    args = Options(__doc__).parse(argv)
    one_table(
        args,
        lambda r: long_operations(r, QUICK_MESSAGES if args.quick else MESSAGES),
        "long_operations",
        ["long operation", "messages", "script calls", "median ms per call", "max ms per call"],
        "lrrrr",
        lambda b: [b.operation, f"{b.messages:,}", b.calls, f"{b.median_ms:.2f}", f"{b.max_ms:.2f}"],
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
