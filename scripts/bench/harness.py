"""The benchmarks' harness: interleaved rounds, the per-round ratio keyqueue / baseline and
its min / median / max table, the options every benchmark takes, and the set-up they share
(a throwaway redis-server, bodies, filled queues, SLOWLOG timings).

Every other file in this folder is one benchmark, run from the repository root as

    .venv/bin/python scripts/bench/<file>.py [--quick] [--json] [...]

``--quick`` runs tiny counts and 1 round: a smoke test that the benchmark still runs (its
figures mean nothing, so a missed target does not fail it); tests/test_benchmarks.py runs
every benchmark that way. This machine's speed drifts by 2x within minutes, so a figure is
only ever compared with one measured next to it: within a round the sides run one after the
other, the baseline first, and a table gives the per-round ratio's min / median / max.
Targets are checked on the median. Run full benchmarks alone, with nothing else running.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import statistics
import sys
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence, TypeVar

import redis

from keyqueue import Queue
from keyqueue.server import RedisServer

ROOT = Path(__file__).resolve().parents[2]
BODY_SIZE = 100
BODY = b"x" * BODY_SIZE
QUEUE_NAME = "bench"
RAW_QUEUE, RAW_PROCESSING = "raw:queue", "raw:processing"
QUICK_ROUNDS = 1
#: The messages of the reaping, memory and long-operation measurements (--quick: 1,000).
MESSAGES, QUICK_MESSAGES = 100_000, 1_000

T = TypeVar("T")

#: ``--mode``'s choices: the modes each names (scripting True: the scripted mode).
MODES = {"scripted": (True,), "script-free": (False,), "both": (True, False)}

#: A measurement's set-up, run before the clock starts; it returns the work to time.
Prepare = Callable[[], Callable[[], None]]


# -- options and exit status ------------------------------------------------------------


class Options(argparse.ArgumentParser):
    """The options every benchmark takes: ``--quick``, ``--json`` (unless ``json=False``) and,
    given a default, ``--rounds``; a benchmark adds its own. ``parse`` settles the rounds: the
    default, or 1 with ``--quick``, and at least ``min_rounds`` otherwise."""

    def __init__(self, doc: str | None, *, rounds: int | None = None, min_rounds: int = 3, json: bool = True) -> None:
        super().__init__(description=(doc or "").split("\n\n")[0])
        self.default_rounds, self.min_rounds = rounds, min_rounds
        self.add_argument(
            "--quick", action="store_true", help="tiny counts, 1 round: a smoke test (a missed target does not fail it)"
        )
        if json:
            self.add_argument("--json", action="store_true", help="print JSON instead of the tables")
        if rounds is not None:
            self.add_argument(
                "--rounds",
                type=int,
                help=f"interleaved rounds (default {rounds}, at least {min_rounds}; {QUICK_ROUNDS} with --quick)",
            )

    def parse(self, argv: Sequence[str] | None = None) -> argparse.Namespace:
        args = self.parse_args(argv)
        if self.default_rounds is not None:
            if args.rounds is None:
                args.rounds = QUICK_ROUNDS if args.quick else self.default_rounds
            elif args.rounds < self.min_rounds and not args.quick:
                self.error(f"--rounds must be at least {self.min_rounds}")
        return args


def exit_status(args: argparse.Namespace, met: bool) -> int:
    """0 when every target is met, or after a --quick run (its figures mean nothing); else 1."""
    return 0 if met or args.quick else 1


# -- shared set-up -----------------------------------------------------------------------


@contextmanager
def throwaway_redis(extra: Sequence[str] = ()) -> Iterator[tuple[RedisServer, redis.Redis]]:
    """A redis-server of its own on a free loopback port (``--save "" --appendonly no``, a
    private directory removed after), and a client of it."""
    with RedisServer(extra) as server:
        r = redis.Redis(port=server.port)
        try:
            yield server, r
        finally:
            r.close()


def mode_name(scripting: bool) -> str:
    return "scripted" if scripting else "script-free"


def about(r: redis.Redis) -> dict[str, Any]:
    """What every figure depends on besides the machine."""
    return {"redis_version": r.info("server")["redis_version"], "redis_py": redis.__version__, "body_bytes": BODY_SIZE}


def about_line(r: redis.Redis) -> str:
    a = about(r)
    return f"redis-server {a['redis_version']}, redis-py {a['redis_py']}, {BODY_SIZE}-byte bodies"


def bodies(n: int) -> list[bytes]:
    """n distinct bodies of BODY_SIZE bytes (distinct, so LREM removes the right one)."""
    return [(b"%012d" % i).ljust(BODY_SIZE, b"x") for i in range(n)]


def chunks(items: list[bytes], size: int) -> Iterator[list[bytes]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def new_queue(r: redis.Redis, **options: Any) -> Queue:
    return Queue(QUEUE_NAME, client=r, **options)


def prefill(r: redis.Redis, data: list[bytes], **options: Any) -> Queue:
    """A queue with ``data`` waiting, enqueued 1,000 at a time."""
    q = new_queue(r, **options)
    for chunk in chunks(data, 1000):
        q.enqueue_many(chunk)
    return q


def raw_prefill(r: redis.Redis, data: list[bytes]) -> None:
    for chunk in chunks(data, 1000):
        r.lpush(RAW_QUEUE, *chunk)


def expect(got: int, want: int, what: str) -> None:
    """A side that lost or skipped messages fails the run instead of looking fast."""
    if got != want:
        raise RuntimeError(f"{what}: drained {got} messages, expected {want}")


def script_call_durations(
    r: redis.Redis, work: Callable[[], object], slower_than_us: int = 0
) -> tuple[int, list[float]]:
    """How many EVALSHA calls ``work`` sends (INFO commandstats) and the server-side duration
    in ms of each that SLOWLOG kept (every call, or those over ``slower_than_us``), sorted."""
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
    return calls, sorted(e["duration"] / 1000 for e in entries if e["command"].split(b" ")[0].upper() == b"EVALSHA")


@dataclass(frozen=True)
class Slow:
    """One command SLOWLOG kept: its server-side duration and what it was (a script by its name)."""

    ms: float
    command: str


def _command_name(words: Sequence[bytes], scripts: Mapping[bytes, str]) -> str:
    name = words[0].decode(errors="replace").upper() if words else "?"
    if name == "EVALSHA" and len(words) > 1:
        return f"EVALSHA {scripts.get(words[1].lower(), words[1][:8].decode(errors='replace'))}"
    return name


@contextmanager
def slowlog(r: redis.Redis, slower_than_us: int) -> Iterator[list[Slow]]:
    """Every command slower than ``slower_than_us`` (commands inside scripts too) while the
    block runs, from a SLOWLOG reset as it starts, slowest first: the list yielded is
    filled as the block ends. SLOWLOG keeps the latest 100,000."""
    from keyqueue.backends.scripted.scripts import SCRIPT_NAMES, script_sha

    scripts = {script_sha(n).encode(): n for n in SCRIPT_NAMES}
    out: list[Slow] = []
    r.config_set("slowlog-log-slower-than", slower_than_us)
    r.config_set("slowlog-max-len", 100_000)
    r.slowlog_reset()
    try:
        yield out
        entries = r.slowlog_get(100_000)
    finally:
        r.config_set("slowlog-log-slower-than", 10_000)
        r.config_set("slowlog-max-len", 128)
    own = (b"SLOWLOG", b"CONFIG")  # the reading and resetting of this block
    slow = (Slow(e["duration"] / 1000, _command_name(e["command"].split(b" ")[:2], scripts)) for e in entries)
    out.extend(sorted((s for s in slow if not s.command.encode().startswith(own)), key=lambda s: -s.ms))


def percentile(values: Sequence[float], fraction: float) -> float:
    """The value below which ``fraction`` of ``values`` lie (nearest rank; nan when empty)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))]


@dataclass
class Spawned:
    """Processes started by ``spawned``: set ``go`` to let them start; each puts its result in
    ``finished``."""

    procs: list[Any]
    go: Any
    finished: Any

    def results(self, timeout: float) -> list[Any]:
        """Each process's result, in the order they finished; then every process joined."""
        out = [self.finished.get(timeout=timeout) for _ in self.procs]
        for p in self.procs:
            p.join()
        return out


def spawned(target: Callable[..., None], args: Sequence[Any], processes: int) -> Spawned:
    """``processes`` fresh interpreters running ``target(*args, ready, go, finished)``, each
    done with its set-up (it released ``ready``) when this returns, all waiting for ``go``."""
    ctx = mp.get_context("spawn")
    ready, go, finished = ctx.Semaphore(0), ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=target, args=(*args, ready, go, finished)) for _ in range(processes)]
    for p in procs:
        p.start()
    for _ in procs:
        ready.acquire()
    return Spawned(procs, go, finished)


def server_cpu(r: redis.Redis) -> float:
    """redis-server's own CPU seconds so far (INFO used_cpu_user + used_cpu_sys: its rusage)."""
    info = r.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


# -- timing and interleaved rounds -------------------------------------------------------


def timed(work: Callable[[], object]) -> float:
    """Seconds ``work`` took."""
    start = time.perf_counter()
    work()
    return time.perf_counter() - start


def flushed_rate(r: redis.Redis, prepare: Prepare, n: int) -> float:
    """Messages per second of the work ``prepare`` returns, on a freshly flushed server."""
    r.flushall()
    return n / timed(prepare())


def interleaved(sides: Mapping[str, Callable[[], T]], rounds: int, label: str = "") -> dict[str, list[T]]:
    """Each side's figure in each round. Within a round the sides run one after the other,
    so every ratio compares neighbours in time: in the order given (the baseline first) in
    the odd rounds, reversed in the even ones, so that a drift of the host's speed during a
    round, or what one side leaves behind for the next, favours no side over the rounds.
    With a label, each round's figures (msg/s) go to stderr as it ends."""
    runs: dict[str, list[T]] = {name: [] for name in sides}
    order = list(sides)
    for i in range(rounds):
        for name in order if i % 2 == 0 else order[::-1]:
            runs[name].append(sides[name]())
        if label:
            print(
                f"  {label}: round {i + 1}/{rounds}: " + ", ".join(f"{k} {v[-1]:,.0f} msg/s" for k, v in runs.items()),
                file=sys.stderr,
            )
    return runs


def ratios(keyqueue: Sequence[float], baseline: Sequence[float]) -> list[float]:
    """The per-round ratio keyqueue / baseline."""
    return [k / b for k, b in zip(keyqueue, baseline, strict=True)]


@dataclass(frozen=True)
class Spread:
    """Min / median / max over the rounds."""

    min: float
    median: float
    max: float

    @classmethod
    def of(cls, values: Iterable[float]) -> Spread:
        v = list(values)
        return cls(min(v), statistics.median(v), max(v))

    def text(self, spec: str = ".2f") -> str:
        return f"{self.min:{spec}} / {self.median:{spec}} / {self.max:{spec}}"

    def rounded(self, digits: int = 2) -> dict[str, float]:
        return {"min": round(self.min, digits), "median": round(self.median, digits), "max": round(self.max, digits)}


@dataclass
class Row:
    """One ratio keyqueue / baseline: each side's median rate and the per-round ratios."""

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


def row(
    name: str,
    n: int,
    runs: Mapping[str, list[float]],
    keyqueue: str,
    baseline: str,
    *,
    min_ratio: float | None = None,
    min_rate: float | None = None,
) -> Row:
    """The row comparing side ``keyqueue`` of ``runs`` with side ``baseline``."""
    parts = ([f"ratio >= {min_ratio:g}"] if min_ratio is not None else []) + (
        [f">= {min_rate:,.0f} msg/s"] if min_rate is not None else []
    )
    return Row(
        name,
        n,
        statistics.median(runs[keyqueue]),
        statistics.median(runs[baseline]),
        ratios(runs[keyqueue], runs[baseline]),
        ", ".join(parts) or "-",
        min_ratio,
        min_rate,
    )


# -- tables --------------------------------------------------------------------------------


def verdict(passed: bool | None) -> str:
    return "-" if passed is None else ("PASS" if passed else "FAIL")


def markdown_table(head: Sequence[str], align: str, rows: Iterable[Sequence[object]]) -> list[str]:
    """A Markdown table; ``align`` has one letter a column, l(eft) or r(ight)."""
    assert len(align) == len(head), "one alignment letter per column"
    return [
        f"| {' | '.join(head)} |",
        "|" + "|".join("---:" if a == "r" else "---" for a in align) + "|",
        *(f"| {' | '.join(str(c) for c in cells)} |" for cells in rows),
    ]


def ratio_table(rows: Iterable[Row]) -> list[str]:
    """The rows as the table of ratios: each side's median rate, min / median / max, target."""
    return markdown_table(
        ["measurement", "messages", "keyqueue msg/s", "baseline msg/s", "ratio min / median / max", "target", "result"],
        "lrrrrll",
        (
            [
                t.name,
                f"{t.messages:,}",
                f"{t.keyqueue_msgs_per_s:,.0f}",
                f"{t.baseline_msgs_per_s:,.0f}",
                Spread.of(t.ratios).text(),
                t.target,
                verdict(t.passed),
            ]
            for t in rows
        ),
    )


def one_table(
    args: argparse.Namespace,
    measure: Callable[[redis.Redis], list[T]],
    key: str,
    head: Sequence[str],
    align: str,
    cells: Callable[[T], Sequence[object]],
) -> list[T]:
    """A benchmark of one table: ``measure`` on a throwaway redis-server, then its rows (each
    a dataclass) as JSON under ``key`` with what the figures depend on, or as the table with
    that in a line above it. Returns the rows."""
    with throwaway_redis() as (_, r):
        line, info = about_line(r), about(r)
        rows = measure(r)
    if args.json:
        print(json.dumps({**info, key: [asdict(x) for x in rows]}, indent=2))
    else:
        print("\n".join([line, "", *markdown_table(head, align, map(cells, rows))]))
    return rows
