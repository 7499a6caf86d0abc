"""Sharded queues on a Redis Cluster: how evenly one queue of 6 shards loads 3 primaries, and
the drain rate with 1, 3 and 6 shards on the cluster against one plain redis-server.

The cluster is three primaries (no replicas) of redis-server processes on free loopback
ports, formed by ``redis-cli --cluster create`` with the tests' own fixture, and stopped by
PID at the end. Each side, in every round: the cluster's primaries (or the plain server)
are flushed, the producer (this process) enqueues the messages with ``enqueue_many`` in
batches of 100, every node's INFO commandstats and CPU are reset / read, then 2 ``Worker``
processes (burst, a handler touching no Redis) drain the queue. The figure is the **drain
alone**: messages / seconds from the workers' start until the last of them finished; every
message is checked to have been handled once and the queue left empty.

1. Balance, 6 shards: per primary, its share of the queue's Redis time during the drain
   (the usec of its script calls in INFO commandstats, which include the commands the
   scripts run) and of the nodes' redis-server CPU (used_cpu_user + sys).
   The queue's name is chosen so its shards' slots fall on every primary (shards follow
   their slots; with an unlucky name one primary holds none, or 3 of the 6). Target: each
   primary's median share within 20 % of a third (0.267 to 0.4).
2. Throughput: 1, 3 and 6 shards on the cluster against an unsharded queue on one plain
   redis-server, interleaved rounds (``--rounds``, default 5), the ratio per round.

Every node and client share this machine's cores, so the drain cannot speed up here; the
balance is the figure that carries over to a cluster of hosts.

    .venv/bin/python scripts/bench/cluster.py [--messages N] [--rounds R] [--quick] [--json]
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from functools import partial
from typing import Any, Callable

import redis
from harness import (
    ROOT,
    Options,
    Spread,
    about,
    about_line,
    bodies,
    chunks,
    exit_status,
    interleaved,
    markdown_table,
    ratios,
    server_cpu,
    spawned,
    throwaway_redis,
    verdict,
)

from keyqueue import Message, Queue, Worker

PROCESSES = 2
BATCH = 100
MESSAGES, QUICK_MESSAGES = 100_000, 600
SHARD_COUNTS = (1, 3, 6)
#: The queue's script calls. INFO commandstats counts the commands a script runs as well,
#: inside the script's own usec: summing every command would count those twice.
SCRIPT_CALLS = tuple(f"cmdstat_{c}" for c in ("evalsha", "eval", "evalsha_ro", "eval_ro", "fcall", "fcall_ro"))
LOW, HIGH = 0.8 / 3, 1.2 / 3


def _drain(url: str, name: str, ready: Any, go: Any, finished: Any) -> None:
    handled = 0

    def handler(_: Message) -> None:
        nonlocal handled
        handled += 1

    q = Queue(name, url=url)
    q.stats()  # connected (and the cluster's slots known) before the clock starts
    ready.release()
    go.wait()
    Worker(q, handler).run(burst=True)
    finished.put((time.monotonic(), handled))


def redis_usec(node: redis.Redis) -> int:
    """The usec of the queue's script calls on the node since its stats were reset (the
    commands they run included); in the scripted mode the queue sends almost nothing else."""
    stats = node.info("commandstats")
    return sum(int(stats[k]["usec"]) for k in SCRIPT_CALLS if k in stats)


@dataclass(frozen=True)
class Drain:
    """One drain: its rate, the producer's enqueue rate, and per node its Redis usec and CPU
    seconds during the drain."""

    rate: float
    enqueue_rate: float
    usec: list[int]
    cpu: list[float]


def drain(client: Any, nodes: list[redis.Redis], url: str, name: str, shards: int, n: int) -> Drain:
    for node in nodes:
        node.flushall()
    q = Queue(name, client=client, shards=shards)
    start = time.monotonic()
    for chunk in chunks(bodies(n), BATCH):
        q.enqueue_many(chunk)
    enqueue_rate = n / (time.monotonic() - start)
    started = spawned(_drain, (url, name), PROCESSES)
    for node in nodes:
        node.config_resetstat()
    cpu = [server_cpu(node) for node in nodes]
    start = time.monotonic()
    started.go.set()
    ends = started.results(600)
    rate = n / (max(end for end, _ in ends) - start)
    cpu = [server_cpu(node) - before for node, before in zip(nodes, cpu, strict=True)]
    usec = [redis_usec(node) for node in nodes]
    handled, s = sum(h for _, h in ends), q.stats()
    if handled != n or s.waiting or s.processing:
        raise RuntimeError(f"{name} ({shards} shards): handled {handled} of {n}, {s.waiting + s.processing} left")
    return Drain(rate, enqueue_rate, usec, cpu)


@dataclass
class Balance:
    """One primary's share of the 6-shard queue's Redis time and CPU over the rounds."""

    primary: str
    shards: list[int]
    time_share: dict[str, float]
    cpu_share: dict[str, float]

    @property
    def passed(self) -> bool:
        return LOW <= self.time_share["median"] <= HIGH


@dataclass
class Side:
    side: str
    shards: int
    messages: int
    drain_msgs_per_s: float  # medians over the rounds
    enqueue_msgs_per_s: float
    redis_us_per_message: float  # summed over the nodes: the scripts' usec
    redis_cpu_us_per_message: float  # summed over the nodes: redis-server CPU
    vs_one_server: dict[str, float]


def measure(n: int, rounds: int) -> tuple[dict[str, Any], list[Balance], list[Side], str]:
    sys.path.insert(0, str(ROOT))  # the cluster fixture of the tests, run from anywhere
    from tests.support.cluster import Cluster, spread_name

    cluster = Cluster(primaries=3)
    try:
        with throwaway_redis() as (server, single):
            nodes = [redis.Redis(port=s.port) for s in cluster.nodes]
            names = {k: (spread_name(cluster.client, k, "bench") if k > 1 else "bench") for k in SHARD_COUNTS}
            sides: dict[str, Callable[[], Drain]] = {
                "one server": lambda: drain(single, [single], f"redis://127.0.0.1:{server.port}", "bench", 1, n)
            }
            for k in SHARD_COUNTS:
                sides[f"cluster, {k} shard" + "s" * (k > 1)] = partial(
                    drain, cluster.client, nodes, cluster.url, names[k], k, n
                )
            runs = interleaved(sides, rounds)
            for name, v in runs.items():
                print(f"  {name}: " + ", ".join(f"{d.rate:,.0f}" for d in v) + " msg/s", file=sys.stderr)
            place = {
                node.port: [s for s in range(6) if cluster.server_of(f"kq:{{{names[6]}#{s}}}:seq").port == node.port]
                for node in cluster.nodes
            }
            info, line = about(single), about_line(single)
            for r in nodes:
                r.close()
    finally:
        cluster.stop()
    six = runs["cluster, 6 shards"]
    balance = [
        Balance(
            f"127.0.0.1:{node.port}",
            place[node.port],
            Spread.of(d.usec[i] / sum(d.usec) for d in six).rounded(3),
            Spread.of(d.cpu[i] / sum(d.cpu) for d in six).rounded(3),
        )
        for i, node in enumerate(cluster.nodes)
    ]
    base = [d.rate for d in runs["one server"]]
    table = [
        Side(
            name,
            1 if name == "one server" else int(name.split()[1]),
            n,
            round(statistics.median(d.rate for d in v)),
            round(statistics.median(d.enqueue_rate for d in v)),
            round(statistics.median(sum(d.usec) / n for d in v), 1),
            round(statistics.median(sum(d.cpu) / n * 1e6 for d in v), 1),
            Spread.of(ratios([d.rate for d in v], base)).rounded(),
        )
        for name, v in runs.items()
    ]
    return {**info, "queue_names": names}, balance, table, line


def main(argv: list[str] | None = None) -> int:
    ap = Options(__doc__, rounds=5)
    ap.add_argument("--messages", type=int, help=f"messages per drain (default {MESSAGES:,})")
    args = ap.parse(argv)
    n = args.messages or (QUICK_MESSAGES if args.quick else MESSAGES)
    info, balance, table, line = measure(n, args.rounds)
    met = all(b.passed for b in balance)
    if args.json:
        out = {**info, "messages": n, "rounds": args.rounds, "worker_processes": PROCESSES}
        print(
            json.dumps({**out, "balance": [asdict(b) for b in balance], "drain": [asdict(s) for s in table]}, indent=2)
        )
        return exit_status(args, met)
    print(f"{line}, {n:,} messages, {PROCESSES} worker processes, {args.rounds} rounds\n")
    print(
        "\n".join(
            markdown_table(
                [
                    "primary",
                    "shards on it",
                    "share of the queue's Redis time min / median / max",
                    "share of Redis CPU min / median / max",
                    "target",
                    "result",
                ],
                "llrrll",
                (
                    [
                        b.primary,
                        ", ".join(map(str, b.shards)),
                        Spread(**b.time_share).text(".3f"),
                        Spread(**b.cpu_share).text(".3f"),
                        f"{LOW:.3f} to {HIGH:.3f}",
                        verdict(b.passed),
                    ]
                    for b in balance
                ),
            )
        )
    )
    print()
    print(
        "\n".join(
            markdown_table(
                [
                    "side",
                    "messages",
                    "drain msg/s (median)",
                    "vs one server min / median / max",
                    "Redis us per message (all nodes)",
                    "Redis CPU us per message (all nodes)",
                    "enqueue_many(100) msg/s",
                ],
                "lrrrrrr",
                (
                    [
                        s.side,
                        f"{s.messages:,}",
                        f"{s.drain_msgs_per_s:,.0f}",
                        Spread(**s.vs_one_server).text(),
                        f"{s.redis_us_per_message:.1f}",
                        f"{s.redis_cpu_us_per_message:.1f}",
                        f"{s.enqueue_msgs_per_s:,.0f}",
                    ]
                    for s in table
                ),
            )
        )
    )
    return exit_status(args, met)


if __name__ == "__main__":
    sys.exit(main())
