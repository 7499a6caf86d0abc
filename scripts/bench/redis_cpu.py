"""Redis CPU per delivered message: redis-server's own CPU time over a drain by
two worker processes whose handler touches no Redis, divided by the messages.

Redis runs every command on one core, so the Redis CPU a message costs sets how many
messages one queue can ever move, however many workers it has. Wall-clock rates on a busy
2-core machine are noisy; the server's CPU time per message much less so. Each round drains
a pre-filled queue once per side (on a freshly flushed server, the scripts loaded before
the clock starts), reading INFO ``used_cpu_user + used_cpu_sys`` before and after:

- **Streams**: a Redis Streams consumer group, XREADGROUP COUNT 100 and one XACK of each
  batch (context: the least any reliable consumer costs Redis).
- **floor**: the layout floor, a pair of benchmark-only scripts doing only what keyqueue's
  key layout itself requires per message, batched as the worker batches (100): claim takes
  the ids off the list, moves them from ``items`` to ``processing``, adds them to the timer
  bucket of their deadline, writes receives / receipt / deadline and reads the body; ack
  checks each receipt, removes the ids from ``processing`` and their timer bucket, and
  deletes the items. No type checks, no ownership check per id, no counters, no
  dead-lettering, no reaping, no self-healing reply.
- **keyqueue**: ``Worker(Queue(...))`` with default settings (batches of up to 100, one
  ack_many per batch, claim-time and worker reaping, heartbeats).
- **script-free**: the same Worker on ``Queue(..., scripting=False)``.

The enqueue before each drain is measured the same way (each side enqueuing in batches of
100: ``enqueue_many``, the floor's enqueue script, 100 pipelined XADDs), for the cost over
a message's whole life. The per-round ratios keyqueue / floor and keyqueue / Streams give
min / median / max; targets (scripted mode): at most 1.3x the floor and 4.5x Streams, on
the median. INFO commandstats over every drain gives each side's per-command costs: the
calls per message and microseconds per call of each command, and for the scripts, the time
EVALSHA took beyond the commands it ran (the scripts' own Lua work). Last, what keyqueue does
beyond the floor, one thing at a time: the shipped claim and ack scripts against variants
each without one of them (the ownership checks, fields of its own, the counters, the
replies that self-healing and claim-time reaping read), in one client claiming 100 and
acking them, as the worker does.

    .venv/bin/python scripts/bench/redis_cpu.py [--quick] [--json] [--messages N] [--rounds R]

The exit status is 1 when a target is missed.
"""

from __future__ import annotations

import functools
import json
import os
import statistics
import sys
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

import redis
from harness import (
    QUEUE_NAME,
    Options,
    Spread,
    about,
    about_line,
    bodies,
    exit_status,
    interleaved,
    markdown_table,
    ratios,
    server_cpu,
    spawned,
    throwaway_redis,
)

from keyqueue import Queue, Worker
from keyqueue.backends.scripted.scripts import SCRIPT_NAMES, claimed, script_source
from keyqueue.backends.scripted.settle import ack_args

STREAM, GROUP = "raw:stream", "g"
BATCH = 100  # the worker's largest batch (keyqueue.worker.rules.MAX_BATCH)
PROCESSES = 2
BREAKDOWN_MESSAGES = 20_000  # (the messages of the one-client breakdown)
VISIBILITY_MS, BUCKET_MS = 30_000, 60_000
TARGETS = {"floor": 1.3, "streams": 4.5}  # keyqueue (scripted) / side, at most, median
SIDES = ("streams", "floor", "keyqueue", "script-free")
LABELS = {
    "streams": "Redis Streams consumer group (XREADGROUP COUNT 100 + XACK)",
    "floor": "layout floor (bare claim + ack scripts, batches of 100)",
    "keyqueue": "keyqueue Worker (scripted)",
    "script-free": "keyqueue Worker (scripting=False)",
}

# -- the layout floor ------------------------------------------------------------------------

FLOOR = "floor"
FLOOR_BASE = "floor:{f}:"
FLOOR_KEYS = tuple(FLOOR_BASE + k for k in ("seq", "queue", "items", "processing", "timers"))

#: Enqueue a batch: INCRBY seq, one HSET a message (enqueue time, body), RPUSH, SADD.
FLOOR_ENQUEUE = """
local t = redis.call('TIME')
local now = string.format('%d', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
local n = #ARGV - 1
local first = redis.call('INCRBY', KEYS[1], n) - n
local item, ids = ARGV[1] .. 'item:', {}
for i = 1, n do
  local id = string.format('%d', first + i)
  redis.call('HSET', item .. id, 't', now, 'b', ARGV[i + 1])
  ids[i] = id
end
redis.call('RPUSH', KEYS[2], unpack(ids))
redis.call('SADD', KEYS[3], unpack(ids))
return n
"""

#: Claim up to ARGV[2]: the ids off the list, items -> processing, the timer bucket of the
#: deadline (and its index entry), receives / receipt / deadline written and the body read.
#: Returns id, receipt, body, ...
FLOOR_CLAIM = """
local ids = redis.call('LRANGE', KEYS[2], 0, tonumber(ARGV[2]) - 1)
if #ids == 0 then return {} end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local deadline = now + tonumber(ARGV[3])
local bucket = string.format('%d', math.floor(deadline / tonumber(ARGV[4])))
local deadline_s, suffix = string.format('%d', deadline), string.format('-%d', now)
redis.call('LTRIM', KEYS[2], #ids, -1)
redis.call('SREM', KEYS[3], unpack(ids))
redis.call('SADD', KEYS[4], unpack(ids))
redis.call('SADD', ARGV[1] .. 'timer:' .. bucket, unpack(ids))
redis.call('ZADD', KEYS[5], deadline_s, bucket)
local item, out = ARGV[1] .. 'item:', {}
for i = 1, #ids do
  local id = ids[i]
  local k = item .. id
  local v = redis.call('HMGET', k, 'b', 'r')
  local r = v[2] and tostring(tonumber(v[2]) + 1) or '1'
  local receipt = r .. suffix
  redis.call('HSET', k, 'r', r, 'c', receipt, 'd', deadline_s)
  out[3 * i - 2], out[3 * i - 1], out[3 * i] = id, receipt, v[1]
end
return out
"""

#: Ack id, receipt pairs (ARGV[3..]): each whose receipt is current leaves processing and its
#: timer bucket, and its item is deleted. Returns how many.
FLOOR_ACK = """
local item, bucket_ms = ARGV[1] .. 'item:', tonumber(ARGV[2])
local gone, keys, buckets, last, ids = {}, {}, {}, nil, nil
for i = 3, #ARGV, 2 do
  local id = ARGV[i]
  local k = item .. id
  local v = redis.call('HMGET', k, 'c', 'd')
  if v[1] == ARGV[i + 1] then
    gone[#gone + 1], keys[#keys + 1] = id, k
    if v[2] ~= last then  -- a batch's deadlines are mostly one
      last = v[2]
      local b = math.floor(tonumber(last) / bucket_ms)
      ids = buckets[b]
      if not ids then ids = {}; buckets[b] = ids end
    end
    ids[#ids + 1] = id
  end
end
if #gone == 0 then return 0 end
redis.call('SREM', KEYS[1], unpack(gone))
for b, members in pairs(buckets) do
  redis.call('SREM', ARGV[1] .. 'timer:' .. string.format('%d', b), unpack(members))
end
redis.call('DEL', unpack(keys))
return #gone
"""


def floor_drain(r: redis.Redis) -> int:
    claim, ack = (r.script_load(s) for s in (FLOOR_CLAIM, FLOOR_ACK))
    done = 0
    while got := r.execute_command("EVALSHA", claim, 5, *FLOOR_KEYS, FLOOR_BASE, BATCH, VISIBILITY_MS, BUCKET_MS):
        pairs = [x for i in range(0, len(got), 3) for x in (got[i], got[i + 1])]
        done += r.execute_command("EVALSHA", ack, 2, FLOOR_KEYS[3], FLOOR_KEYS[4], FLOOR_BASE, BUCKET_MS, *pairs)
    return done


# -- the other drains ------------------------------------------------------------------------


def streams_drain(r: redis.Redis) -> int:
    consumer = f"c{os.getpid()}"
    done = 0
    while got := r.xreadgroup(GROUP, consumer, {STREAM: ">"}, count=BATCH):
        ids = [entry_id for _, entries in got for entry_id, _ in entries]
        done += r.xack(STREAM, GROUP, *ids)
    return done


def worker_drain(url: str, scripting: bool) -> Callable[[], int]:
    """A Worker made (its settings read) before the clock starts; run() drains the queue."""
    handled = 0

    def handler(message: Any) -> None:
        nonlocal handled
        handled += 1

    worker = Worker(Queue(QUEUE_NAME, url=url, scripting=scripting), handler)

    def run() -> int:
        worker.run(burst=True)
        return handled

    return run


def _process(side: str, url: str, ready: Any, go: Any, finished: Any) -> None:
    if side in ("keyqueue", "script-free"):
        drain = worker_drain(url, side == "keyqueue")
    else:
        r = redis.Redis.from_url(url)
        drain = functools.partial(floor_drain if side == "floor" else streams_drain, r)
    ready.release()
    go.wait()
    finished.put(drain())


# -- filling ----------------------------------------------------------------------------------


def fill(r: redis.Redis, side: str, data: list[bytes]) -> None:
    """This side's messages, enqueued in batches of BATCH (the whole-life figure's enqueue)."""
    if side == "streams":
        for i in range(0, len(data), BATCH):
            pipe = r.pipeline(transaction=False)
            for body in data[i : i + BATCH]:
                pipe.xadd(STREAM, {"b": body})
            pipe.execute()
    elif side == "floor":
        sha = r.script_load(FLOOR_ENQUEUE)
        for i in range(0, len(data), BATCH):
            r.execute_command("EVALSHA", sha, 3, *FLOOR_KEYS[:3], FLOOR_BASE, *data[i : i + BATCH])
    else:
        q = Queue(QUEUE_NAME, client=r, scripting=side == "keyqueue")
        for i in range(0, len(data), BATCH):
            q.enqueue_many(data[i : i + BATCH])


def drained(r: redis.Redis, side: str) -> int:
    """What is left undelivered or unacknowledged: a broken side cannot look cheap."""
    if side == "streams":
        return int(r.xpending(STREAM, GROUP)["pending"]) + int(r.xinfo_groups(STREAM)[0]["lag"] or 0)
    if side == "floor":
        return int(r.llen(FLOOR_KEYS[1]) + r.scard(FLOOR_KEYS[3]))
    # (not stats().delayed: the script-free claim can leave a timer entry of an id another
    # worker took and acked meanwhile, a stale entry the reaper drops once its bucket is due)
    s = Queue(QUEUE_NAME, client=r).stats()
    return s.waiting + s.processing + s.dead + len(r.keys(f"kq:{{{QUEUE_NAME}}}:item:*"))


# -- one measurement ------------------------------------------------------------------------


#: Commands of the benchmark's own bookkeeping, left out of the per-command tables.
OWN = {"info", "config|resetstat", "config|set", "flushall", "script|load", "ping", "client|setinfo"}


@dataclass
class Sample:
    """One side in one round: Redis CPU in microseconds per message (enqueue, drain) and the
    commandstats of the drain (command -> calls, usec)."""

    enqueue_us: float
    drain_us: float
    commands: dict[str, tuple[int, int]] = field(default_factory=dict)


def measure(r: redis.Redis, url: str, side: str, data: list[bytes]) -> Sample:
    n = len(data)
    r.flushall()
    for name in SCRIPT_NAMES:  # compiled before the clock starts, as on a server in use
        r.script_load(script_source(name))
    before = server_cpu(r)
    fill(r, side, data)
    enqueue = server_cpu(r) - before
    if side == "streams":
        r.xgroup_create(STREAM, GROUP, id="0")
    started = spawned(_process, (side, url), PROCESSES)
    r.config_resetstat()
    before = server_cpu(r)
    started.go.set()
    handled = sum(started.results(900))
    drain = server_cpu(r) - before
    stats = r.info("commandstats")
    left = drained(r, side)
    if handled != n or left:
        raise RuntimeError(f"{side}: handled {handled} of {n}, {left} left")
    commands = {
        k[len("cmdstat_") :]: (int(v["calls"]), int(v["usec"]))
        for k, v in stats.items()
        if k[len("cmdstat_") :] not in OWN
    }
    return Sample(enqueue / n * 1e6, drain / n * 1e6, commands)


# -- what keyqueue does beyond the floor, one thing at a time ---------------------------------

_ONES = "(function() local t = {} for i = 1, #%s do t[i] = %d end return t end)()"

#: Variants of the shipped claim and ack scripts, each without one thing keyqueue does beyond
#: the layout floor, as (claim edits, ack edits). For this measurement only: they are not
#: correct queues. Each edit must match the shipped script once.
WITHOUT: dict[str, tuple[list[tuple[str, str]], list[tuple[str, str]]]] = {
    "the ownership rule's checks (SMISMEMBER of items and processing)": (
        [
            ("redis.pcall('SMISMEMBER', KEYS[2], unpack(heads))", _ONES % ("heads", 1)),
            ("redis.pcall('SMISMEMBER', KEYS[3], unpack(heads))", _ONES % ("heads", 0)),
        ],
        [("rcall('SMISMEMBER', KEYS[1], unpack(ids))", _ONES % ("ids", 1))],
    ),
    "reading n (a claim's HMGET of b, b1, t only)": (
        [
            (
                "marked and pcall_('HMGET', ik, 'b', 'b1', 't', 'n')",
                "marked and pcall_('HMGET', ik, 'b', 'b1', 't')",
            )
        ],
        [],
    ),
    "the counters (ack's HGET and HINCRBY)": (
        [],
        [
            ("redis.pcall('HGET', KEYS[3], 'acked')", "false"),
            ("rcall('HINCRBY', KEYS[3], 'acked', n)", "local _ = n"),
        ],
    ),
    "the self-healing and reaping replies (EXISTS config, ZRANGE timers)": (
        [
            ("checked(bad, 'ZRANGE', KEYS[4], 0, 0, 'WITHSCORES')", "{}"),
            ("rcall('EXISTS', KEYS[7]) == 0 and 1 or 0", "0"),
        ],
        [],
    ),
    "the reads of capabilities not in use (rate limits' config fields, the throttle, the group mark)": (
        [
            ("checked(bad, 'HMGET', KEYS[7], 'rate_limit', 'max_in_flight')", "{false, false}"),
            ("checked(bad, 'GET', KEYS[9])", "false"),
            ("redis.pcall('HMGET', KEYS[8], 'item_format', 'grouped')", "redis.pcall('HMGET', KEYS[8], 'item_format')"),
        ],
        [],
    ),
}
ALL_OF_THEM = "all of the above"


def edited(source: str, edits: list[tuple[str, str]]) -> str:
    for old, new in edits:
        assert source.count(old) == 1, f"the shipped script changed: update the variant edit {old!r}"
        source = source.replace(old, new)
    return source


@dataclass
class Breakdown:
    """Redis CPU per message of a claim(100) + ack loop in one client, per variant."""

    variant: str
    us_per_message: float  # median over the rounds
    vs_shipped: float  # us per message, this variant minus the shipped scripts


def scripts_drain(r: redis.Redis, claim_sha: str, ack_sha: str) -> int:
    """Drain the benchmark's queue by these claim and ack scripts, called with the arguments
    ``claim_many(BATCH)`` and ``ack_many`` give them, in one client; the messages acked."""
    k = Queue(QUEUE_NAME, client=r)._core.ops
    base = (k.keys.base, "")
    done = 0
    while got := claimed(
        r.execute_command(
            "EVALSHA", claim_sha, len(k.claim_keys), *k.claim_keys, *base, BATCH, VISIBILITY_MS, BUCKET_MS, ""
        )
    ).messages:
        pairs = ack_args([(m.id, m.receipt) for m in got], BUCKET_MS)
        done += r.execute_command("EVALSHA", ack_sha, len(k.ack_keys), *k.ack_keys, *base, *pairs)
    return done


def breakdown(r: redis.Redis, data: list[bytes], rounds: int) -> list[Breakdown]:
    """The shipped scripts, each variant of WITHOUT (and all of them at once) and the floor,
    in one client that claims BATCH and acks them, as the worker does, in interleaved rounds:
    how much of keyqueue's cost beyond the floor each thing it does takes."""
    claim, ack = script_source("claim"), script_source("ack")
    variants = {"shipped": (claim, ack)}
    for name, (claim_edits, ack_edits) in WITHOUT.items():
        variants[f"without {name}"] = (edited(claim, claim_edits), edited(ack, ack_edits))
    every = [WITHOUT[name] for name in WITHOUT]
    variants[f"without {ALL_OF_THEM}"] = (
        edited(claim, [e for c, _ in every for e in c]),
        edited(ack, [e for _, a in every for e in a]),
    )
    n = len(data)

    def run(name: str) -> float:
        r.flushall()
        if name == FLOOR:
            fill(r, FLOOR, data)
            before = server_cpu(r)
            if floor_drain(r) != n:
                raise RuntimeError("floor: not every message acked")
            return (server_cpu(r) - before) / n * 1e6
        shas = tuple(r.script_load(s) for s in variants[name])
        fill(r, "keyqueue", data)
        before = server_cpu(r)
        done = scripts_drain(r, shas[0], shas[1])
        if done != n:
            raise RuntimeError(f"{name}: acked {done} of {n}")
        return (server_cpu(r) - before) / n * 1e6

    runs = interleaved({name: (lambda v=name: run(v)) for name in [FLOOR, *variants]}, rounds)
    shipped = statistics.median(runs["shipped"])
    return [Breakdown(name, statistics.median(v), statistics.median(v) - shipped) for name, v in runs.items()]


# -- the tables ---------------------------------------------------------------------------


@dataclass
class CommandCost:
    command: str
    calls_per_message: float
    us_per_call: float
    us_per_message: float


#: Commands a client sends itself (anything else a side runs is called from its scripts).
TOP_LEVEL = {"evalsha", "xreadgroup", "xack", "blpop", "wait"}


def command_costs(samples: list[Sample], n: int) -> list[CommandCost]:
    """Per-command costs over every round of a side, most expensive first; for a scripted
    side, a last row with EVALSHA's time beyond the commands its scripts ran."""
    calls: dict[str, int] = {}
    usec: dict[str, int] = {}
    for s in samples:
        for cmd, (c, u) in s.commands.items():
            calls[cmd] = calls.get(cmd, 0) + c
            usec[cmd] = usec.get(cmd, 0) + u
    messages = n * len(samples)
    rows = [
        CommandCost(cmd, calls[cmd] / messages, usec[cmd] / calls[cmd], usec[cmd] / messages)
        for cmd in sorted(calls, key=lambda c: -usec[c])
        if calls[cmd]
    ]
    if "evalsha" in calls:
        inside = sum(u for cmd, u in usec.items() if cmd not in TOP_LEVEL)
        own = usec["evalsha"] - inside
        rows.append(
            CommandCost(
                "(EVALSHA beyond the commands inside: the scripts' own work)",
                calls["evalsha"] / messages,
                own / calls["evalsha"],
                own / messages,
            )
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = Options(__doc__, rounds=5)
    ap.add_argument("--messages", type=int, default=50_000)
    args = ap.parse(argv)
    n = 2_000 if args.quick else args.messages
    data = bodies(n)
    with throwaway_redis() as (server, r):
        head, info = about_line(r), about(r)
        runs = interleaved({side: (lambda s=side: measure(r, server.url, s, data)) for side in SIDES}, args.rounds)
        for i in range(args.rounds):
            print(
                f"  round {i + 1}: "
                + ", ".join(f"{s} {runs[s][i].drain_us:.2f}" for s in SIDES)
                + " us of Redis CPU per delivered message",
                file=sys.stderr,
            )
        parts = breakdown(r, data[:BREAKDOWN_MESSAGES], args.rounds)
    drain = {s: [x.drain_us for x in runs[s]] for s in SIDES}
    whole = {s: [x.enqueue_us + x.drain_us for x in runs[s]] for s in SIDES}
    vs = {base: Spread.of(ratios(drain["keyqueue"], drain[base])) for base in TARGETS}
    met = all(vs[base].median <= limit for base, limit in TARGETS.items())
    costs = {s: command_costs(runs[s], n) for s in SIDES}
    if args.json:
        print(
            json.dumps(
                {
                    **info,
                    "messages": n,
                    "rounds": args.rounds,
                    "processes": PROCESSES,
                    "sides": {
                        s: {
                            "drain_us_per_message": Spread.of(drain[s]).rounded(),
                            "enqueue_us_per_message": round(statistics.median(x.enqueue_us for x in runs[s]), 2),
                            "whole_life_us_per_message": Spread.of(whole[s]).rounded(),
                            "commands": [asdict(c) for c in costs[s]],
                        }
                        for s in SIDES
                    },
                    "keyqueue_vs": {base: vs[base].rounded() for base in TARGETS},
                    "targets_met": met,
                    "breakdown": [asdict(b) for b in parts],
                },
                indent=2,
            )
        )
        return exit_status(args, met)

    def against(side: str, base: str, values: dict[str, list[float]]) -> str:
        return Spread.of(ratios(values[side], values[base])).text()

    lines = [f"{head}, {n:,} messages drained by {PROCESSES} processes, {args.rounds} interleaved rounds", ""]
    lines += markdown_table(
        [
            "Redis CPU per delivered message",
            "us min / median / max",
            "vs floor min / median / max",
            "vs Streams min / median / max",
        ],
        "lrrr",
        (
            [LABELS[s], Spread.of(drain[s]).text(), against(s, "floor", drain), against(s, "streams", drain)]
            for s in SIDES
        ),
    )
    lines += [
        "",
        *markdown_table(
            ["keyqueue (scripted) / side, median", "target", "result"],
            "lll",
            (
                [f"vs {base}: {vs[base].median:.2f}", f"<= {limit}", "PASS" if vs[base].median <= limit else "FAIL"]
                for base, limit in TARGETS.items()
            ),
        ),
    ]
    lines += [
        "",
        *markdown_table(
            [
                "whole life (enqueue + claim + ack), us per message, median",
                "enqueue",
                "claim + ack",
                "whole life",
                "vs Streams",
            ],
            "lrrrr",
            (
                [
                    LABELS[s],
                    f"{statistics.median(x.enqueue_us for x in runs[s]):.2f}",
                    f"{statistics.median(drain[s]):.2f}",
                    f"{statistics.median(whole[s]):.2f}",
                    f"{statistics.median(ratios(whole[s], whole['streams'])):.2f}",
                ]
                for s in SIDES
            ),
        ),
    ]
    lines += [
        "",
        *markdown_table(
            [
                f"keyqueue beyond the floor, one thing at a time: one client, claim {BATCH} + ack, "
                f"{min(n, BREAKDOWN_MESSAGES):,} messages",
                "us per message, median",
                "vs shipped",
            ],
            "lrr",
            (
                [LABELS[FLOOR] if b.variant == FLOOR else b.variant, f"{b.us_per_message:.2f}", f"{b.vs_shipped:+.2f}"]
                for b in parts
            ),
        ),
    ]
    for s in SIDES:
        lines += [
            "",
            f"{LABELS[s]}: per command, over every round's drain",
            "",
            *markdown_table(
                ["command", "calls per message", "us per call", "us per message"],
                "lrrr",
                (
                    [c.command, f"{c.calls_per_message:.3f}", f"{c.us_per_call:.2f}", f"{c.us_per_message:.3f}"]
                    for c in costs[s]
                    if c.us_per_message >= 0.005 or c.command.startswith("(")
                ),
            ),
        ]
    print("\n".join(lines))
    return exit_status(args, met)


if __name__ == "__main__":
    sys.exit(main())
