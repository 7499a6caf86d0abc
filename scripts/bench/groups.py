"""Message groups: what they cost a delivery, and what they cost ungrouped messages.

One process claims and acks N pre-filled messages one at a time (``claim()`` then ``ack()``)
in three set-ups, interleaved rounds on a freshly flushed server each:

- ungrouped: plain messages on a queue without groups (the baseline);
- ungrouped beside groups: the same, on a queue that also holds G groups with held
  messages the run never touches (target: Redis CPU per message within 1.05x of the
  baseline: the group bookkeeping must not tax ungrouped messages);
- grouped: N messages spread over G groups (group_concurrency 1), each ack releasing its
  group's next (the price of order, shown, no target).

Redis CPU is redis-server's used_cpu_user + used_cpu_sys over the run (INFO cpu), per message.

Run from the repository root (--quick: seconds, a smoke test):

    .venv/bin/python scripts/bench/groups.py [--quick] [--json] [--rounds R] [--messages N] [--groups G]

The exit status is 1 when the target is missed.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from typing import Any

import redis
from harness import (
    Options,
    Spread,
    about,
    about_line,
    bodies,
    exit_status,
    interleaved,
    markdown_table,
    new_queue,
    throwaway_redis,
    verdict,
)

MAX_CPU_RATIO = 1.05
#: Held messages per group in the "beside groups" set-up.
HELD_EACH = 3


def redis_cpu(r: redis.Redis) -> float:
    info = r.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def claim_ack(r: redis.Redis, n: int, groups: int, setup: str) -> tuple[float, float]:
    """(msg/s, Redis us per message) of claim() + ack() one at a time, on a flushed server."""
    r.flushall()
    q = new_queue(r)
    q._core.claim_reaping = False  # (nothing to reap: the same work on every side)
    data = bodies(n)
    if setup == "grouped":
        for g in range(groups):
            q.enqueue_many(data[g::groups], group=f"g{g}")
    else:
        for i in range(0, n, 1000):
            q.enqueue_many(data[i : i + 1000])
        if setup == "beside":
            for g in range(groups):  # a group's first is released: claimed and kept in flight
                q.enqueue_many(bodies(HELD_EACH + 1), group=f"g{g}")
            kept = q.claim_many(n + groups)
            q.ack_many([m for m in kept if m.group is None])
            q.enqueue_many(data)  # (the plain ones taken above, again)
    cpu = redis_cpu(r)
    start = time.perf_counter()
    for _ in range(n):
        m = q.claim()
        assert m is not None
        q.ack(m)
    seconds = time.perf_counter() - start
    return n / seconds, (redis_cpu(r) - cpu) * 1e6 / n


def main(argv: list[str] | None = None) -> int:
    opts = Options(__doc__, rounds=5)
    opts.add_argument("--messages", type=int, help="messages per side (default 20,000; --quick 500)")
    opts.add_argument("--groups", type=int, help="groups (default 1,000; --quick 20)")
    args = opts.parse(argv)
    n = args.messages or (500 if args.quick else 20_000)
    groups = args.groups or (20 if args.quick else 1000)
    with throwaway_redis() as (_, r):
        line, info = about_line(r), about(r)
        runs = interleaved(
            {setup: (lambda s=setup: claim_ack(r, n, groups, s)) for setup in ("ungrouped", "beside", "grouped")},
            args.rounds,
        )
    rates = {k: statistics.median(x for x, _ in v) for k, v in runs.items()}
    cpu = {k: Spread.of(us for _, us in v) for k, v in runs.items()}
    beside = Spread.of(b[1] / u[1] for b, u in zip(runs["beside"], runs["ungrouped"]))
    grouped = Spread.of(g[1] / u[1] for g, u in zip(runs["grouped"], runs["ungrouped"]))
    passed = beside.median <= MAX_CPU_RATIO
    result: dict[str, Any] = {
        **info,
        "messages": n,
        "groups": groups,
        "rounds": args.rounds,
        "msgs_per_s": {k: round(v) for k, v in rates.items()},
        "redis_us_per_message": {k: v.rounded(2) for k, v in cpu.items()},
        "beside_over_ungrouped": beside.rounded(3),
        "grouped_over_ungrouped": grouped.rounded(3),
        "target": f"beside / ungrouped <= {MAX_CPU_RATIO}",
        "passed": passed,
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(line + f"; {n:,} messages, {groups:,} groups, {args.rounds} rounds\n")
        names = {
            "ungrouped": "ungrouped",
            "beside": f"ungrouped beside {groups:,} groups",
            "grouped": f"grouped over {groups:,} groups",
        }
        ratio = {"ungrouped": "1", "beside": beside.text(".3f"), "grouped": grouped.text(".3f")}
        check = {"ungrouped": "", "beside": f"<= {MAX_CPU_RATIO} {verdict(passed)}", "grouped": ""}
        print(
            "\n".join(
                markdown_table(
                    ["claim + ack", "msg/s (median)", "Redis us per message", "vs ungrouped", "target"],
                    "lrrrl",
                    [
                        [names[k], f"{rates[k]:,.0f}", cpu[k].text(".1f"), ratio[k], check[k]]
                        for k in ("ungrouped", "beside", "grouped")
                    ],
                )
            )
        )
    return exit_status(args, passed)


if __name__ == "__main__":
    sys.exit(main())
