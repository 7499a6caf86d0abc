"""What retention costs: the operations with a retention set against the same without, and
the expiry sweep of a large backlog against ``purge`` of as many, with a consumer of another
queue on the same server timed meanwhile. A throwaway redis-server of its own.

1. Enqueue one at a time, and claim + ack one at a time, on a queue with
   ``retention=86400`` against the same queue with retention unset: interleaved rounds
   (``--rounds``, default 7), each run on a freshly flushed server, the unset side first.
   Target: ratio >= 0.97 each, on the median.
2. The sweep: ``--size`` waiting messages (default 1,000,000) on a queue with
   ``retention=86400``, enqueued two days ago (``enqueue_many(enqueued_at=...)``, how a
   message moved from another queue keeps its age), all deleted by Reaper passes
   (``Reaper.reap_once``; each sweeps a bounded part): one every interval, as a running
   Reaper makes them (the row with the targets), and then back to back (what the sweep can
   do, no target). Beside it in each round
   (``--sweep-rounds``, default 3), the reference first: ``purge`` of as many fresh waiting
   messages. Meanwhile another process claims and acks one at a time on another queue of the
   same server: its claim latency (from the call to the return, one claim's round trips) at
   p50 / p99 during the purge, the sweep, and a quiet window before them. SLOWLOG (reset
   before each; commands over ``--slowlog-us``, inside scripts too) gives the longest command
   during each. Targets: no command over 10 ms during the sweep, the other queue's claim
   p99 under 2 ms meanwhile (worst round). Last in each round, the same figures for a
   Reaper pass over as many fresh messages on the swept queue (none expired): what every
   pass costs while a backlog waits on a queue with a retention.

    .venv/bin/python scripts/bench/retention.py [--quick] [--json] [--rounds R] [--size N]
        [--sweep-rounds R] [--mode scripted|script-free|both]

``--mode both`` adds the script-free mode: its sweep and purge move some thousands of
messages a second, so at the default size each takes minutes.

The exit status is 1 when a target is missed.
"""

from __future__ import annotations

import json
import logging
import multiprocessing as mp
import sys
import time
from array import array
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

import redis
from harness import (
    MODES,
    Options,
    Row,
    Slow,
    Spread,
    about,
    about_line,
    bodies,
    chunks,
    exit_status,
    expect,
    markdown_table,
    mode_name,
    percentile,
    ratio_table,
    row,
    slowlog,
    spawned,
    throwaway_redis,
    verdict,
)
from queue_ops import kq_claim_ack, kq_enqueue, rounds_of

from keyqueue import Queue
from keyqueue.reaper import Reaper

RETENTION = 86_400.0
#: How old the swept messages are: past the retention, as after a weekend nobody consumed.
AGE = 2 * 86_400.0
#: Part 1's messages per side and round, and part 2's backlog (--quick: the second of each).
MESSAGES, QUICK_MESSAGES = 10_000, 300
SIZE, QUICK_SIZE = 1_000_000, 5_000
#: Seconds of the quiet window (the other queue's consumer alone) in each round of part 2.
QUIET, QUICK_QUIET = 2.0, 0.3
#: Messages the other queue's consumer adds whenever it finds its queue empty.
REFILL = 1000
MAX_COMMAND_MS, MAX_P99_MS = 10.0, 2.0


# -- part 1: the operations with a retention set ----------------------------------------


def operations(r: redis.Redis, n: int, rounds: int, scripting: bool) -> list[Row]:
    data = bodies(n)
    mode = mode_name(scripting)
    out = []
    for what, side in (("enqueue (one at a time)", kq_enqueue), ("claim + ack (one at a time)", kq_claim_ack)):
        runs = rounds_of(
            r,
            {
                "unset": side(r, data, scripting=scripting),
                "retention": side(r, data, scripting=scripting, retention=RETENTION),
            },
            n,
            rounds,
        )
        out.append(
            row(f"{what}, retention={RETENTION:.0f} vs unset ({mode})", n, runs, "retention", "unset", min_ratio=0.97)
        )
        print(f"  done: {what} ({mode})", file=sys.stderr)
    return out


# -- part 2: the sweep beside purge, and a consumer of another queue --------------------


def consume(port: int, name: str, scripting: bool, stop: Any, ready: Any, go: Any, finished: Any) -> None:
    """Claim and ack one at a time on queue ``name`` until ``stop``; put each claim's start
    (time.monotonic, comparable across processes) and seconds. An empty queue is refilled
    (untimed), so the claims go on however long the others take."""
    r = redis.Redis(port=port)
    q = Queue(name, client=r, scripting=scripting)
    refill = bodies(REFILL)
    q.enqueue_many(refill)
    starts, seconds = array("d"), array("d")
    ready.release()
    go.wait()
    while not stop.is_set():
        t0 = time.monotonic()
        m = q.claim()
        took = time.monotonic() - t0
        if m is None:  # in small calls: its own long commands would count in the windows
            for i in range(0, REFILL, 50):
                q.enqueue_many(refill[i : i + 50])
            continue
        starts.append(t0)
        seconds.append(took)
        q.ack(m)
    finished.put((starts.tobytes(), seconds.tobytes()))


@dataclass
class Window:
    """One timed stretch: the other queue's claims during it and the slowest commands."""

    start: float
    end: float
    slow: list[Slow] = field(default_factory=list)


@dataclass
class Operation:
    """One operation over the rounds (part 2's rows)."""

    name: str
    mode: str
    messages: int
    seconds: list[float] = field(default_factory=list)  # per round
    longest_ms: list[float] = field(default_factory=list)  # per round: the slowest command
    longest: list[str] = field(default_factory=list)  # per round: what it was
    p50_ms: list[float] = field(default_factory=list)  # per round: the other queue's claims
    p99_ms: list[float] = field(default_factory=list)
    claims: list[int] = field(default_factory=list)
    vs_purge: list[float] = field(default_factory=list)  # the sweep's rate / purge's, per round
    targeted: bool = False

    @property
    def rates(self) -> list[float]:
        return [self.messages / s for s in self.seconds] if self.messages else []

    @property
    def passed(self) -> bool | None:
        if not self.targeted:
            return None
        return max(self.longest_ms) <= MAX_COMMAND_MS and max(self.p99_ms) < MAX_P99_MS

    def add(self, w: Window, latencies: list[float], seconds: float) -> None:
        self.seconds.append(seconds)
        worst = w.slow[0] if w.slow else Slow(0.0, "-")
        self.longest_ms.append(worst.ms)
        self.longest.append(worst.command)
        self.p50_ms.append(percentile(latencies, 0.5) * 1000)
        self.p99_ms.append(percentile(latencies, 0.99) * 1000)
        self.claims.append(len(latencies))


def fill(q: Queue, n: int, enqueued_at: float | None = None) -> None:
    """``n`` waiting messages, 1,000 a call; all enqueued at ``enqueued_at`` when given."""
    for chunk in chunks(bodies(n), 1000):
        q.enqueue_many(chunk, enqueued_at=None if enqueued_at is None else [enqueued_at] * len(chunk))


def sweep_rounds(
    r: redis.Redis, port: int, n: int, rounds: int, quiet: float, slower_than_us: int, scripting: bool
) -> list[Operation]:
    mode = mode_name(scripting)
    rows = {
        k: Operation(name, mode, m, targeted=k == "sweep")
        for k, name, m in (
            ("quiet", "nothing (the other queue's consumer alone)", 0),
            ("purge", "purge of waiting messages", n),
            ("sweep", "expiry sweep by a Reaper at its default interval", n),
            ("sweep_now", "expiry sweep by Reaper passes back to back", n),
            ("idle", "Reaper pass, none of the messages expired", n),
        )
    }
    r.flushall()
    stop = mp.get_context("spawn").Event()
    consumer = spawned(consume, (port, "other", scripting, stop), 1)
    windows: list[tuple[str, Window, float]] = []
    try:
        consumer.go.set()
        for i in range(rounds):
            with slowlog(r, slower_than_us) as slow:
                start = time.monotonic()
                time.sleep(quiet)
            windows.append(("quiet", Window(start, time.monotonic(), slow), quiet))

            purged = Queue("purged", client=r, scripting=scripting)
            fill(purged, n)
            with slowlog(r, slower_than_us) as slow:
                start = time.monotonic()
                expect(purged.purge(source="waiting"), n, "purge")
                end = time.monotonic()
            windows.append(("purge", Window(start, end, slow), end - start))

            swept = Queue("swept", client=r, scripting=scripting, retention=RETENTION)
            reaper = Reaper(queues=[swept])
            for key, paced in (("sweep", True), ("sweep_now", False)):
                fill(swept, n, enqueued_at=time.time() - AGE)
                passes = expired = 0
                with slowlog(r, slower_than_us) as slow:
                    start = time.monotonic()
                    while expired < n and passes <= n:  # a pass sweeps a bounded part
                        if paced:  # a pass every interval, as a running Reaper makes them
                            time.sleep(max(0.0, start + passes * reaper.interval - time.monotonic()))
                        expired += reaper.reap_once()[swept.name].expired
                        passes += 1
                    end = time.monotonic()
                expect(expired, n, "the sweep")
                expect(swept.length(), 0, "the sweep (left waiting)")
                windows.append((key, Window(start, end, slow), end - start))
                print(f"  {key}: {n / (end - start):,.0f} msg/s in {passes} passes", file=sys.stderr)

            fill(swept, n)  # as many again, fresh: what a pass costs while nothing expires
            with slowlog(r, slower_than_us) as slow:
                start = time.monotonic()
                result = reaper.reap_once()
                end = time.monotonic()
            expect(result[swept.name].expired, 0, "the pass over fresh messages")
            windows.append(("idle", Window(start, end, slow), end - start))
            expect(swept.purge(), n, "the fresh messages (purged)")
            print(f"  sweep ({mode}): round {i + 1}/{rounds} done", file=sys.stderr)
    finally:
        stop.set()
    (raw_starts, raw_seconds), *_ = consumer.results(timeout=60)
    starts, seconds = array("d"), array("d")
    starts.frombytes(raw_starts)
    seconds.frombytes(raw_seconds)
    for key, w, took in windows:
        rows[key].add(w, [s for t, s in zip(starts, seconds) if w.start <= t < w.end], took)
    purge = rows["purge"]
    for key in ("sweep", "sweep_now"):
        rows[key].vs_purge = [s / p for s, p in zip(rows[key].rates, purge.rates, strict=True)]
    return list(rows.values())


def sweep_table(ops: Sequence[Operation]) -> list[str]:
    def cells(o: Operation) -> list[object]:
        at = o.longest_ms.index(max(o.longest_ms))
        return [
            o.name,
            o.mode,
            f"{o.messages:,}" if o.messages else "-",
            Spread.of(o.seconds).text(".2f") if o.messages else "-",
            Spread.of(o.rates).text(",.0f") if o.messages else "-",
            Spread.of(o.vs_purge).text() if o.vs_purge else "-",
            f"{o.longest_ms[at]:.2f} ({o.longest[at]})",
            Spread.of(o.p50_ms).text(),
            Spread.of(o.p99_ms).text(),
            f"{sum(o.claims):,}",
            f"command <= {MAX_COMMAND_MS:g} ms, p99 < {MAX_P99_MS:g} ms" if o.targeted else "-",
            verdict(o.passed),
        ]

    return markdown_table(
        [
            "operation",
            "mode",
            "messages",
            "seconds min / median / max",
            "msg/s min / median / max",
            "rate vs purge",
            "longest command ms (worst round)",
            "other queue's claim p50 ms",
            "claim p99 ms",
            "claims timed",
            "target",
            "result",
        ],
        "llrrrrrrrrll",
        map(cells, ops),
    )


def main(argv: list[str] | None = None) -> int:
    ap = Options(__doc__, rounds=7)
    ap.add_argument("--messages", type=int, help=f"part 1's messages per side and round (default {MESSAGES:,})")
    ap.add_argument("--size", type=int, help=f"the messages swept and purged (default {SIZE:,})")
    ap.add_argument("--sweep-rounds", type=int, help="rounds of part 2 (default 3)")
    ap.add_argument("--slowlog-us", type=int, default=250, help="SLOWLOG keeps commands slower than this (default 250)")
    ap.add_argument("--mode", choices=sorted(MODES), default="scripted", help="which mode (default scripted)")
    args = ap.parse(argv)
    n = args.messages or (QUICK_MESSAGES if args.quick else MESSAGES)
    size = args.size or (QUICK_SIZE if args.quick else SIZE)
    sweeps = args.sweep_rounds or (1 if args.quick else 3)
    quiet = QUICK_QUIET if args.quick else QUIET
    logging.getLogger("keyqueue.reaper").setLevel(logging.WARNING)  # (a pass logs what it moved)
    rows: list[Row] = []
    ops: list[Operation] = []
    with throwaway_redis() as (server, r):
        line, info = about_line(r), about(r)
        for scripting in MODES[args.mode]:
            rows += operations(r, n, args.rounds, scripting)
            ops += sweep_rounds(r, server.port, size, sweeps, quiet, args.slowlog_us, scripting)
    met = all(t.passed is not False for t in rows) and all(o.passed is not False for o in ops)
    if args.json:
        print(
            json.dumps({**info, "operations": [asdict(t) for t in rows], "sweeps": [asdict(o) for o in ops]}, indent=2)
        )
    else:
        print("\n".join([line, "", *ratio_table(rows), "", *sweep_table(ops)]))
    return exit_status(args, met)


if __name__ == "__main__":
    sys.exit(main())
