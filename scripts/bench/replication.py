"""What replicated writes cost (Queue(min_replicas=1)): enqueue, enqueue_many, claim + ack one at
a time and in batches with ``min_replicas=1``, each against itself with ``min_replicas=0``,
on a primary with one replica on loopback (WAIT rides in the same round trip as the write,
so the difference is the replica's acknowledgement).

It starts its own primary and replica redis-servers; the rows are interleaved rounds
(``--rounds``, default 5) as in queue_ops.py, the table the same.

    .venv/bin/python scripts/bench/replication.py [--quick] [--json] [--rounds R]
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict

import redis
from harness import Options, Row, bodies, ratio_table, row, throwaway_redis
from queue_ops import FULL, QUICK, Counts, kq_claim_ack, kq_enqueue, kq_enqueue_many, rounds_of

from keyqueue.server import RedisServer


def replication(r: redis.Redis, counts: Counts, rounds: int) -> list[Row]:
    single, batch = bodies(counts.single), bodies(counts.batch // 4)
    out: list[Row] = []
    for name, n, make in (
        ("enqueue (one at a time)", counts.single, lambda **o: kq_enqueue(r, single, **o)),
        ("enqueue_many(100)", len(batch), lambda **o: kq_enqueue_many(r, batch, 100, **o)),
        ("claim + ack (one at a time)", counts.single, lambda **o: kq_claim_ack(r, single, **o)),
        ("claim_many(100) + ack_many", len(batch), lambda **o: kq_claim_ack(r, batch, 100, **o)),
    ):
        runs = rounds_of(
            r, {"unreplicated": make(), "replicated": make(min_replicas=1, replica_timeout=5.0)}, n, rounds
        )
        out.append(row(f"{name}, min_replicas=1 vs 0", n, runs, "replicated", "unreplicated"))
        print(f"  done: {name} replicated", file=sys.stderr)
    return out


def wait_for_sync(replica: RedisServer, timeout: float = 30.0) -> None:
    rr = redis.Redis(port=replica.port)
    try:
        end = time.monotonic() + timeout
        while rr.info("replication")["master_link_status"] != "up":
            if time.monotonic() > end:
                raise RuntimeError("the replica did not sync")
            time.sleep(0.05)
    finally:
        rr.close()


def main(argv: list[str] | None = None) -> int:
    args = Options(__doc__, rounds=5).parse(argv)
    # no 5 s wait before the replica's first (diskless) sync: it happens before any timing
    with (
        throwaway_redis(["--repl-diskless-sync-delay", "0"]) as (primary, r),
        RedisServer(["--replicaof", "127.0.0.1", str(primary.port)]) as replica,
    ):
        wait_for_sync(replica)
        rows = replication(r, QUICK if args.quick else FULL, args.rounds)
    if args.json:
        print(json.dumps([{**asdict(t), "ratio": t.ratio} for t in rows], indent=2))
    else:
        print(
            "\n".join(
                [
                    f"a primary and one replica on loopback, {args.rounds} interleaved rounds per row",
                    "",
                    *ratio_table(rows),
                ]
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
