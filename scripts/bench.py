"""Throughput and memory benchmark of keyqueue against the raw redis-py commands it replaces.

It starts its own throwaway redis-server (``keyqueue.server.RedisServer``: a free loopback
port, default settings, ``--save "" --appendonly no``) and measures each keyqueue operation
next to a same-run baseline of plain redis-py commands:

1. ``Queue.enqueue`` one at a time            vs one ``LPUSH`` round trip per message
2. ``Queue.enqueue_many`` (batches of 100, 1000) vs one pipeline of N ``LPUSH`` per batch
3. ``claim()`` + ``ack()`` one at a time      vs ``RPOPLPUSH`` + ``LREM`` round trips
4. ``claim_many(100)`` + ``ack_many``         vs a pipeline of 100 ``LMOVE`` + one of 100 ``LREM``
   (3 and 4 also against themselves with claim-time reaping turned off: what it costs)
5. Redis memory per waiting message (``INFO memory`` used_memory, after ``FLUSHALL``) of
   100,000 messages enqueued with ``enqueue_many``, vs the same bodies ``LPUSH``-ed.

Bodies are 100 bytes. Each keyqueue measurement and its baseline run alternately, best of
``--rounds`` each, so machine noise hits both; the scripts are loaded by a warm-up pass
before any timing. Next to every rate the table gives the Redis-side command time per
message (``INFO commandstats``; for keyqueue the EVALSHA time, which includes every command
its script runs), so the rest of the time per message is the client and the network.

Run it from the repository root (about 1-2 minutes on a 2-core machine):

    .venv/bin/python scripts/bench.py            # Markdown tables
    .venv/bin/python scripts/bench.py --json     # the same results as JSON
    .venv/bin/python scripts/bench.py --quick    # small counts: a smoke test of a few seconds
    .venv/bin/python scripts/bench.py --rounds 5

The exit status is 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass
from typing import Callable, Iterator

import redis

from keyqueue import Queue
from keyqueue.server import RedisServer

BODY_SIZE = 100
QUEUE_NAME = "bench"
RAW_QUEUE = "raw:queue"
RAW_PROCESSING = "raw:processing"

#: A measurement's set-up, run before the clock starts; it returns the work to time.
Prepare = Callable[[], Callable[[], None]]


@dataclass(frozen=True)
class Counts:
    single: int  # messages of the one-at-a-time measurements
    batch: int  # messages of the batched measurements
    memory: int  # waiting messages of the memory measurement


FULL = Counts(single=20_000, batch=200_000, memory=100_000)
QUICK = Counts(single=1_000, batch=5_000, memory=5_000)


@dataclass
class Rate:
    """The best round of one side of a measurement."""

    msgs_per_s: float
    redis_us_per_msg: float


@dataclass
class ThroughputResult:
    name: str
    messages: int
    keyqueue: Rate
    baseline: Rate
    ratio: float
    target: str
    passed: bool | None


@dataclass
class MemoryResult:
    messages: int
    keyqueue_bytes_per_msg: float
    keyqueue_beyond_body: float
    baseline_bytes_per_msg: float
    target: str
    passed: bool


def bodies(n: int) -> list[bytes]:
    """n distinct bodies of BODY_SIZE bytes (distinct, so LREM removes the right one)."""
    return [(b"%012d" % i).ljust(BODY_SIZE, b"x") for i in range(n)]


def chunks(items: list[bytes], size: int) -> Iterator[list[bytes]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


# -- timing ---------------------------------------------------------------------------


def redis_usec(r: redis.Redis) -> float:
    """Command time since the last CONFIG RESETSTAT. A script's own EVALSHA time includes
    the commands it runs (also listed separately), so with scripts only EVAL* is counted."""
    stats = r.info("commandstats")
    scripted = {k: v for k, v in stats.items() if k.startswith("cmdstat_eval")}
    return float(sum(v["usec"] for v in (scripted or stats).values()))


def measure(r: redis.Redis, prepare: Prepare, n: int) -> Rate:
    """Time the work ``prepare`` returns over n messages, on a freshly flushed server."""
    r.flushall()
    work = prepare()
    r.config_resetstat()
    start = time.perf_counter()
    work()
    elapsed = time.perf_counter() - start
    return Rate(n / elapsed, redis_usec(r) / n)


def best_of(r: redis.Redis, kq: Prepare, raw: Prepare, n: int, rounds: int) -> tuple[Rate, Rate]:
    """Run both sides alternately (which goes first alternates too); keep each one's best."""
    kq_runs: list[Rate] = []
    raw_runs: list[Rate] = []
    for i in range(rounds):
        order = [(kq, kq_runs), (raw, raw_runs)]
        for prepare, runs in order if i % 2 == 0 else reversed(order):
            runs.append(measure(r, prepare, n))
    return (max(kq_runs, key=lambda x: x.msgs_per_s), max(raw_runs, key=lambda x: x.msgs_per_s))


# -- the work of each measurement ----------------------------------------------------


def new_queue(r: redis.Redis) -> Queue:
    return Queue(QUEUE_NAME, client=r)


def kq_prefill(r: redis.Redis, data: list[bytes]) -> Queue:
    q = new_queue(r)
    for chunk in chunks(data, 1000):
        q.enqueue_many(chunk)
    return q


def raw_prefill(r: redis.Redis, data: list[bytes]) -> None:
    for chunk in chunks(data, 1000):
        r.lpush(RAW_QUEUE, *chunk)


def kq_enqueue(r: redis.Redis, data: list[bytes]) -> Prepare:
    def prepare() -> Callable[[], None]:
        q = new_queue(r)

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


def kq_enqueue_many(r: redis.Redis, data: list[bytes], size: int) -> Prepare:
    def prepare() -> Callable[[], None]:
        q = new_queue(r)

        def work() -> None:
            for chunk in chunks(data, size):
                q.enqueue_many(chunk)

        return work

    return prepare


def raw_lpush_pipelined(r: redis.Redis, data: list[bytes], size: int) -> Prepare:
    def prepare() -> Callable[[], None]:
        def work() -> None:
            for chunk in chunks(data, size):
                pipe = r.pipeline(transaction=False)
                for body in chunk:
                    pipe.lpush(RAW_QUEUE, body)
                pipe.execute()

        return work

    return prepare


def expect(got: int, want: int, what: str) -> None:
    if got != want:
        raise RuntimeError(f"{what}: drained {got} messages, expected {want}")


def without_claim_reaping(q: Queue) -> Queue:
    """The baseline of claim-time reaping: the same Queue with it turned off."""
    q._core.claim_reaping = False
    return q


def kq_claim_ack(r: redis.Redis, data: list[bytes], reaping: bool = True) -> Prepare:
    def prepare() -> Callable[[], None]:
        q = kq_prefill(r, data)
        if not reaping:
            without_claim_reaping(q)

        def work() -> None:
            done = 0
            while (m := q.claim()) is not None:
                done += q.ack(m)
            expect(done, len(data), "claim+ack")

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


def kq_claim_ack_many(r: redis.Redis, data: list[bytes], size: int, reaping: bool = True) -> Prepare:
    def prepare() -> Callable[[], None]:
        q = kq_prefill(r, data)
        if not reaping:
            without_claim_reaping(q)

        def work() -> None:
            done = 0
            while got := q.claim_many(size):
                done += q.ack_many(got)
            expect(done, len(data), "claim_many+ack_many")

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


# -- the measurements ----------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    name: str
    messages: int
    keyqueue: Prepare
    baseline: Prepare
    min_ratio: float | None = None
    min_rate: float | None = None

    def target(self) -> str:
        parts = []
        if self.min_ratio is not None:
            parts.append(f"ratio >= {self.min_ratio:g}")
        if self.min_rate is not None:
            parts.append(f">= {self.min_rate:,.0f} msg/s")
        return ", ".join(parts) or "-"

    def passed(self, kq: Rate, ratio: float) -> bool | None:
        checks = []
        if self.min_ratio is not None:
            checks.append(ratio >= self.min_ratio)
        if self.min_rate is not None:
            checks.append(kq.msgs_per_s >= self.min_rate)
        return all(checks) if checks else None


def cases(r: redis.Redis, counts: Counts) -> list[Case]:
    single, batch = bodies(counts.single), bodies(counts.batch)
    return [
        Case("enqueue (one at a time) vs LPUSH", counts.single,
             kq_enqueue(r, single), raw_lpush(r, single), min_ratio=0.8),
        Case("reference: bare layout script (TIME, INCR, HSET, RPUSH, SADD) vs LPUSH",
             counts.single, raw_layout_floor(r, single), raw_lpush(r, single)),
        Case("enqueue_many(100) vs pipelined LPUSH x100", counts.batch,
             kq_enqueue_many(r, batch, 100), raw_lpush_pipelined(r, batch, 100)),
        Case("enqueue_many(1000) vs pipelined LPUSH x1000", counts.batch,
             kq_enqueue_many(r, batch, 1000), raw_lpush_pipelined(r, batch, 1000),
             min_rate=100_000),
        Case("claim+ack (one at a time) vs RPOPLPUSH+LREM", counts.single,
             kq_claim_ack(r, single), raw_claim_ack(r, single)),
        Case("claim_many(100)+ack_many vs pipelined LMOVE+LREM x100", counts.batch,
             kq_claim_ack_many(r, batch, 100), raw_claim_ack_pipelined(r, batch, 100),
             min_rate=50_000),
        Case("claim+ack with claim-time reaping vs without", counts.single,
             kq_claim_ack(r, single), kq_claim_ack(r, single, reaping=False), min_ratio=0.95),
        Case("claim_many(100)+ack_many with claim-time reaping vs without", counts.batch,
             kq_claim_ack_many(r, batch, 100), kq_claim_ack_many(r, batch, 100, reaping=False),
             min_ratio=0.95),
    ]


def warm_up(r: redis.Redis, all_cases: list[Case]) -> None:
    """Run every case once untimed: loads the scripts, opens the connections, warms caches."""
    for case in all_cases:
        for prepare in (case.keyqueue, case.baseline):
            r.flushall()
            prepare()()


def run_throughput(r: redis.Redis, all_cases: list[Case], rounds: int) -> list[ThroughputResult]:
    results = []
    for case in all_cases:
        kq, raw = best_of(r, case.keyqueue, case.baseline, case.messages, rounds)
        ratio = kq.msgs_per_s / raw.msgs_per_s
        results.append(ThroughputResult(case.name, case.messages, kq, raw, ratio,
                                        case.target(), case.passed(kq, ratio)))
        print(f"  done: {case.name}", file=sys.stderr)
    return results


def bytes_per_message(r: redis.Redis, fill: Callable[[], object], n: int) -> float:
    r.flushall()
    before = r.info("memory")["used_memory"]
    fill()
    after = r.info("memory")["used_memory"]
    return (after - before) / n


def run_memory(r: redis.Redis, n: int, max_beyond_body: float = 250) -> MemoryResult:
    data = bodies(n)
    kq = bytes_per_message(r, lambda: kq_prefill(r, data), n)
    raw = bytes_per_message(r, lambda: raw_prefill(r, data), n)
    beyond = kq - BODY_SIZE
    return MemoryResult(n, kq, beyond, raw, f"<= {max_beyond_body:g} B beyond the body",
                        beyond <= max_beyond_body)


@dataclass
class BatchResult:
    operation: str
    messages: int
    calls: int
    median_ms: float
    max_ms: float


def script_call_durations(r: redis.Redis, work: Callable[[], object]) -> tuple[int, list[float]]:
    """How many EVALSHA calls `work` sends (INFO commandstats) and the server-side
    duration in ms of those SLOWLOG kept (all, up to its length)."""
    r.config_set("slowlog-log-slower-than", 0)
    r.config_set("slowlog-max-len", 100_000)
    r.slowlog_reset()
    r.config_resetstat()
    try:
        work()
        calls = r.info("commandstats")["cmdstat_evalsha"]["calls"]
        entries = r.slowlog_get(100_000)
    finally:
        r.config_set("slowlog-log-slower-than", 10_000)
        r.config_set("slowlog-max-len", 128)
    return calls, sorted(e["duration"] / 1000 for e in entries
                         if e["command"].split(b" ")[0].upper() == b"EVALSHA")


def run_batches(r: redis.Redis, n: int) -> list[BatchResult]:
    """How long one batch of purge and requeue holds Redis, over n messages."""
    data = bodies(n)
    out = []
    for name, prepare in (
        ("purge waiting", lambda q: q.purge),
        ("requeue processing", lambda q: (q.claim_many(n), lambda: q.requeue(source="processing"))[1]),
    ):
        r.flushall()
        q = kq_prefill(r, data)
        work = prepare(q)
        calls, times = script_call_durations(r, work)
        out.append(BatchResult(name, n, calls, times[len(times) // 2], times[-1]))
    return out


# -- output ---------------------------------------------------------------------------


def verdict(passed: bool | None) -> str:
    return "-" if passed is None else ("PASS" if passed else "FAIL")


def markdown(throughput: list[ThroughputResult], memory: MemoryResult, batches: list[BatchResult],
             info: dict) -> str:
    lines = [
        f"redis-server {info['redis_version']}, redis-py {redis.__version__}, "
        f"{BODY_SIZE}-byte bodies, best of {info['rounds']} rounds",
        "",
        "| Measurement | Messages | keyqueue msg/s | baseline msg/s | ratio | "
        "Redis us/msg (kq / base) | Target | Result |",
        "|---|---:|---:|---:|---:|---:|---|---|",
    ]
    for t in throughput:
        lines.append(
            f"| {t.name} | {t.messages:,} | {t.keyqueue.msgs_per_s:,.0f} | "
            f"{t.baseline.msgs_per_s:,.0f} | {t.ratio:.2f} | "
            f"{t.keyqueue.redis_us_per_msg:.1f} / {t.baseline.redis_us_per_msg:.1f} | "
            f"{t.target} | {verdict(t.passed)} |")
    m = memory
    lines += [
        "",
        "| Memory per waiting message | Messages | keyqueue B/msg | beyond body | "
        "baseline LPUSH B/msg | ratio | Target | Result |",
        "|---|---:|---:|---:|---:|---:|---|---|",
        f"| enqueue_many vs LPUSH | {m.messages:,} | {m.keyqueue_bytes_per_msg:.1f} | "
        f"{m.keyqueue_beyond_body:.1f} | {m.baseline_bytes_per_msg:.1f} | "
        f"{m.keyqueue_bytes_per_msg / m.baseline_bytes_per_msg:.2f} | {m.target} | "
        f"{verdict(m.passed)} |",
        "",
        "| Long operation | Messages | script calls | median ms per call | max ms per call |",
        "|---|---:|---:|---:|---:|",
    ]
    for b in batches:
        lines.append(f"| {b.operation} | {b.messages:,} | {b.calls} | {b.median_ms:.2f} | {b.max_ms:.2f} |")
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="small counts: a smoke test")
    p.add_argument("--rounds", type=int, default=3, help="rounds per measurement (best kept)")
    p.add_argument("--json", action="store_true", help="print JSON instead of Markdown")
    args = p.parse_args(argv)
    if args.rounds < 1:
        p.error("--rounds must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    counts = QUICK if args.quick else FULL
    with RedisServer() as server:
        r = redis.Redis(port=server.port)
        try:
            all_cases = cases(r, counts)
            warm_up(r, cases(r, QUICK))
            throughput = run_throughput(r, all_cases, args.rounds)
            memory = run_memory(r, counts.memory)
            batches = run_batches(r, counts.memory)
            info = {"redis_version": r.info("server")["redis_version"], "rounds": args.rounds}
        finally:
            r.close()
    if args.json:
        print(json.dumps({**info, "redis_py": redis.__version__, "body_bytes": BODY_SIZE,
                          "throughput": [asdict(t) for t in throughput],
                          "memory": asdict(memory), "batches": [asdict(b) for b in batches]},
                         indent=2))
    else:
        print(markdown(throughput, memory, batches, info))
    failed = [t for t in throughput if t.passed is False] + ([memory] if not memory.passed else [])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
