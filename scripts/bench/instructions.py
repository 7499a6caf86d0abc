"""Instructions redis-server runs per delivered message (valgrind's callgrind): a measure of
Redis CPU that does not drift with the machine's speed, for changes of a few per cent that
the timed benchmarks cannot resolve on a host whose speed swings by 2x.

One client claims 100 and acks them, as the worker does, until the queue is empty; the
server runs under callgrind, whose counters are dumped (and zeroed) just before the drain
and just after it, so the figure is the drain's alone: every instruction of redis-server's
user space (commands, Lua, replies, its event loop), not the kernel's. Sides:

- **Streams**: a Redis Streams consumer group, XREADGROUP COUNT 100 and one XACK of each
  batch (``redis_cpu.py``);
- **floor**: the layout floor's claim and ack scripts (``redis_cpu.py``);
- **keyqueue**: ``claim_many(100)`` + ``ack_many`` of ungrouped messages;
- **grouped**: the same over messages spread over G groups (``group_concurrency`` 1), as
  the batched row of ``groups.py``.

Counts repeat to within about 3 % from run to run. Neither the kernel's share (the
sockets) is counted nor what an instruction costs in time: the scripts' Lua runs fewer
instructions a microsecond than Streams' C, so the timed ratios of ``redis_cpu.py`` run
higher than these. Under callgrind the server runs some 50x
slower, so the counts are small (5,000 messages a side by default).

    .venv/bin/python scripts/bench/instructions.py [--quick] [--json] [--messages N] [--groups G] [--fires] [--variants]

``--fires`` adds schedule fires against ``enqueue_many``: the instructions per message of one
``enqueue_many`` of N messages, and of the looks of one reap that fire N due ``every``
schedules (each with its own body; a fake clock moves past their fire time): sharing one
fire time, as ``schedules.py`` makes them (the figure whose timed ratio it measures), and
each with a fire time of its own.

``--variants`` adds what keyqueue runs beyond the floor, one thing at a time: the shipped
claim and ack scripts, called as ``claim_many`` and ``ack_many`` call them, against the
variants of ``redis_cpu.py`` each without one thing (not correct queues).

Needs valgrind on PATH (``apt-get install valgrind``).
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
import time
from typing import Callable

import redis
from harness import QUEUE_NAME, Options, about, about_line, bodies, markdown_table
from redis_cpu import GROUP, STREAM, WITHOUT, edited, fill, floor_drain, scripts_drain, streams_drain

from keyqueue import Queue
from keyqueue.backends.scripted.scripts import script_source
from keyqueue.server import RedisServer

BATCH = 100
LABELS = {
    "streams": "Redis Streams consumer group (XREADGROUP COUNT 100 + XACK)",
    "floor": "layout floor (bare claim + ack scripts)",
    "keyqueue": "keyqueue claim_many(100) + ack_many",
    "grouped": "the same, grouped",
}


class CallgrindServer(RedisServer):
    """A redis-server run under callgrind; ``counted()`` is the instructions since the last call."""

    def __init__(self) -> None:
        super().__init__()
        wrapper = os.path.join(self.dir, "redis-under-callgrind")
        with open(wrapper, "w") as f:
            f.write(
                f'#!/bin/sh\nexec valgrind --tool=callgrind --callgrind-out-file={self.dir}/cg.%p "{self.binary}" "$@"\n'
            )
        os.chmod(wrapper, 0o755)
        self.binary = wrapper

    def counted(self) -> int:
        assert self.proc is not None
        before = set(glob.glob(f"{self.dir}/cg.*"))
        subprocess.run(
            ["callgrind_control", "--dump", str(self.proc.pid)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            check=True,
        )
        end = time.monotonic() + 60
        while not (new := set(glob.glob(f"{self.dir}/cg.*")) - before):
            if time.monotonic() > end:
                raise RuntimeError("callgrind wrote no dump")
            time.sleep(0.05)
        (path,) = new
        while True:  # (the file is complete once its totals line is there)
            with open(path) as f:
                for line in f:
                    if line.startswith("totals:"):
                        return int(line.split()[1])
            time.sleep(0.05)


def filled(r: redis.Redis, side: str, n: int, groups: int) -> Callable[[], int]:
    """The side's messages enqueued; returns its drain."""
    data = bodies(n)
    if side == "streams":
        fill(r, side, data)
        r.xgroup_create(STREAM, GROUP, id="0")
        return lambda: streams_drain(r)
    if side == "floor":
        fill(r, side, data)
        return lambda: floor_drain(r)
    q = Queue(QUEUE_NAME, client=r)
    q._core.claim_reaping = False  # (nothing to reap: the same work on every side)
    if side == "grouped":
        for g in range(groups):
            q.enqueue_many(data[g::groups], group=f"g{g}")
    else:
        for i in range(0, n, 1000):
            q.enqueue_many(data[i : i + 1000])

    def drain() -> int:
        done = 0
        while got := q.claim_many(BATCH):
            done += q.ack_many(got)
        return done

    return drain


def measure(server: CallgrindServer, r: redis.Redis, side: str, n: int, groups: int) -> float:
    r.flushall()
    drain = filled(r, side, n, groups)
    server.counted()
    done = drain()
    counted = server.counted()
    if done != n:
        raise RuntimeError(f"{side}: {done} of {n} delivered")
    return counted / n


def variant(server: CallgrindServer, r: redis.Redis, scripts: tuple[str, str], n: int) -> float:
    """Instructions per message of a drain by these claim and ack scripts (as redis_cpu.py's
    one-client breakdown calls them)."""
    r.flushall()
    claim, ack = (r.script_load(s) for s in scripts)
    filled(r, "keyqueue", n, 0)
    server.counted()
    done = scripts_drain(r, claim, ack)
    counted = server.counted()
    if done != n:
        raise RuntimeError(f"acked {done} of {n}")
    return counted / n


#: How the schedules of ``--fires`` are made.
FIRE_KINDS = {
    "one start": "one start, so one fire time (as schedules.py)",
    "own anchor": "no start, each made a ms after the one before (a fire time of its own)",
    "own start": "each with a start of its own (a fire time and a definition of its own)",
}


def fires(server: CallgrindServer, r: redis.Redis, n: int) -> tuple[float, list[float]]:
    """Instructions per message of enqueue_many(n), and of firing n due schedules: sharing
    one start (so one fire time), each made a ms after the one before without a start (a
    fire time of its own, one definition), each with a start of its own (a definition of
    its own)."""
    now = [1_700_000_000.0]

    def clock() -> float:
        return now[0]

    r.flushall()
    data = bodies(n)
    plain = Queue("plain", client=r, clock=clock)
    plain.enqueue_many(data[:10])  # (the scripts loaded and run once)
    server.counted()
    plain.enqueue_many(data)
    per_message = server.counted() / n
    per_fire = []
    for kind in FIRE_KINDS:
        r.flushall()
        upserter = Queue("fired", client=r, clock=clock)
        first = now[0]
        for i, body in enumerate(data):
            if kind == "one start":
                upserter.schedule(f"s{i}", every=3600, body=body, start=first + 1)
            elif kind == "own anchor":
                now[0] += 0.001
                upserter.schedule(f"s{i}", every=3600, body=body)
            else:
                upserter.schedule(f"s{i}", every=3600, body=body, start=first + 1 + i * 0.001)
        now[0] = first + (3601 if kind == "own anchor" else 2) + n * 0.001
        fired = Queue("fired", client=r, clock=clock)  # (a Queue of its own, as a Reaper's: no upserts to heal)
        server.counted()
        got = fired._run(lambda: fired._core.fire_due(3600.0))
        per_fire.append(server.counted() / n)
        if got != n:
            raise RuntimeError(f"fired {got} of {n}")
    return per_message, per_fire


def main(argv: list[str] | None = None) -> int:
    opts = Options(__doc__)
    opts.add_argument("--messages", type=int, help="messages a side (default 5,000; --quick 300)")
    opts.add_argument("--groups", type=int, help="groups of the grouped side (default 1,000; --quick 20)")
    opts.add_argument("--variants", action="store_true", help="also keyqueue's scripts without one thing at a time")
    opts.add_argument("--fires", action="store_true", help="also schedule fires against enqueue_many")
    args = opts.parse(argv)
    if not (shutil.which("valgrind") and shutil.which("callgrind_control")):
        print("instructions.py needs valgrind on PATH (apt-get install valgrind)", file=sys.stderr)
        return 2
    n = args.messages or (300 if args.quick else 5_000)
    groups = args.groups or (20 if args.quick else 1000)
    server = CallgrindServer()
    try:
        server.start(timeout=120)  # (valgrind starts slowly)
        r = redis.Redis(port=server.port)
        line, info = about_line(r), about(r)
        measure(server, r, "keyqueue", min(n, 300), groups)  # (the scripts loaded and run once)
        counts = {side: measure(server, r, side, n, groups) for side in LABELS}
        enqueued_fired = fires(server, r, n) if args.fires else None
        beyond: dict[str, float] = {}
        if args.variants:
            claim, ack = script_source("claim"), script_source("ack")
            shipped = variant(server, r, (claim, ack), n)
            for name, (claim_edits, ack_edits) in WITHOUT.items():
                beyond[name] = variant(server, r, (edited(claim, claim_edits), edited(ack, ack_edits)), n) - shipped
        r.close()
    finally:
        server.cleanup()
    if args.json:
        result = {
            "instructions_per_message": counts,
            "without_vs_shipped": beyond,
            "enqueue_many_and_fire": enqueued_fired,
        }
        print(json.dumps({**info, "messages": n, "groups": groups, **result}, indent=2))
        return 0
    print(line + f"; {n:,} messages a side, grouped over {groups:,} groups; redis-server under callgrind\n")
    rows = [
        (LABELS[side], f"{round(c):,}", *(f"{c / counts[base]:.3f}" for base in ("streams", "floor", "keyqueue")))
        for side, c in counts.items()
    ]
    head = ("instructions per delivered message", "redis-server", "vs Streams", "vs floor", "vs keyqueue ungrouped")
    print("\n".join(markdown_table(head, "lrrrr", rows)))
    if enqueued_fired:
        e, per_fire = enqueued_fired
        print()
        rows = [(f"enqueue_many({n:,})", f"{round(e):,}", "1.000")]
        for kind, f in zip(FIRE_KINDS, per_fire):
            rows.append((f"a reap firing {n:,} due schedules: {FIRE_KINDS[kind]}", f"{round(f):,}", f"{e / f:.3f}"))
        print(
            "\n".join(markdown_table(("instructions per message", "redis-server", "enqueue_many / this"), "lrr", rows))
        )
    if beyond:
        print()
        rows = [(f"without {name}", f"{round(d):+,}") for name, d in beyond.items()]
        print("\n".join(markdown_table(("keyqueue's scripts", "instructions a message vs shipped"), "lr", rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
