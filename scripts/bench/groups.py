"""Message groups: what order per key costs, against the same messages without groups.

Interleaved rounds, each side on a freshly flushed server, one process:

- enqueue, one at a time (grouped: round robin over G groups) and ``enqueue_many`` of 100
  (grouped: one group a call), against the same ungrouped (target: grouped >= 0.85x);
- claim + ack over G groups (group_concurrency 1, each ack releasing its group's next)
  against the same messages ungrouped: one at a time (``claim()``, ``ack()``) and as the
  worker does (``claim_many(100)``, ``ack_many``; target: >= 0.8x);
- ungrouped messages on a queue that also holds G groups with held messages the run never
  touches, against a queue without groups: Redis CPU per message (target: within 1.05x, the
  group bookkeeping does not tax ungrouped messages);
- one group alone, claim + ack one at a time: the rate of one ordered stream, shown beside
  SQS FIFO's quota of 300 transactions per second per API action (3,000 messages with
  batches of 10) for context.

Redis CPU is redis-server's used_cpu_user + used_cpu_sys over the run (INFO cpu), per message.

Run from the repository root (--quick: seconds, a smoke test):

    .venv/bin/python scripts/bench/groups.py [--quick] [--json] [--rounds R] [--messages N] [--groups G]

The exit status is 1 when a target is missed.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from typing import Any, Callable

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
    server_cpu,
    throwaway_redis,
    verdict,
)

from keyqueue import Queue

#: Held messages per group in the "beside groups" set-up.
HELD_EACH = 3
BATCH = 100
#: (grouped side, its ungrouped baseline, what is compared, the least ratio or the most)
COMPARISONS = [
    ("enqueue1:grouped", "enqueue1:ungrouped", "rate", 0.85),
    ("enqueue100:grouped", "enqueue100:ungrouped", "rate", 0.85),
    ("claim1:grouped", "claim1:ungrouped", "rate", 0.8),
    ("claim100:grouped", "claim100:ungrouped", "rate", 0.8),
    ("beside", "claim1:ungrouped", "cpu", 1.05),
]


def measured(r: redis.Redis, n: int, work: Callable[[], None]) -> tuple[float, float]:
    """(msg/s, Redis µs per message) of ``work`` on n messages."""
    cpu = server_cpu(r)
    start = time.perf_counter()
    work()
    seconds = time.perf_counter() - start
    return n / seconds, (server_cpu(r) - cpu) * 1e6 / n


def fresh(r: redis.Redis) -> Queue:
    r.flushall()
    q = new_queue(r)
    q._core.claim_reaping = False  # (nothing to reap: the same work on every side)
    return q


def enqueue(r: redis.Redis, n: int, groups: int, grouped: bool, batch: int) -> tuple[float, float]:
    q, data = fresh(r), bodies(n)
    names = [f"g{g}" for g in range(groups)] if grouped else [None]

    def one_at_a_time() -> None:
        for i, body in enumerate(data):
            q.enqueue(body, group=names[i % len(names)])

    def batches() -> None:
        for i in range(0, n, batch):
            q.enqueue_many(data[i : i + batch], group=names[i // batch % len(names)])

    return measured(r, n, one_at_a_time if batch == 1 else batches)


def claim_ack(r: redis.Redis, n: int, groups: int, setup: str, batch: int) -> tuple[float, float]:
    """claim + ack of n messages, ``batch`` at a time, in one set-up: ungrouped, grouped over
    ``groups`` groups, ungrouped beside groups that hold messages, or one group."""
    q, data = fresh(r), bodies(n)
    if setup == "grouped":
        for g in range(groups):
            q.enqueue_many(data[g::groups], group=f"g{g}")
    elif setup == "one group":
        for i in range(0, n, 1000):
            q.enqueue_many(data[i : i + 1000], group="g")
    else:
        for i in range(0, n, 1000):
            q.enqueue_many(data[i : i + 1000])
        if setup == "beside":
            for g in range(groups):  # a group's first is released: claimed and kept in flight
                q.enqueue_many(bodies(HELD_EACH + 1), group=f"g{g}")
            kept = q.claim_many(n + groups)
            q.ack_many([m for m in kept if m.group is None])
            q.enqueue_many(data)  # (the plain ones taken above, again)

    def one_at_a_time() -> None:
        for _ in range(n):
            m = q.claim()
            assert m is not None
            q.ack(m)

    def batches() -> None:
        left = n
        while left:
            got = q.claim_many(batch)
            assert got
            left -= q.ack_many(got)

    return measured(r, n, one_at_a_time if batch == 1 else batches)


def main(argv: list[str] | None = None) -> int:
    opts = Options(__doc__, rounds=5)
    opts.add_argument("--messages", type=int, help="messages per side (default 20,000; --quick 500)")
    opts.add_argument("--groups", type=int, help="groups (default 1,000; --quick 20)")
    args = opts.parse(argv)
    n = args.messages or (500 if args.quick else 20_000)
    groups = args.groups or (20 if args.quick else 1000)
    sides: dict[str, Callable[[], tuple[float, float]]] = {}
    for batch in (1, BATCH):
        for grouped in (False, True):
            name = "grouped" if grouped else "ungrouped"
            sides[f"enqueue{batch}:{name}"] = lambda g=grouped, b=batch: enqueue(r, n, groups, g, b)
            sides[f"claim{batch}:{name}"] = lambda s=name, b=batch: claim_ack(r, n, groups, s, b)
    sides["beside"] = lambda: claim_ack(r, n, groups, "beside", 1)
    sides["one group"] = lambda: claim_ack(r, n // 4, groups, "one group", 1)
    with throwaway_redis() as (_, r):
        line, info = about_line(r), about(r)
        runs = interleaved(sides, args.rounds)
    rates = {k: statistics.median(x for x, _ in v) for k, v in runs.items()}
    cpu = {k: Spread.of(us for _, us in v) for k, v in runs.items()}
    rows = []
    passed = True
    for side, base, what, bound in COMPARISONS:
        index = 0 if what == "rate" else 1
        ratio = Spread.of(s[index] / b[index] for s, b in zip(runs[side], runs[base]))
        ok = ratio.median >= bound if what == "rate" else ratio.median <= bound
        passed &= ok
        rows.append(
            {"side": side, "baseline": base, "compared": what, "ratio": ratio.rounded(3), "bound": bound, "ok": ok}
        )
    result: dict[str, Any] = {
        **info,
        "messages": n,
        "groups": groups,
        "rounds": args.rounds,
        "msgs_per_s": {k: round(v) for k, v in rates.items()},
        "redis_us_per_message": {k: v.rounded(2) for k, v in cpu.items()},
        "comparisons": rows,
        "passed": passed,
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return exit_status(args, passed)
    print(line + f"; {n:,} messages a side ({n // 4:,} for one group), {groups:,} groups, {args.rounds} rounds\n")
    labels = {
        "enqueue1": "enqueue, one at a time",
        "enqueue100": f"enqueue_many({BATCH})",
        "claim1": "claim + ack, one at a time",
        "claim100": f"claim_many({BATCH}) + ack_many",
        "beside": f"claim + ack of ungrouped messages beside {groups:,} groups (Redis CPU)",
    }
    table = []
    for row in rows:
        side, base = row["side"], row["baseline"]
        label = labels[side.split(":")[0]]
        if side != "beside":
            label += f", over {groups:,} groups"
        by_rate = row["compared"] == "rate"

        def value(k: str, by_rate: bool = by_rate) -> str:
            return f"{rates[k]:,.0f} msg/s" if by_rate else f"{cpu[k].median:.2f} µs"

        table.append(
            [
                label,
                value(side),
                value(base),
                "{min:.2f} / {median:.2f} / {max:.2f}".format_map(row["ratio"]),
                f"{'>=' if by_rate else '<='} {row['bound']} {verdict(row['ok'])}",
            ]
        )
    print(
        "\n".join(
            markdown_table(
                ["grouped against ungrouped", "grouped", "ungrouped", "ratio min / median / max", "target"],
                "lrrrl",
                table,
            )
        )
    )
    print()
    print(
        f"One group alone, claim + ack one at a time: {rates['one group']:,.0f} msg/s "
        f"({cpu['one group'].median:.2f} µs of Redis CPU a message); SQS FIFO: 300 transactions "
        "per second per API action, 3,000 messages with batches of 10 (per queue, without high throughput)."
    )
    return exit_status(args, passed)


if __name__ == "__main__":
    sys.exit(main())
