"""Throughput, latency-free costs and memory of keyqueue against the raw redis-py commands
it replaces, measured as ratios in the same run (issue 11).

It starts its own throwaway redis-server (``keyqueue.server.RedisServer``: a free loopback
port, ``--save "" --appendonly no``). Every row is a ratio keyqueue / baseline measured in
interleaved rounds: baseline, keyqueue, baseline, keyqueue, ... (``--rounds``, default 5),
each round a fresh FLUSHALL, and the table gives the per-round ratio's min / median / max
and each side's median rate: this machine's speed drifts by 2x within minutes, so only
rounds run next to each other are compared. Targets are checked on the median ratio.

Rows (100-byte bodies):
1. ``Queue.enqueue`` one at a time vs one LPUSH round trip, vs the bare layout script (the
   least a script on this layout must do), the bare script vs LPUSH, and the counters' cost
   (enqueue vs the same enqueue script with its HINCRBY removed): four sides a round.
2. ``enqueue_many(1000)`` vs ONE variadic LPUSH of the same 1,000 bodies.
3. claim + ack one at a time vs RPOPLPUSH + LREM; claim_many(100) + ack_many vs pipelined
   LMOVE + LREM; both with claim-time reaping vs without.
4. Flatness: single claim + ack of 5,000 messages with 1,000 / 100,000 / 1,000,000 waiting.
5. Reaping 100,000 expired deliveries: wall time, script calls and the longest call (SLOWLOG).
6. Memory per waiting message beyond its body (100,000 messages), with the server's default
   hash-max-listpack-value (64) and with 128, and where the bytes go.
7. The long operations (purge, requeue) per call.

``--replication`` measures instead what ``min_replicas=1`` costs: enqueue, enqueue_many,
claim + ack one at a time and in batches, each against itself with ``min_replicas=0``, on a
primary with one replica (issue 13).

``--profile`` prints instead where the time goes: Redis time per operation (INFO
commandstats, the commands each script runs) and client time per message (cProfile).

    .venv/bin/python scripts/bench.py            # Markdown tables
    .venv/bin/python scripts/bench.py --quick    # small counts: a smoke test
    .venv/bin/python scripts/bench.py --profile  # where the time goes

The exit status is 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable, Iterable, Iterator, Sequence

import redis

from keyqueue import Queue
from keyqueue.backends.scripted.scripts import script_sha, script_source
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


FULL = Counts(single=10_000, batch=200_000, memory=100_000)
QUICK = Counts(single=1_000, batch=5_000, memory=5_000)
#: Waiting messages behind the claims of the flatness row (the first is the baseline).
FLAT_SIZES = (1_000, 100_000, 1_000_000)
QUICK_FLAT_SIZES = (1_000, 10_000, 50_000)


def bodies(n: int) -> list[bytes]:
    """n distinct bodies of BODY_SIZE bytes (distinct, so LREM removes the right one)."""
    return [(b"%012d" % i).ljust(BODY_SIZE, b"x") for i in range(n)]


def chunks(items: list[bytes], size: int) -> Iterator[list[bytes]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


# -- the work of each measurement ----------------------------------------------------


def new_queue(r: redis.Redis, **options: Any) -> Queue:
    return Queue(QUEUE_NAME, client=r, **options)


def kq_prefill(r: redis.Redis, data: list[bytes], **options: Any) -> Queue:
    q = new_queue(r, **options)
    for chunk in chunks(data, 1000):
        q.enqueue_many(chunk)
    return q


def raw_prefill(r: redis.Redis, data: list[bytes]) -> None:
    for chunk in chunks(data, 1000):
        r.lpush(RAW_QUEUE, *chunk)


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


def kq_claim_ack(r: redis.Redis, data: list[bytes], reaping: bool = True, **options: Any) -> Prepare:
    def prepare() -> Callable[[], None]:
        q = kq_prefill(r, data, **options)
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


def kq_claim_ack_many(r: redis.Redis, data: list[bytes], size: int, reaping: bool = True,
                      **options: Any) -> Prepare:
    def prepare() -> Callable[[], None]:
        q = kq_prefill(r, data, **options)
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


def kq_enqueue_uncounted(r: redis.Redis, data: list[bytes]) -> Prepare:
    """The shipped enqueue with its counting removed: the same Queue, its enqueue calls sent
    to a variant of the script without the HINCRBY of the counters hash."""
    source = script_source("enqueue")
    counting = ("  r = redis.pcall('HINCRBY', KEYS[7], 'enqueued', 1)\n"
                "  if type(r) == 'table' then return undo(4, write_error(r, KEYS[7])) end\n")
    assert source.count(counting) == 1, "the enqueue script changed: update the counter-free variant"
    variant = source.replace(counting, "  r = 2\n")

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


def raw_lpush_variadic(r: redis.Redis, data: list[bytes], size: int) -> Prepare:
    def prepare() -> Callable[[], None]:
        def work() -> None:
            for chunk in chunks(data, size):
                r.lpush(RAW_QUEUE, *chunk)

        return work

    return prepare


# -- interleaved rounds ----------------------------------------------------------------


def timed(r: redis.Redis, prepare: Prepare, n: int) -> float:
    """Messages per second of the work ``prepare`` returns, on a freshly flushed server."""
    r.flushall()
    work = prepare()
    start = time.perf_counter()
    work()
    return n / (time.perf_counter() - start)


def rounds_of(r: redis.Redis, sides: Sequence[Prepare], n: int, rounds: int) -> list[list[float]]:
    """Each side's rate in each round; within a round the sides run one after the other in
    the order given (the baseline first), so every ratio compares neighbours in time."""
    return [[timed(r, side, n) for side in sides] for _ in range(rounds)]


@dataclass
class Row:
    name: str
    messages: int
    keyqueue_msgs_per_s: float  # medians over the rounds
    baseline_msgs_per_s: float
    ratios: list[float]  # per round, keyqueue / baseline
    target: str = "-"
    min_ratio: float | None = None
    min_rate: float | None = None

    @property
    def ratio(self) -> float:
        return statistics.median(self.ratios)

    @property
    def passed(self) -> bool | None:
        checks = []
        if self.min_ratio is not None:
            checks.append(self.ratio >= self.min_ratio)
        if self.min_rate is not None:
            checks.append(self.keyqueue_msgs_per_s >= self.min_rate)
        return all(checks) if checks else None


def row(name: str, n: int, runs: list[list[float]], kq: int, base: int, *, min_ratio: float | None = None,
        min_rate: float | None = None) -> Row:
    """The row comparing side ``kq`` with side ``base`` of ``runs``."""
    parts = ([f"ratio >= {min_ratio:g}"] if min_ratio is not None else []) + (
        [f">= {min_rate:,.0f} msg/s"] if min_rate is not None else [])
    return Row(name, n, statistics.median(r[kq] for r in runs), statistics.median(r[base] for r in runs),
               [r[kq] / r[base] for r in runs], ", ".join(parts) or "-", min_ratio, min_rate)


def throughput(r: redis.Redis, counts: Counts, rounds: int) -> list[Row]:
    single, batch = bodies(counts.single), bodies(counts.batch)
    out: list[Row] = []
    # 0 LPUSH, 1 bare layout script, 2 enqueue, 3 enqueue without the counters
    runs = rounds_of(r, [raw_lpush(r, single), raw_layout_floor(r, single), kq_enqueue(r, single),
                         kq_enqueue_uncounted(r, single)], counts.single, rounds)
    n = counts.single
    out += [row("enqueue (one at a time) vs LPUSH", n, runs, 2, 0, min_ratio=0.65),
            row("enqueue vs the bare layout script (TIME, INCR, HSET, RPUSH, SADD)", n, runs, 2, 1, min_ratio=0.9),
            row("reference: the bare layout script vs LPUSH", n, runs, 1, 0),
            row("enqueue vs the same without its counter (what counting costs)", n, runs, 2, 3, min_ratio=0.9)]
    print("  done: single enqueue", file=sys.stderr)
    for size, target in ((1000, dict(min_ratio=0.6, min_rate=150_000.0)), (100, {})):
        runs = rounds_of(r, [raw_lpush_variadic(r, batch, size), kq_enqueue_many(r, batch, size)],
                         counts.batch, rounds)
        out.append(row(f"enqueue_many({size}) vs one variadic LPUSH of the {size} bodies", counts.batch,
                       runs, 1, 0, **target))  # type: ignore[arg-type]
    print("  done: enqueue_many", file=sys.stderr)
    runs = rounds_of(r, [raw_claim_ack(r, single), kq_claim_ack(r, single), kq_claim_ack(r, single, False)],
                     n, rounds)
    out += [row("claim + ack (one at a time) vs RPOPLPUSH + LREM", n, runs, 1, 0),
            row("claim + ack with claim-time reaping vs without", n, runs, 1, 2, min_ratio=0.95)]
    runs = rounds_of(r, [raw_claim_ack_pipelined(r, batch, 100), kq_claim_ack_many(r, batch, 100),
                         kq_claim_ack_many(r, batch, 100, False)], counts.batch, rounds)
    out += [row("claim_many(100) + ack_many vs pipelined LMOVE + LREM x100", counts.batch, runs, 1, 0),
            row("claim_many(100) + ack_many with claim-time reaping vs without", counts.batch, runs, 1, 2,
                min_ratio=0.95)]
    print("  done: claim + ack", file=sys.stderr)
    return out


def replication(r: redis.Redis, counts: Counts, rounds: int) -> list[Row]:
    """What replicated writes cost (SPEC 9): each operation with ``min_replicas=1`` against
    the same with 0, on a primary with one replica on loopback (WAIT rides in the same round
    trip as the write, so the difference is the replica's acknowledgement)."""
    single, batch = bodies(counts.single), bodies(counts.batch // 4)
    out: list[Row] = []
    for name, n, make in (
        ("enqueue (one at a time)", counts.single, lambda **o: kq_enqueue(r, single, **o)),
        ("enqueue_many(100)", len(batch), lambda **o: kq_enqueue_many(r, batch, 100, **o)),
        ("claim + ack (one at a time)", counts.single, lambda **o: kq_claim_ack(r, single, **o)),
        ("claim_many(100) + ack_many", len(batch), lambda **o: kq_claim_ack_many(r, batch, 100, **o)),
    ):
        runs = rounds_of(r, [make(), make(min_replicas=1, replica_timeout=5.0)], n, rounds)
        out.append(row(f"{name}, min_replicas=1 vs 0", n, runs, 1, 0))
        print(f"  done: {name} replicated", file=sys.stderr)
    return out


# -- flatness, reaping, memory, long operations ----------------------------------------


def flatness(r: redis.Redis, sizes: Sequence[int], rounds: int, claims: int = 5_000) -> list[Row]:
    """Single claim + ack of ``claims`` messages with at least ``size`` waiting: each size
    against the smallest, in interleaved rounds (each round refills the queue)."""

    def side(size: int) -> Prepare:
        data = bodies(size + claims)  # `size` still wait behind the last claim

        def prepare() -> Callable[[], None]:
            q = kq_prefill(r, data)

            def work() -> None:
                for _ in range(claims):
                    m = q.claim()
                    assert m is not None and q.ack(m)

            return work

        return prepare

    runs = rounds_of(r, [side(s) for s in sizes], claims, rounds)
    return [row(f"claim + ack with {s:,} waiting vs with {sizes[0]:,}", claims, runs, i, 0)
            for i, s in enumerate(sizes)]


@dataclass
class ReapRun:
    messages: int
    seconds: float
    redis_seconds: float
    calls: int
    median_call_ms: float
    max_call_ms: float


def reap_expired(r: redis.Redis, n: int, runs: int = 3) -> list[ReapRun]:
    """Time one ``Queue.reap()`` of ``n`` deliveries whose visibility timeout has passed."""
    out = []
    for _ in range(runs):
        r.flushall()
        q = kq_prefill(r, bodies(n))
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
        seconds = spans[0]
        expect(result[0].requeued, n, "reap")
        usec = r.info("commandstats")["cmdstat_evalsha"]["usec"] / 1e6
        out.append(ReapRun(n, seconds, usec, calls, statistics.median(times) if times else 0.0,
                           max(times, default=0.0)))
    return out


@dataclass
class MemoryRow:
    listpack_value: int
    bytes_per_msg: float
    beyond_body: float
    item_hash: float  # MEMORY USAGE of an item hash (key, value and dict entry included)
    set_member: float
    list_entry: float
    lpush_bytes_per_msg: float


def memory(r: redis.Redis, n: int) -> list[MemoryRow]:
    data = bodies(n)
    out = []
    for value in (64, 128):
        r.config_set("hash-max-listpack-value", value)
        try:
            total = bytes_per_message(r, lambda: kq_prefill(r, data), n)
            item = statistics.mean(r.memory_usage(f"kq:{{{QUEUE_NAME}}}:item:{i}", samples=0) or 0
                                   for i in range(1, n + 1, max(1, n // 100)))
            items = (r.memory_usage(f"kq:{{{QUEUE_NAME}}}:items", samples=0) or 0) / n
            queue = (r.memory_usage(f"kq:{{{QUEUE_NAME}}}:queue", samples=0) or 0) / n
            raw = bytes_per_message(r, lambda: raw_prefill(r, data), n)
            out.append(MemoryRow(value, total, total - BODY_SIZE, item, items, queue, raw))
        finally:
            r.config_set("hash-max-listpack-value", 64)
    return out


def bytes_per_message(r: redis.Redis, fill: Callable[[], object], n: int) -> float:
    r.flushall()
    before = r.info("memory")["used_memory"]
    fill()
    return (r.info("memory")["used_memory"] - before) / n


@dataclass
class BatchResult:
    operation: str
    messages: int
    calls: int
    median_ms: float
    max_ms: float


def script_call_durations(r: redis.Redis, work: Callable[[], object],
                          slower_than_us: int = 0) -> tuple[int, list[float]]:
    """How many EVALSHA calls ``work`` sends (INFO commandstats) and the server-side duration
    in ms of each that SLOWLOG kept (every call, or those over ``slower_than_us``)."""
    r.config_set("slowlog-log-slower-than", slower_than_us)
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


def long_operations(r: redis.Redis, n: int) -> list[BatchResult]:
    """How long one call of purge and requeue holds Redis, over n messages."""
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
        out.append(BatchResult(name, n, calls, statistics.median(times), times[-1]))
    return out


# -- where the time goes -----------------------------------------------------------------


def redis_time(r: redis.Redis, n: int) -> list[str]:
    """Redis time per operation: EVALSHA microseconds per call and per message, and the
    commands each script call runs inside (INFO commandstats counts those too)."""
    data = bodies(n)
    lines = ["| operation | calls | Redis us per call | Redis us per message | commands per call inside |",
             "|---|---:|---:|---:|---|"]

    def measured(name: str, per_call: int, setup: Callable[[], Any], work: Callable[[Any], object]) -> None:
        r.flushall()
        state = setup()
        r.config_resetstat()
        work(state)
        stats = r.info("commandstats")
        ev = stats["cmdstat_evalsha"]
        inside = ", ".join(f"{k[8:]} {v['calls'] / ev['calls']:.1f}"
                           for k, v in sorted(stats.items(), key=lambda kv: -kv[1]["calls"])
                           if k not in ("cmdstat_evalsha", "cmdstat_config|resetstat") and v["calls"] >= ev["calls"] / 2)
        lines.append(f"| {name} | {ev['calls']:,} | {ev['usec_per_call']:.1f} | "
                     f"{ev['usec_per_call'] / per_call:.2f} | {inside} |")

    def filled() -> Queue:
        q = kq_prefill(r, data)
        q._core.claim_reaping = False
        return q

    measured("enqueue", 1, lambda: new_queue(r), lambda q: [q.enqueue(b) for b in data])
    measured("enqueue_many(1000)", 1000, lambda: new_queue(r), lambda q: [q.enqueue_many(c) for c in chunks(data, 1000)])
    held: list[Any] = []
    measured("claim", 1, filled, lambda q: held.extend(iter(q.claim, None)))
    measured("claim_many(100)", 100, filled, lambda q: held.extend(m for c in iter(lambda: q.claim_many(100), [])
                                                                   for m in c))

    def acks(size: int) -> Callable[[], Any]:
        def setup() -> Queue:
            q = filled()
            held.clear()
            while got := q.claim_many(1000):
                held.extend(got)
            return q
        return setup

    measured("ack", 1, acks(1), lambda q: [q.ack(m) for m in held])
    measured("ack_many(100)", 100, acks(100), lambda q: [q.ack_many(held[i:i + 100]) for i in range(0, len(held), 100)])
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
        ("claim_many(100) + ack_many", lambda: kq_prefill(r, data),
         lambda q: [q.ack_many(got) for got in iter(lambda: q.claim_many(100), [])]),
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
            group = ("socket (send/recv)" if func in ("<method 'recv_into' of '_socket.socket' objects>",
                                                       "<method 'sendall' of '_socket.socket' objects>")
                     else "keyqueue" if "/keyqueue/" in path else "redis-py + hiredis" if "redis" in path or "hiredis" in func
                     else "other (Python built-ins)")
            groups[group] = groups.get(group, 0.0) + tottime
        total = sum(groups.values())
        lines += [f"{name}: {total / n * 1e6:.1f} us per message under the profiler, of which "
                  + ", ".join(f"{g} {t / n * 1e6:.1f}" for g, t in sorted(groups.items(), key=lambda kv: -kv[1])),
                  "", "| function | us per message |", "|---|---:|"]
        for (path, line, func), (_, _, tottime, _, _) in rows[:12]:
            where = f"{path.rsplit('/', 2)[-2]}/{path.rsplit('/', 1)[-1]}:{line}" if "/" in path else path
            lines.append(f"| {func} ({where}) | {tottime / n * 1e6:.2f} |")
        lines.append("")
    return lines


# -- output ---------------------------------------------------------------------------


def verdict(passed: bool | None) -> str:
    return "-" if passed is None else ("PASS" if passed else "FAIL")


def table(rows: list[Row]) -> list[str]:
    lines = ["| measurement | messages | keyqueue msg/s | baseline msg/s | ratio min / median / max | target | result |",
             "|---|---:|---:|---:|---:|---|---|"]
    for t in rows:
        lo, hi = min(t.ratios), max(t.ratios)
        lines.append(f"| {t.name} | {t.messages:,} | {t.keyqueue_msgs_per_s:,.0f} | {t.baseline_msgs_per_s:,.0f} | "
                     f"{lo:.2f} / {t.ratio:.2f} / {hi:.2f} | {t.target} | {verdict(t.passed)} |")
    return lines


def markdown(info: dict[str, Any], rows: list[Row], flat: list[Row], reaps: list[ReapRun],
             mem: list[MemoryRow], longs: list[BatchResult]) -> str:
    lines = [f"redis-server {info['redis_version']}, redis-py {redis.__version__}, {BODY_SIZE}-byte bodies, "
             f"{info['rounds']} interleaved rounds per row", "", *table(rows), "", *table(flat), "",
             "| reaping expired deliveries | seconds | Redis seconds | script calls | median ms per call | "
             "max ms per call | target | result |", "|---|---:|---:|---:|---:|---:|---|---|"]
    for x in reaps:
        ok = x.seconds <= 1.0 and x.max_call_ms <= 10.0
        lines.append(f"| {x.messages:,} | {x.seconds:.3f} | {x.redis_seconds:.3f} | {x.calls} | "
                     f"{x.median_call_ms:.2f} | {x.max_call_ms:.2f} | <= 1 s, no call > 10 ms | {verdict(ok)} |")
    lines += ["", "| memory per waiting message | hash-max-listpack-value | bytes | beyond the body | "
              "item hash (MEMORY USAGE) | items set per member | queue list per entry | LPUSH of the body | target | result |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---|---|"]
    for m in mem:
        lines.append(f"| 100-byte bodies | {m.listpack_value} | {m.bytes_per_msg:.1f} | {m.beyond_body:.1f} | "
                     f"{m.item_hash:.0f} | {m.set_member:.1f} | {m.list_entry:.1f} | {m.lpush_bytes_per_msg:.1f} | "
                     f"<= 200 | {verdict(m.beyond_body <= 200)} |")
    lines += ["", "| long operation | messages | script calls | median ms per call | max ms per call |",
              "|---|---:|---:|---:|---:|"]
    lines += [f"| {b.operation} | {b.messages:,} | {b.calls} | {b.median_ms:.2f} | {b.max_ms:.2f} |" for b in longs]
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="small counts: a smoke test")
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds per row (at least 3)")
    p.add_argument("--json", action="store_true", help="print JSON instead of Markdown")
    p.add_argument("--profile", action="store_true", help="where the time goes, instead of the rows")
    p.add_argument("--replication", action="store_true",
                   help="only what min_replicas=1 costs, on a primary with a replica")
    args = p.parse_args(argv)
    if args.rounds < 3:
        p.error("--rounds must be at least 3")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    counts = QUICK if args.quick else FULL
    if args.replication:
        return replicated_main(args, counts)
    with RedisServer() as server:
        r = redis.Redis(port=server.port)
        try:
            info = {"redis_version": r.info("server")["redis_version"], "rounds": args.rounds}
            if args.profile:
                n = 2_000 if args.quick else 20_000
                print("\n".join(["### Redis time per operation", "", *redis_time(r, n), "",
                                 "### Client time per message", "", *client_time(r, n)]))
                return 0
            rows = throughput(r, counts, args.rounds)
            flat = flatness(r, QUICK_FLAT_SIZES if args.quick else FLAT_SIZES, args.rounds,
                            claims=1_000 if args.quick else 5_000)
            print("  done: flatness", file=sys.stderr)
            reaps = reap_expired(r, counts.memory)
            mem = memory(r, counts.memory)
            longs = long_operations(r, counts.memory)
        finally:
            r.close()
    if args.json:
        print(json.dumps({**info, "redis_py": redis.__version__, "body_bytes": BODY_SIZE,
                          "rows": [{**asdict(t), "ratio": t.ratio, "passed": t.passed} for t in rows + flat],
                          "reaps": [asdict(x) for x in reaps], "memory": [asdict(m) for m in mem],
                          "long_operations": [asdict(b) for b in longs]}, indent=2))
    else:
        print(markdown(info, rows, flat, reaps, mem, longs))
    failed = [t for t in rows if t.passed is False]
    failed += [x for x in reaps if x.seconds > 1.0 or x.max_call_ms > 10.0]
    return 1 if failed else 0


def replicated_main(args: argparse.Namespace, counts: Counts) -> int:
    with RedisServer() as primary, RedisServer(["--replicaof", "127.0.0.1", str(primary.port)]) as replica:
        rr = redis.Redis(port=replica.port)
        end = time.monotonic() + 30
        while rr.info("replication")["master_link_status"] != "up":
            if time.monotonic() > end:
                raise RuntimeError("the replica did not sync")
            time.sleep(0.05)
        rr.close()
        r = redis.Redis(port=primary.port)
        try:
            rows = replication(r, counts, args.rounds)
        finally:
            r.close()
    if args.json:
        print(json.dumps([{**asdict(t), "ratio": t.ratio} for t in rows], indent=2))
    else:
        print("\n".join([f"a primary and one replica on loopback, {args.rounds} interleaved rounds per row",
                         "", *table(rows)]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
