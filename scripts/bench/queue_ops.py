"""Throughput of keyqueue's queue operations against the raw redis-py commands they replace,
measured as ratios in the same run.

It starts its own throwaway redis-server. Every row is a ratio keyqueue / baseline measured
in interleaved rounds (``--rounds``, default 5), each run on a freshly flushed server; the
table gives the per-round ratio's min / median / max and each side's median rate (see
harness.py). Targets are checked on the median ratio.

Rows (100-byte bodies):
1. ``Queue.enqueue`` one at a time vs one LPUSH round trip, vs the bare layout script (the
   least a script on this layout must do), the bare script vs LPUSH, and the counters' cost
   (enqueue vs the same enqueue script with its HINCRBY removed): four sides a round.
2. ``enqueue_many(1000)`` vs ONE variadic LPUSH of the same 1,000 bodies.
3. claim + ack one at a time vs RPOPLPUSH + LREM; claim_many(100) + ack_many vs pipelined
   LMOVE + LREM; both with claim-time reaping vs without.
4. Flatness: single claim + ack of 5,000 messages with 1,000 / 100,000 / 1,000,000 waiting.

    .venv/bin/python scripts/bench/queue_ops.py [--quick] [--json] [--rounds R]

The exit status is 1 when a target is missed.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass
from typing import Any, Callable, Iterable, Sequence

import redis
from harness import (
    RAW_PROCESSING,
    RAW_QUEUE,
    Options,
    Prepare,
    Row,
    about,
    about_line,
    bodies,
    chunks,
    exit_status,
    expect,
    flushed_rate,
    interleaved,
    new_queue,
    prefill,
    ratio_table,
    raw_prefill,
    row,
    throwaway_redis,
)

from keyqueue.backends.scripted.scripts import script_sha, script_source


@dataclass(frozen=True)
class Counts:
    single: int  # messages of the one-at-a-time measurements
    batch: int  # messages of the batched measurements


FULL = Counts(single=10_000, batch=200_000)
QUICK = Counts(single=300, batch=2_000)
#: Waiting messages behind the claims of the flatness row (the first is the baseline), and the claims.
FLAT_SIZES, FLAT_CLAIMS = (1_000, 100_000, 1_000_000), 5_000
QUICK_FLAT_SIZES, QUICK_FLAT_CLAIMS = (100, 1_000, 5_000), 300


# -- the work of each side -------------------------------------------------------------


def kq_enqueue(r: redis.Redis, data: list[bytes], **options: Any) -> Prepare:
    def prepare() -> Callable[[], None]:
        q = new_queue(r, **options)

        def work() -> None:
            for body in data:
                q.enqueue(body)

        return work

    return prepare


def raw_lpush(r: redis.Redis, data: list[bytes]) -> Prepare:
    def prepare() -> Callable[[], None]:
        def work() -> None:
            for body in data:
                r.lpush(RAW_QUEUE, body)

        return work

    return prepare


#: The least any enqueue on keyqueue's key layout must do: the four writes (INCR seq, HSET
#: item, RPUSH queue, SADD items) and TIME, in one bare script with no checks and no wake-up.
LAYOUT_FLOOR = """
local t = redis.call('TIME')
local id = redis.call('INCR', KEYS[1])
redis.call('HSET', ARGV[1] .. id, 't', t[1], 'b', ARGV[2])
redis.call('RPUSH', KEYS[2], id)
redis.call('SADD', KEYS[3], id)
return id
"""


def raw_layout_floor(r: redis.Redis, data: list[bytes]) -> Prepare:
    def prepare() -> Callable[[], None]:
        sha = r.script_load(LAYOUT_FLOOR)
        keys = ("floor:{f}:seq", "floor:{f}:queue", "floor:{f}:items")

        def work() -> None:
            for body in data:
                r.execute_command("EVALSHA", sha, 3, *keys, "floor:{f}:item:", body)

        return work

    return prepare


def kq_enqueue_many(r: redis.Redis, data: list[bytes], size: int, **options: Any) -> Prepare:
    def prepare() -> Callable[[], None]:
        q = new_queue(r, **options)

        def work() -> None:
            for chunk in chunks(data, size):
                q.enqueue_many(chunk)

        return work

    return prepare


def raw_lpush_variadic(r: redis.Redis, data: list[bytes], size: int) -> Prepare:
    def prepare() -> Callable[[], None]:
        def work() -> None:
            for chunk in chunks(data, size):
                r.lpush(RAW_QUEUE, *chunk)

        return work

    return prepare


def kq_claim_ack(r: redis.Redis, data: list[bytes], size: int = 1, reaping: bool = True, **options: Any) -> Prepare:
    """claim + ack one at a time (size 1), or claim_many(size) + ack_many; without claim-time
    reaping (its baseline: the same Queue with it turned off) when ``reaping`` is False."""

    def prepare() -> Callable[[], None]:
        q = prefill(r, data, **options)
        if not reaping:
            q._core.claim_reaping = False

        def work() -> None:
            done = 0
            if size == 1:
                while (m := q.claim()) is not None:
                    done += q.ack(m)
            else:
                while got := q.claim_many(size):
                    done += q.ack_many(got)
            expect(done, len(data), "claim+ack" if size == 1 else "claim_many+ack_many")

        return work

    return prepare


def raw_claim_ack(r: redis.Redis, data: list[bytes]) -> Prepare:
    def prepare() -> Callable[[], None]:
        raw_prefill(r, data)

        def work() -> None:
            done = 0
            while (body := r.rpoplpush(RAW_QUEUE, RAW_PROCESSING)) is not None:
                done += r.lrem(RAW_PROCESSING, 1, body)
            expect(done, len(data), "RPOPLPUSH+LREM")

        return work

    return prepare


def raw_claim_ack_pipelined(r: redis.Redis, data: list[bytes], size: int) -> Prepare:
    def prepare() -> Callable[[], None]:
        raw_prefill(r, data)

        def work() -> None:
            done = 0
            while True:
                pipe = r.pipeline(transaction=False)
                for _ in range(size):
                    pipe.lmove(RAW_QUEUE, RAW_PROCESSING, "RIGHT", "LEFT")
                got = [b for b in pipe.execute() if b is not None]
                if not got:
                    break
                pipe = r.pipeline(transaction=False)
                for body in got:
                    pipe.lrem(RAW_PROCESSING, 1, body)
                done += sum(pipe.execute())
            expect(done, len(data), "pipelined LMOVE+LREM")

        return work

    return prepare


def kq_enqueue_uncounted(r: redis.Redis, data: list[bytes]) -> Prepare:
    """The shipped enqueue with its counting removed: the same Queue, its enqueue calls sent
    to a variant of the script without the HINCRBY of the counters hash."""
    source = script_source("enqueue")
    counting = (
        "  local r = redis.pcall('HINCRBY', KEYS[7], 'enqueued', 1)\n"
        "  if type(r) == 'table' then return nil, undo_enqueue(step, id, write_error(r, KEYS[7])) end\n"
    )
    assert source.count(counting) == 1, "the enqueue script changed: update the counter-free variant"
    variant = source.replace(counting, "  local r = 2\n")

    def prepare() -> Callable[[], None]:
        q = new_queue(r)
        sha, shipped = r.script_load(variant), script_sha("enqueue")
        evalsha = q._core.ops._evalsha

        def uncounted(name: str, keys: Sequence[str], args: Iterable[Any]) -> tuple[Any, ...]:
            cmd = evalsha(name, keys, args)
            return (cmd[0], sha, *cmd[2:]) if cmd[1] == shipped else cmd

        q._core.ops._evalsha = uncounted

        def work() -> None:
            for body in data:
                q.enqueue(body)

        return work

    return prepare


# -- the rows ----------------------------------------------------------------------------


def rounds_of(r: redis.Redis, sides: dict[str, Prepare], n: int, rounds: int) -> dict[str, list[float]]:
    """Each side's msg/s in each round, every run on a freshly flushed server."""
    return interleaved({name: (lambda p=prepare: flushed_rate(r, p, n)) for name, prepare in sides.items()}, rounds)


def throughput(r: redis.Redis, counts: Counts, rounds: int) -> list[Row]:
    single, batch = bodies(counts.single), bodies(counts.batch)
    n = counts.single
    runs = rounds_of(
        r,
        {
            "lpush": raw_lpush(r, single),
            "floor": raw_layout_floor(r, single),
            "enqueue": kq_enqueue(r, single),
            "uncounted": kq_enqueue_uncounted(r, single),
        },
        n,
        rounds,
    )
    out = [
        row("enqueue (one at a time) vs LPUSH", n, runs, "enqueue", "lpush", min_ratio=0.65),
        row(
            "enqueue vs the bare layout script (TIME, INCR, HSET, RPUSH, SADD)",
            n,
            runs,
            "enqueue",
            "floor",
            min_ratio=0.9,
        ),
        row("reference: the bare layout script vs LPUSH", n, runs, "floor", "lpush"),
        row(
            "enqueue vs the same without its counter (what counting costs)",
            n,
            runs,
            "enqueue",
            "uncounted",
            min_ratio=0.9,
        ),
    ]
    print("  done: single enqueue", file=sys.stderr)
    for size, target in ((1000, dict(min_ratio=0.6, min_rate=150_000.0)), (100, {})):
        runs = rounds_of(
            r,
            {"lpush": raw_lpush_variadic(r, batch, size), "kq": kq_enqueue_many(r, batch, size)},
            counts.batch,
            rounds,
        )
        out.append(
            row(
                f"enqueue_many({size}) vs one variadic LPUSH of the {size} bodies",
                counts.batch,
                runs,
                "kq",
                "lpush",
                **target,
            )
        )
    print("  done: enqueue_many", file=sys.stderr)
    runs = rounds_of(
        r,
        {
            "raw": raw_claim_ack(r, single),
            "kq": kq_claim_ack(r, single),
            "unreaped": kq_claim_ack(r, single, reaping=False),
        },
        n,
        rounds,
    )
    out += [
        row("claim + ack (one at a time) vs RPOPLPUSH + LREM", n, runs, "kq", "raw"),
        row("claim + ack with claim-time reaping vs without", n, runs, "kq", "unreaped", min_ratio=0.95),
    ]
    runs = rounds_of(
        r,
        {
            "raw": raw_claim_ack_pipelined(r, batch, 100),
            "kq": kq_claim_ack(r, batch, 100),
            "unreaped": kq_claim_ack(r, batch, 100, False),
        },
        counts.batch,
        rounds,
    )
    out += [
        row("claim_many(100) + ack_many vs pipelined LMOVE + LREM x100", counts.batch, runs, "kq", "raw"),
        row(
            "claim_many(100) + ack_many with claim-time reaping vs without",
            counts.batch,
            runs,
            "kq",
            "unreaped",
            min_ratio=0.95,
        ),
    ]
    print("  done: claim + ack", file=sys.stderr)
    return out


def flatness(r: redis.Redis, sizes: Sequence[int], rounds: int, claims: int) -> list[Row]:
    """Single claim + ack of ``claims`` messages with at least ``size`` waiting: each size
    against the smallest, in interleaved rounds (each round refills the queue)."""

    def side(size: int) -> Prepare:
        data = bodies(size + claims)  # `size` still wait behind the last claim

        def prepare() -> Callable[[], None]:
            q = prefill(r, data)

            def work() -> None:
                for _ in range(claims):
                    m = q.claim()
                    assert m is not None and q.ack(m)

            return work

        return prepare

    runs = rounds_of(r, {str(s): side(s) for s in sizes}, claims, rounds)
    return [
        row(f"claim + ack with {s:,} waiting vs with {sizes[0]:,}", claims, runs, str(s), str(sizes[0])) for s in sizes
    ]


def main(argv: list[str] | None = None) -> int:
    args = Options(__doc__, rounds=5).parse(argv)
    counts = QUICK if args.quick else FULL
    with throwaway_redis() as (_, r):
        head, info = about_line(r), about(r)
        rows = throughput(r, counts, args.rounds)
        flat = flatness(
            r,
            *(
                (QUICK_FLAT_SIZES, args.rounds, QUICK_FLAT_CLAIMS)
                if args.quick
                else (FLAT_SIZES, args.rounds, FLAT_CLAIMS)
            ),
        )
        print("  done: flatness", file=sys.stderr)
    if args.json:
        print(
            json.dumps(
                {
                    **info,
                    "rounds": args.rounds,
                    "rows": [{**asdict(t), "ratio": t.ratio, "passed": t.passed} for t in rows + flat],
                },
                indent=2,
            )
        )
    else:
        print(
            "\n".join(
                [f"{head}, {args.rounds} interleaved rounds per row", "", *ratio_table(rows), "", *ratio_table(flat)]
            )
        )
    return exit_status(args, all(t.passed is not False for t in rows))


if __name__ == "__main__":
    sys.exit(main())
