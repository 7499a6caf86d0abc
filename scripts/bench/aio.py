"""asyncio benchmark: keyqueue.aio against same-run baselines.

1. Async enqueue one at a time: ``await keyqueue.aio.Queue.enqueue(body)`` in a loop vs
   ``await redis.asyncio.Redis.lpush(key, body)`` in a loop (target >= 0.5x).
2. Async worker drain: one process, a no-op ``async def`` handler, N pre-filled messages,
   ``keyqueue.aio.Worker(..., concurrency=C).run(burst=True)`` vs arq and vs saq draining
   the same number of messages with the same concurrency (target: >= 3x the better of the
   two, per round). arq: a WorkerSettings with functions=[noop], burst=True,
   max_jobs=C (and a short ``poll_delay``, see ``--arq-poll-delay``); saq: Queue.from_url
   and a Worker(concurrency=C, burst=True). Each side fills its own queue with its own
   client before the clock starts; the clock runs from the call of the worker's run until
   the N-th handler call returns (so a library's burst-mode exit delay is not counted).
3. Many producers: 100 asyncio tasks on one loop, each awaiting ``enqueue`` M times on one
   ``keyqueue.aio.Queue``, vs 100 threads doing the same on one sync ``keyqueue.Queue``.

Every timed side runs in its own freshly spawned process (its own event loop, imports done
before the clock starts), against one throwaway redis-server on a free loopback port
(FLUSHALL before each side). Rounds are interleaved (baseline, keyqueue, baseline,
keyqueue...); each figure is the per-round ratio keyqueue / baseline, given as
min / median / max over the rounds; a target is met when the median ratio meets it.
Bodies are 100 bytes. arq and saq are not dependencies of keyqueue: install them beside it
without letting arq's ``redis<6`` pin downgrade redis-py (they run on redis-py 8):
``.venv/bin/pip install --no-deps "arq>=0.26" "saq>=0.18.1" croniter python-dateutil``;
without them, measurement 2 is skipped.

Run from the repository root (a few minutes on a 2-core machine; --quick: seconds):

    .venv/bin/python scripts/bench/aio.py [--quick] [--json] [--rounds R]
        [--enqueue N] [--drain N] [--producers P] [--per-producer M] [--concurrency C]

The exit status is 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import sys
import threading
import time
from typing import Any, Callable

import redis
from harness import (
    BODY_SIZE,
    QUEUE_NAME,
    RAW_QUEUE,
    Options,
    Row,
    Spread,
    exit_status,
    interleaved,
    markdown_table,
    row,
    throwaway_redis,
)

BODY = "x" * BODY_SIZE
SIDE_TIMEOUT = 300.0  # seconds: a side that takes longer is killed and the run fails


# -- the sides: each runs in a spawned process and returns its timed seconds -------------


class _Done:
    """What the drain handlers record: handled count, and when the N-th call returned."""

    target = 0
    count = 0
    end = 0.0
    finished: asyncio.Event | None = None


def _handled() -> None:
    _Done.count += 1
    if _Done.count == _Done.target:
        _Done.end = time.monotonic()
        assert _Done.finished is not None
        _Done.finished.set()


async def _await_drain(run: Any, start: float, timeout: float = SIDE_TIMEOUT) -> float:
    """Run the worker coroutine ``run``; the seconds until the N-th handler call returned."""
    _Done.finished = asyncio.Event()
    task = asyncio.ensure_future(run)
    await asyncio.wait_for(_Done.finished.wait(), timeout)
    await asyncio.wait_for(task, 30)  # the burst run returns by itself
    return _Done.end - start


async def _flush(url: str) -> None:
    r = redis.asyncio.Redis.from_url(url)
    await r.flushall()
    await r.aclose()


def side_raw_enqueue(url: str, n: int) -> float:
    async def main() -> float:
        await _flush(url)
        r = redis.asyncio.Redis.from_url(url)
        await r.ping()
        body = BODY.encode()
        start = time.perf_counter()
        for _ in range(n):
            await r.lpush(RAW_QUEUE, body)
        took = time.perf_counter() - start
        assert await r.llen(RAW_QUEUE) == n
        await r.aclose()
        return took

    return asyncio.run(main())


def side_kq_enqueue(url: str, n: int) -> float:
    from keyqueue import aio

    async def main() -> float:
        await _flush(url)
        async with aio.Queue(QUEUE_NAME, url=url) as q:
            await q.load()
            await q.enqueue(BODY)  # warm-up: loads the script
            await q.purge()
            body = BODY.encode()
            start = time.perf_counter()
            for _ in range(n):
                await q.enqueue(body)
            took = time.perf_counter() - start
            assert await q.length() == n
        return took

    return asyncio.run(main())


async def kq_noop(message: Any) -> None:
    _handled()


def side_kq_drain(url: str, n: int, concurrency: int) -> float:
    from keyqueue import aio

    async def main() -> float:
        await _flush(url)
        _Done.target = n
        async with aio.Queue(QUEUE_NAME, url=url) as q:
            for i in range(0, n, 1000):
                await q.enqueue_many([BODY] * min(1000, n - i))
            worker = aio.Worker(q, kq_noop, concurrency=concurrency)
            start = time.monotonic()
            took = await _await_drain(worker.run(burst=True), start)
            assert await q.length() == 0, "keyqueue: messages left"
        return took

    return asyncio.run(main())


async def arq_noop(ctx: dict[str, Any], body: str) -> None:
    _handled()


def side_arq_drain(url: str, n: int, concurrency: int, poll_delay: float) -> float:
    from arq.connections import RedisSettings, create_pool
    from arq.worker import create_worker

    class WorkerSettings:
        functions = [arq_noop]
        burst = True
        max_jobs = concurrency
        poll_delay = 0.5  # replaced below
        handle_signals = False

    WorkerSettings.poll_delay = poll_delay

    async def main() -> float:
        await _flush(url)
        _Done.target = n
        settings = RedisSettings.from_dsn(url)
        pool = await create_pool(settings)
        for i in range(0, n, 100):
            await asyncio.gather(*(pool.enqueue_job("arq_noop", BODY) for _ in range(min(100, n - i))))
        assert await pool.zcard("arq:queue") == n
        worker = create_worker(WorkerSettings, redis_settings=settings)  # type: ignore[arg-type]
        start = time.monotonic()
        took = await _await_drain(worker.async_run(), start)
        assert await pool.zcard("arq:queue") == 0, "arq: jobs left"
        await worker.close()
        await pool.aclose()
        return took

    return asyncio.run(main())


async def saq_noop(ctx: dict[str, Any], *, body: str) -> None:
    _handled()


def side_saq_drain(url: str, n: int, concurrency: int) -> float:
    import logging

    from saq import Queue as SaqQueue
    from saq import Worker as SaqWorker

    # burst mode cancels saq's sleeping upkeep tasks at exit, and warns about it
    logging.getLogger("saq").setLevel(logging.ERROR)

    async def main() -> float:
        await _flush(url)
        _Done.target = n
        queue = SaqQueue.from_url(url)
        await queue.connect()
        for i in range(0, n, 100):
            await asyncio.gather(*(queue.enqueue("saq_noop", body=BODY) for _ in range(min(100, n - i))))
        assert await queue.count("queued") == n
        # burst mode needs a positive dequeue_timeout: the wait for "empty" before it exits
        worker = SaqWorker(queue, functions=[saq_noop], concurrency=concurrency, burst=True, dequeue_timeout=0.05)
        worker.SIGNALS = []  # no signal handlers: a benchmark subprocess
        start = time.monotonic()
        took = await _await_drain(worker.start(), start)
        assert await queue.count("queued") == 0, "saq: jobs left"
        await queue.disconnect()
        return took

    return asyncio.run(main())


def side_threads_produce(url: str, producers: int, per: int) -> float:
    from keyqueue import Queue

    redis.Redis.from_url(url).flushall()
    q = Queue(QUEUE_NAME, url=url)
    q.enqueue(BODY)  # warm-up: settings and script
    q.purge()
    body = BODY.encode()
    gate = threading.Barrier(producers + 1)

    def produce() -> None:
        gate.wait()
        for _ in range(per):
            q.enqueue(body)

    threads = [threading.Thread(target=produce) for _ in range(producers)]
    for t in threads:
        t.start()
    gate.wait()
    start = time.perf_counter()
    for t in threads:
        t.join()
    took = time.perf_counter() - start
    assert q.length() == producers * per
    q.client.close()
    return took


def side_tasks_produce(url: str, producers: int, per: int) -> float:
    from keyqueue import aio

    async def main() -> float:
        await _flush(url)
        async with aio.Queue(QUEUE_NAME, url=url) as q:
            await q.enqueue(BODY)  # warm-up: settings and script
            await q.purge()
            body = BODY.encode()

            async def produce() -> None:
                for _ in range(per):
                    await q.enqueue(body)

            start = time.perf_counter()
            await asyncio.gather(*(produce() for _ in range(producers)))
            took = time.perf_counter() - start
            assert await q.length() == producers * per
        return took

    return asyncio.run(main())


def _child(side: Callable[..., float], args: tuple[Any, ...], out: Any) -> None:
    try:
        out.put(("ok", side(*args)))
    except BaseException as exc:  # reported by the parent
        out.put(("error", f"{type(exc).__name__}: {exc}"))


def run_side(side: Callable[..., float], *args: Any) -> float:
    """Seconds the side took, measured in a fresh spawned process."""
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    p = ctx.Process(target=_child, args=(side, args, out), daemon=True)
    p.start()
    try:
        status, value = out.get(timeout=SIDE_TIMEOUT + 60)
    except Exception:
        p.kill()
        p.join()
        raise RuntimeError(f"{side.__name__} gave no result within {SIDE_TIMEOUT + 60:.0f} s") from None
    p.join(30)
    if p.is_alive():
        p.kill()
        p.join()
    if status != "ok":
        raise RuntimeError(f"{side.__name__}: {value}")
    return float(value)


def rates(
    sides: dict[str, tuple[Callable[..., float], tuple[Any, ...]]], n: int, rounds: int, label: str
) -> dict[str, list[float]]:
    """msg/s of every side in every round, each run in a process of its own."""
    return interleaved(
        {k: (lambda s=side, a=args: n / run_side(s, *a)) for k, (side, args) in sides.items()}, rounds, label
    )


# -- reporting ----------------------------------------------------------------------------


def summary(baseline: str, t: Row) -> dict[str, Any]:
    s = Spread.of(t.ratios).rounded()
    return {
        "name": t.name,
        "messages": t.messages,
        "baseline": baseline,
        "median_msgs_per_s": {"keyqueue": round(t.keyqueue_msgs_per_s), "baseline": round(t.baseline_msgs_per_s)},
        "ratio_min": s["min"],
        "ratio_median": s["median"],
        "ratio_max": s["max"],
        "rounds": len(t.ratios),
        "target": t.min_ratio,
        "met": t.passed,
    }


def drain_skipped() -> str | None:
    """Why measurement 2 cannot run here, or None."""
    import importlib.util

    for module, why in (
        ("arq", "arq is not installed (see this script's docstring)"),
        ("saq", "saq is not installed (see this script's docstring)"),
        ("keyqueue.worker.tasks", "keyqueue.aio.Worker does not exist in this checkout"),
    ):
        if importlib.util.find_spec(module) is None:
            return why
    return None


def measure(args: argparse.Namespace, url: str) -> list[tuple[str, Row]]:
    """(the baseline's name, the row) of every figure."""
    figures = []
    # 1. enqueue one at a time
    runs = rates(
        {"baseline": (side_raw_enqueue, (url, args.enqueue)), "keyqueue": (side_kq_enqueue, (url, args.enqueue))},
        args.enqueue,
        args.rounds,
        "enqueue",
    )
    figures.append(
        (
            "redis.asyncio LPUSH",
            row("async enqueue, one at a time", args.enqueue, runs, "keyqueue", "baseline", min_ratio=0.5),
        )
    )

    # 2. worker drain
    skipped = drain_skipped()
    if skipped is None:
        c = args.concurrency
        runs = rates(
            {
                "arq": (side_arq_drain, (url, args.drain, c, args.arq_poll_delay)),
                "saq": (side_saq_drain, (url, args.drain, c)),
                "keyqueue": (side_kq_drain, (url, args.drain, c)),
            },
            args.drain,
            args.rounds,
            "drain",
        )
        runs["better of arq, saq"] = [max(a, s) for a, s in zip(runs["arq"], runs["saq"])]
        for base, target in (("arq", None), ("saq", None), ("better of arq, saq", 3.0)):
            figures.append(
                (
                    base,
                    row(f"async worker drain, concurrency {c}", args.drain, runs, "keyqueue", base, min_ratio=target),
                )
            )
    else:
        print(f"  drain: SKIPPED, {skipped}", file=sys.stderr)

    # 3. many producers
    p, m = args.producers, args.per_producer
    runs = rates(
        {"baseline": (side_threads_produce, (url, p, m)), "keyqueue": (side_tasks_produce, (url, p, m))},
        p * m,
        args.rounds,
        "producers",
    )
    figures.append(
        (
            f"sync keyqueue.Queue in {p} threads",
            row(f"{p} producers: asyncio tasks vs threads", p * m, runs, "keyqueue", "baseline"),
        )
    )
    return figures


def main(argv: list[str] | None = None) -> int:
    ap = Options(__doc__, rounds=3)
    ap.add_argument("--enqueue", type=int, default=20_000, help="messages of measurement 1")
    ap.add_argument("--drain", type=int, default=10_000, help="messages of measurement 2")
    ap.add_argument("--producers", type=int, default=100, help="tasks / threads of measurement 3")
    ap.add_argument("--per-producer", type=int, default=200, help="messages per producer (3)")
    ap.add_argument("--concurrency", type=int, default=10, help="handlers at once in every worker (2)")
    ap.add_argument(
        "--arq-poll-delay", type=float, default=0.0, help="arq's poll_delay (its default 0.5 s idles between batches)"
    )
    args = ap.parse(argv)
    if args.quick:
        args.enqueue, args.drain, args.per_producer = 200, 200, 2
    with throwaway_redis() as (server, _):
        figures = measure(args, server.url)
    results = [summary(base, t) for base, t in figures]
    if args.json:
        print(
            json.dumps(
                {
                    "rounds": args.rounds,
                    "concurrency": args.concurrency,
                    "arq_poll_delay": args.arq_poll_delay,
                    "results": results,
                },
                indent=2,
            )
        )
    else:
        print(
            "\n".join(
                markdown_table(
                    [
                        "measurement",
                        "messages",
                        "baseline",
                        "keyqueue msg/s (median)",
                        "baseline msg/s (median)",
                        f"ratio min / median / max ({args.rounds} rounds)",
                        "target",
                    ],
                    "lrlrrrr",
                    (
                        [
                            t.name,
                            f"{t.messages:,}",
                            base,
                            f"{round(t.keyqueue_msgs_per_s):,}",
                            f"{round(t.baseline_msgs_per_s):,}",
                            Spread.of(t.ratios).text(),
                            "-" if t.min_ratio is None else f">= {t.min_ratio:g} ({'met' if t.passed else 'MISSED'})",
                        ]
                        for base, t in figures
                    ),
                )
            )
        )
    return exit_status(args, all(t.passed is not False for _, t in figures))


if __name__ == "__main__":
    sys.exit(main())
