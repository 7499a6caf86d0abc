"""Where the time of keyqueue's queue operations goes: Redis time per operation (INFO
commandstats, and the commands each script runs inside) and client time per message
(cProfile), on a throwaway redis-server of its own.

    .venv/bin/python scripts/bench/where_time_goes.py [--quick]
"""

from __future__ import annotations

import sys
from typing import Any, Callable

import redis
from harness import Options, bodies, chunks, new_queue, prefill, throwaway_redis

from keyqueue import Queue


def redis_time(r: redis.Redis, n: int) -> list[str]:
    """Redis time per operation: EVALSHA microseconds per call and per message, and the
    commands each script call runs inside (INFO commandstats counts those too)."""
    data = bodies(n)
    lines = [
        "| operation | calls | Redis us per call | Redis us per message | commands per call inside |",
        "|---|---:|---:|---:|---|",
    ]

    def measured(name: str, per_call: int, setup: Callable[[], Any], work: Callable[[Any], object]) -> None:
        r.flushall()
        state = setup()
        r.config_resetstat()
        work(state)
        stats = r.info("commandstats")
        ev = stats["cmdstat_evalsha"]
        inside = ", ".join(
            f"{k[8:]} {v['calls'] / ev['calls']:.1f}"
            for k, v in sorted(stats.items(), key=lambda kv: -kv[1]["calls"])
            if k not in ("cmdstat_evalsha", "cmdstat_config|resetstat") and v["calls"] >= ev["calls"] / 2
        )
        lines.append(
            f"| {name} | {ev['calls']:,} | {ev['usec_per_call']:.1f} | "
            f"{ev['usec_per_call'] / per_call:.2f} | {inside} |"
        )

    def filled() -> Queue:
        q = prefill(r, data)
        q._core.claim_reaping = False
        return q

    measured("enqueue", 1, lambda: new_queue(r), lambda q: [q.enqueue(b) for b in data])
    measured(
        "enqueue_many(1000)", 1000, lambda: new_queue(r), lambda q: [q.enqueue_many(c) for c in chunks(data, 1000)]
    )
    held: list[Any] = []
    measured("claim", 1, filled, lambda q: held.extend(iter(q.claim, None)))
    measured(
        "claim_many(100)", 100, filled, lambda q: held.extend(m for c in iter(lambda: q.claim_many(100), []) for m in c)
    )

    def all_claimed() -> Queue:
        q = filled()
        held.clear()
        while got := q.claim_many(1000):
            held.extend(got)
        return q

    measured("ack", 1, all_claimed, lambda q: [q.ack(m) for m in held])
    measured(
        "ack_many(100)", 100, all_claimed, lambda q: [q.ack_many(held[i : i + 100]) for i in range(0, len(held), 100)]
    )
    return lines


def client_time(r: redis.Redis, n: int) -> list[str]:
    """Client time per message (cProfile): the functions that take most of it, as
    microseconds per message, grouped as keyqueue code, redis-py, or the socket."""
    import cProfile
    import pstats

    data = bodies(n)
    lines = []
    for name, setup, work in (
        ("enqueue one at a time", lambda: new_queue(r), lambda q: [q.enqueue(b) for b in data]),
        (
            "claim_many(100) + ack_many",
            lambda: prefill(r, data),
            lambda q: [q.ack_many(got) for got in iter(lambda: q.claim_many(100), [])],
        ),
    ):
        r.flushall()
        q = setup()
        prof = cProfile.Profile()
        prof.enable()
        work(q)
        prof.disable()
        st = pstats.Stats(prof)
        rows = sorted(st.stats.items(), key=lambda kv: -kv[1][2])  # type: ignore[attr-defined]
        groups: dict[str, float] = {}
        for (path, _, func), (_, _, tottime, _, _) in rows:
            group = (
                "socket (send/recv)"
                if func
                in (
                    "<method 'recv_into' of '_socket.socket' objects>",
                    "<method 'sendall' of '_socket.socket' objects>",
                )
                else "keyqueue"
                if "/keyqueue/" in path
                else "redis-py + hiredis"
                if "redis" in path or "hiredis" in func
                else "other (Python built-ins)"
            )
            groups[group] = groups.get(group, 0.0) + tottime
        total = sum(groups.values())
        lines += [
            f"{name}: {total / n * 1e6:.1f} us per message under the profiler, of which "
            + ", ".join(f"{g} {t / n * 1e6:.1f}" for g, t in sorted(groups.items(), key=lambda kv: -kv[1])),
            "",
            "| function | us per message |",
            "|---|---:|",
        ]
        for (path, line, func), (_, _, tottime, _, _) in rows[:12]:
            where = f"{path.rsplit('/', 2)[-2]}/{path.rsplit('/', 1)[-1]}:{line}" if "/" in path else path
            lines.append(f"| {func} ({where}) | {tottime / n * 1e6:.2f} |")
        lines.append("")
    return lines


def main(argv: list[str] | None = None) -> int:
    args = Options(__doc__, json=False).parse(argv)
    n = 500 if args.quick else 20_000
    with throwaway_redis() as (_, r):
        print(
            "\n".join(
                [
                    "### Redis time per operation",
                    "",
                    *redis_time(r, n),
                    "",
                    "### Client time per message",
                    "",
                    *client_time(r, n),
                ]
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
