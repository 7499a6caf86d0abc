"""What schedules cost: firing many due schedules against enqueueing as many messages, and
claims on a queue that holds many idle schedules against one that holds none. A throwaway
redis-server of its own; interleaved rounds (``--rounds``, default 5), the baseline first.

1. ``--size`` schedules (default 10,000) on one queue, ``every=--every`` seconds (default
   10, script-free 30) from one shared start, so that all fall due at the same instants:
   each round waits for the next one, then Reaper passes (``Reaper.reap_once``, what a
   running Reaper does every interval, with Queue objects of its own) run back to back
   until every schedule has fired its message; the table says how many passes that took (a
   pass fires a bounded number of schedules; a running Reaper makes one a second).
   Baseline, just before: ``enqueue_many`` of as many messages in one call on another
   queue. Targets: the fires' rate at least 0.5x enqueue_many's (median), and no Redis
   command over 10 ms during the passes (SLOWLOG, commands inside scripts too, worst round).
2. Claim + ack one at a time (``--messages``, default 10,000) on a queue holding ``--size``
   idle schedules (due in a day) against the same on a queue holding none (the same name
   under another prefix): by a Queue of its own, as a worker process has, and by the Queue
   that upserted them, as an application that declares its schedules at start and consumes
   with the same Queue (it restores them when it finds the queue's data lost). Target:
   ratio >= 0.97 each (median).

    .venv/bin/python scripts/bench/schedules.py [--quick] [--json] [--rounds R] [--size N]
        [--messages N] [--every S] [--mode scripted|script-free|both]

The exit status is 1 when a target is missed.
"""

from __future__ import annotations

import json
import logging
import math
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Callable

import redis
from harness import (
    MODES,
    QUEUE_NAME,
    Options,
    Prepare,
    Row,
    Spread,
    about,
    about_line,
    bodies,
    chunks,
    exit_status,
    expect,
    interleaved,
    markdown_table,
    mode_name,
    ratio_table,
    row,
    slowlog,
    throwaway_redis,
    timed,
    verdict,
)
from queue_ops import kq_claim_ack

from keyqueue import Queue
from keyqueue.reaper import Reaper

SIZE, QUICK_SIZE = 10_000, 300
MESSAGES, QUICK_MESSAGES = 10_000, 300
#: Seconds between the fire times every schedule of part 1 shares, by mode (the script-free
#: mode fires one schedule a round trip: its rounds need longer), and with --quick. A round's
#: fires must end before the next fire time.
EVERY, QUICK_EVERY = {True: 10.0, False: 30.0}, 2.0
#: Idle schedules fall due this long after they are made: never during the measurement.
IDLE_EVERY = 86_400.0
#: Passes part 1 gives up after (a broken firer must not loop for ever).
MAX_PASSES = 1000
MAX_COMMAND_MS = 10.0


def make_schedules(q: Queue, n: int, every: float, start: float | None = None) -> None:
    """``n`` schedules ``every`` seconds, each with a 100-byte body, all from ``start``."""
    for i, body in enumerate(bodies(n)):
        q.schedule(f"s{i}", every=every, body=body, start=start)


# -- part 1: firing ----------------------------------------------------------------------


@dataclass
class Firing:
    """Part 1 in one mode, per round: the fires' and enqueue_many's figures."""

    mode: str
    schedules: int
    every: float
    fire_rates: list[float] = field(default_factory=list)
    enqueue_rates: list[float] = field(default_factory=list)
    passes: list[int] = field(default_factory=list)
    longest_ms: list[float] = field(default_factory=list)  # the slowest command during the passes
    longest: list[str] = field(default_factory=list)
    enqueue_longest_ms: list[float] = field(default_factory=list)  # ... during enqueue_many

    @property
    def ratios(self) -> list[float]:
        return [f / e for f, e in zip(self.fire_rates, self.enqueue_rates, strict=True)]

    @property
    def passed(self) -> bool:
        return statistics.median(self.ratios) >= 0.5 and max(self.longest_ms) <= MAX_COMMAND_MS


def wait_for_fire_time(anchor: float, every: float) -> None:
    """Until just past the next fire time ``anchor + k * every`` (by this machine's clock,
    the server's too: they are one machine)."""
    now = time.time()
    due = anchor + math.ceil((now - anchor) / every) * every + 0.05
    while (left := due - time.time()) > 0:
        time.sleep(left)


def firing(r: redis.Redis, n: int, rounds: int, every: float, slower_than_us: int, scripting: bool) -> Firing:
    mode = mode_name(scripting)
    out = Firing(mode, n, every)
    r.flushall()
    fired = Queue("fired", client=r, scripting=scripting)
    plain = Queue("plain", client=r, scripting=scripting)
    # One start for all, one interval ahead: every schedule's first fire time is the start,
    # however long making them takes (within an interval).
    anchor = (math.floor(time.time() / every) + 1) * every
    made = timed(lambda: make_schedules(fired, n, every, anchor))
    print(f"  {n:,} schedules made in {made:.1f} s ({mode})", file=sys.stderr)
    data = bodies(n)
    reaper = Reaper(queues=[fired.name], client=r, scripting=scripting)  # Queue objects of its own, as a Reaper's
    for i in range(rounds):
        with slowlog(r, slower_than_us) as slow:
            out.enqueue_rates.append(n / timed(lambda: plain.enqueue_many(data)))
        out.enqueue_longest_ms.append(slow[0].ms if slow else 0.0)
        expect(plain.purge(), n, "enqueue_many")
        wait_for_fire_time(anchor, every)
        passes, seconds = 0, 0.0
        with slowlog(r, slower_than_us) as slow:
            while fired.length() < n and passes < MAX_PASSES:
                seconds += timed(reaper.reap_once)
                passes += 1
        got = fired.length()
        if got > n:
            raise RuntimeError(f"{got} messages from {n} schedules: a round took longer than --every {every:g} s")
        expect(got, n, "the fires")
        expect(fired.purge(), n, "the fires (purged)")
        out.fire_rates.append(n / seconds)
        out.passes.append(passes)
        out.longest_ms.append(slow[0].ms if slow else 0.0)
        out.longest.append(slow[0].command if slow else "-")
        print(
            f"  fires ({mode}): round {i + 1}/{rounds}: enqueue_many {out.enqueue_rates[-1]:,.0f} msg/s, "
            f"fires {out.fire_rates[-1]:,.0f} msg/s in {passes} passes, longest command "
            f"{out.longest_ms[-1]:.2f} ms ({out.longest[-1]})",
            file=sys.stderr,
        )
    return out


def firing_table(runs: list[Firing]) -> list[str]:
    def cells(f: Firing) -> list[object]:
        at = f.longest_ms.index(max(f.longest_ms))
        return [
            f"{f.schedules:,} due schedules (every {f.every:g} s) by Reaper passes vs enqueue_many",
            f.mode,
            f"{statistics.median(f.fire_rates):,.0f}",
            f"{statistics.median(f.enqueue_rates):,.0f}",
            Spread.of(f.ratios).text(),
            f"{min(f.passes)} / {max(f.passes)}",
            f"{f.longest_ms[at]:.2f} ({f.longest[at]})",
            f"{max(f.enqueue_longest_ms):.2f}",
            f"ratio >= 0.5, command <= {MAX_COMMAND_MS:g} ms",
            verdict(f.passed),
        ]

    return markdown_table(
        [
            "measurement",
            "mode",
            "fires msg/s",
            "enqueue_many msg/s",
            "ratio min / median / max",
            "passes min / max",
            "longest command ms during the passes (worst round)",
            "... during enqueue_many",
            "target",
            "result",
        ],
        "llrrrrrrll",
        map(cells, runs),
    )


# -- part 2: claims beside idle schedules -----------------------------------------------


def idle_claims(r: redis.Redis, n: int, size: int, rounds: int, scripting: bool) -> list[Row]:
    """claim + ack on a queue with ``size`` idle schedules, by the Queue that upserted them
    and by another, vs the same name under another prefix with none; every run drains the
    messages it enqueued, so the server is not flushed between runs (the schedules stay)."""
    mode = mode_name(scripting)
    r.flushall()
    upserter = Queue(QUEUE_NAME, client=r, scripting=scripting, prefix="sched")
    made = timed(lambda: make_schedules(upserter, size, IDLE_EVERY))
    print(f"  {size:,} idle schedules made in {made:.1f} s ({mode})", file=sys.stderr)
    data = bodies(n)

    def by_upserter() -> Callable[[], None]:
        for chunk in chunks(data, 1000):
            upserter.enqueue_many(chunk)

        def work() -> None:
            done = 0
            while (m := upserter.claim()) is not None:
                done += upserter.ack(m)
            expect(done, n, "claim+ack")

        return work

    sides: dict[str, Prepare] = {
        "none": kq_claim_ack(r, data, scripting=scripting),
        "idle": kq_claim_ack(r, data, scripting=scripting, prefix="sched"),
        "upserter": by_upserter,
    }
    runs = interleaved({name: (lambda p=prepare: n / timed(p())) for name, prepare in sides.items()}, rounds)
    what = f"claim + ack (one at a time), {size:,} idle schedules on the queue"
    return [
        row(f"{what} vs none ({mode})", n, runs, "idle", "none", min_ratio=0.97),
        row(f"{what}, by the Queue that upserted them, vs none ({mode})", n, runs, "upserter", "none", min_ratio=0.97),
    ]


def main(argv: list[str] | None = None) -> int:
    ap = Options(__doc__, rounds=5)
    ap.add_argument("--size", type=int, help=f"schedules (default {SIZE:,})")
    ap.add_argument("--messages", type=int, help=f"part 2's messages per side and round (default {MESSAGES:,})")
    ap.add_argument(
        "--every", type=float, help="part 1's schedules' interval, s (default 10, script-free 30; 2 with --quick)"
    )
    ap.add_argument("--slowlog-us", type=int, default=250, help="SLOWLOG keeps commands slower than this (default 250)")
    ap.add_argument("--mode", choices=sorted(MODES), default="scripted", help="which mode (default scripted)")
    args = ap.parse(argv)
    size = args.size or (QUICK_SIZE if args.quick else SIZE)
    n = args.messages or (QUICK_MESSAGES if args.quick else MESSAGES)
    logging.getLogger("keyqueue.reaper").setLevel(logging.WARNING)
    fires: list[Firing] = []
    rows: list[Row] = []
    with throwaway_redis() as (_, r):
        line, info = about_line(r), about(r)
        for scripting in MODES[args.mode]:
            every = args.every or (QUICK_EVERY if args.quick else EVERY[scripting])
            fires.append(firing(r, size, args.rounds, every, args.slowlog_us, scripting))
            rows += idle_claims(r, n, size, args.rounds, scripting)
    met = all(f.passed for f in fires) and all(t.passed is not False for t in rows)
    if args.json:
        print(json.dumps({**info, "fires": [asdict(f) for f in fires], "claims": [asdict(t) for t in rows]}, indent=2))
    else:
        print("\n".join([line, "", *firing_table(fires), "", *ratio_table(rows)]))
    return exit_status(args, met)


if __name__ == "__main__":
    sys.exit(main())
