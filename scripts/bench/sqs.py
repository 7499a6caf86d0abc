"""SQS wire API benchmark: boto3 against ``keyqueue serve --sqs`` and against moto's server.

1. Send: one boto3 client sends N messages of 100 bytes as SendMessageBatch calls of 10.
2. Receive + delete: N messages waiting (sent before the clock starts); one boto3 client
   loops ReceiveMessage(MaxNumberOfMessages=10) + DeleteMessageBatch until it has them all.
   Both run against keyqueue and against moto in interleaved rounds (moto, keyqueue, moto,
   keyqueue, ...), a fresh queue each round; each figure is the per-round ratio keyqueue /
   moto in messages per second, min / median / max over the rounds (target: median >= 5x).
3. Threads: 4 client threads, one boto3 client each, send batches of 10 to one keyqueue
   queue for a fixed number of batches each: messages per second in all (target >= 5,000),
   with the CPU time the server process and this client process spent per call, which shows
   which side is the limit (boto3 signs, serialises and parses every call in Python, under
   one GIL for all 4 threads).
4. Processes: the same with 4 client processes instead of threads (no shared GIL), to show
   what the server takes when the client is not the limit (no target: for reading 3).

Every server runs in its own process: a throwaway redis-server on a free loopback port,
``keyqueue serve --sqs`` on it (uvicorn, one process), and ``moto_server``; the clients run
in this process. Figures depend on the machine: the clients (boto3 signs and parses every
call in Python) share its cores with the servers.

Run from the repository root (a minute or two; --quick: seconds):

    .venv/bin/python scripts/bench/sqs.py [--quick] [--json] [--rounds R] [--messages N]
        [--threads T] [--batches B]

The exit status is 1 when a target is missed.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import resource
import socket
import statistics
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import asdict
from pathlib import Path
from typing import Any

import boto3
from harness import BODY_SIZE, Options, Spread, exit_status, interleaved, ratios, throwaway_redis, timed

from keyqueue.server import free_port

KEY_ID, SECRET = "AKIABENCHMARK", "bench-secret"
BODY = "x" * BODY_SIZE
BIN = Path(sys.executable).parent


def client(endpoint: str) -> Any:
    return boto3.client(
        "sqs", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id=KEY_ID, aws_secret_access_key=SECRET
    )


def wait_for_port(port: int, proc: subprocess.Popen[bytes], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{proc.args[0]} exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"nothing listens on port {port} after {timeout} s")


def entries(n: int, start: int = 0) -> list[dict[str, str]]:
    return [{"Id": str(i), "MessageBody": BODY} for i in range(start, start + n)]


def send(c: Any, url: str, n: int) -> None:
    for i in range(0, n, 10):
        c.send_message_batch(QueueUrl=url, Entries=entries(min(10, n - i)))


def drain(c: Any, url: str, n: int) -> None:
    got = 0
    while got < n:
        messages = c.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1).get("Messages", [])
        if messages:
            c.delete_message_batch(
                QueueUrl=url,
                Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(messages)],
            )
            got += len(messages)


def fresh_queue(c: Any) -> str:
    return str(c.create_queue(QueueName=f"bench-{uuid.uuid4().hex[:8]}")["QueueUrl"])


def rate_send(c: Any, n: int) -> float:
    url = fresh_queue(c)
    return n / timed(lambda: send(c, url, n))


def rate_drain(c: Any, n: int) -> float:
    url = fresh_queue(c)
    send(c, url, n)  # before the clock
    return n / timed(lambda: drain(c, url, n))


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _process_sender(endpoint: str, url: str, n: int, start: Any, done: Any) -> None:
    c = client(endpoint)
    c.get_queue_url(QueueName=url.rsplit("/", 1)[1])
    start.wait()
    before = own_cpu()
    send(c, url, n)
    done.put(own_cpu() - before)


def rate_parallel(
    endpoint: str, server_pid: int, workers: int, batches: int, processes: bool
) -> tuple[float, float, float]:
    """Messages per second of ``workers`` senders (threads or processes), and the server's
    and the clients' CPU milliseconds per call."""
    setup = client(endpoint)
    url = fresh_queue(setup)
    n = batches * 10
    if processes:
        ctx = mp.get_context("spawn")
        start, done = ctx.Barrier(workers + 1), ctx.Queue()
        pool: list[Any] = [
            ctx.Process(target=_process_sender, args=(endpoint, url, n, start, done)) for _ in range(workers)
        ]
    else:
        clients = [client(endpoint) for _ in range(workers)]
        for c in clients:  # a first call each, so connection set-up is not timed
            c.get_queue_url(QueueName=url.rsplit("/", 1)[1])
        start = threading.Barrier(workers + 1)

        def work(c: Any) -> None:
            start.wait()
            send(c, url, n)

        pool = [threading.Thread(target=work, args=(c,)) for c in clients]
    for t in pool:
        t.start()
    start.wait()
    server0, client0, t0 = cpu_seconds(server_pid), own_cpu(), time.perf_counter()
    for t in pool:
        t.join()
    took = time.perf_counter() - t0
    server_cpu = cpu_seconds(server_pid) - server0
    client_cpu = sum(done.get() for _ in pool) if processes else own_cpu() - client0
    total = int(
        setup.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"])["Attributes"][
            "ApproximateNumberOfMessages"
        ]
    )
    assert total == workers * n, (total, workers * n)
    calls = workers * batches
    return total / took, server_cpu * 1000 / calls, client_cpu * 1000 / calls


def spread(values: list[float]) -> dict[str, float]:
    return asdict(Spread.of(values))


def main(argv: list[str] | None = None) -> int:
    ap = Options(__doc__, rounds=3)
    ap.add_argument("--messages", type=int, default=1000)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--batches", type=int, default=300)
    args = ap.parse(argv)
    if args.quick:
        args.messages, args.batches = 50, 5
    env = dict(os.environ, KEYQUEUE_SQS_ACCESS_KEY_ID=KEY_ID, KEYQUEUE_SQS_SECRET_ACCESS_KEY=SECRET)
    procs: list[subprocess.Popen[bytes]] = []
    with throwaway_redis() as (redis_server, _):
        try:
            kq_port, moto_port = free_port(), free_port()
            procs.append(
                subprocess.Popen(
                    [
                        str(BIN / "keyqueue"),
                        "--url",
                        redis_server.url,
                        "serve",
                        "--sqs",
                        "--port",
                        str(kq_port),
                        "--log-level",
                        "warning",
                    ],
                    env=env,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
            procs.append(
                subprocess.Popen(
                    [str(BIN / "moto_server"), "-H", "127.0.0.1", "-p", str(moto_port)],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
            wait_for_port(kq_port, procs[0])
            wait_for_port(moto_port, procs[1])
            sides = {"moto": client(f"http://127.0.0.1:{moto_port}"), "keyqueue": client(f"http://127.0.0.1:{kq_port}")}
            for c in sides.values():  # warm both: connections, imports, first queue
                rate_send(c, 50)
            runs = interleaved(
                {
                    f"{name} {what}": (lambda c=c, f=f: f(c, args.messages))
                    for name, c in sides.items()
                    for what, f in (("send", rate_send), ("receive_delete", rate_drain))
                },
                args.rounds,
            )
            endpoint = f"http://127.0.0.1:{kq_port}"
            threaded = [
                rate_parallel(endpoint, procs[0].pid, args.threads, args.batches, False) for _ in range(args.rounds)
            ]
            processed = [
                rate_parallel(endpoint, procs[0].pid, args.threads, args.batches, True) for _ in range(args.rounds)
            ]
        finally:
            for p in procs:
                p.terminate()
                p.wait(10)
    report: dict[str, Any] = {}
    for what in ("send", "receive_delete"):
        kq, moto = runs[f"keyqueue {what}"], runs[f"moto {what}"]
        ratio = ratios(kq, moto)
        report[what] = {
            "keyqueue_msgs_per_s": spread(kq),
            "moto_msgs_per_s": spread(moto),
            "ratio": spread(ratio),
            "target": 5.0,
            "met": statistics.median(ratio) >= 5.0,
        }
    for key, results in (("threads_send", threaded), ("processes_send", processed)):
        report[key] = {
            "senders": args.threads,
            "msgs_per_s": spread([r[0] for r in results]),
            "server_cpu_ms_per_call": statistics.median(r[1] for r in results),
            "client_cpu_ms_per_call": statistics.median(r[2] for r in results),
        }
    report["threads_send"].update(target=5000.0, met=report["threads_send"]["msgs_per_s"]["median"] >= 5000.0)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(f"{args.rounds} interleaved rounds, {args.messages} messages of 100 bytes a round and side")
        print(f"{'measurement':<34} {'keyqueue msg/s':>16} {'moto msg/s':>12} {'keyqueue/moto min/med/max':>28}")
        for what, label in (("send", "SendMessageBatch(10)"), ("receive_delete", "ReceiveMessage(10)+DeleteBatch")):
            r = report[what]
            print(
                f"{label:<34} {r['keyqueue_msgs_per_s']['median']:>16,.0f} {r['moto_msgs_per_s']['median']:>12,.0f}"
                f" {r['ratio']['min']:>9.1f} / {r['ratio']['median']:.1f} / {r['ratio']['max']:.1f}"
                f"  {'met' if r['met'] else 'MISSED'} (>= 5x)"
            )
        for key, label in (("threads_send", "threads"), ("processes_send", "processes")):
            t = report[key]
            verdict = ("  met" if t["met"] else "  MISSED") + " (>= 5,000 msg/s)" if "met" in t else ""
            print(
                f"{f'{args.threads} {label}, SendMessageBatch(10)':<34} {t['msgs_per_s']['median']:>16,.0f}"
                f" {'':>12} min {t['msgs_per_s']['min']:,.0f} max {t['msgs_per_s']['max']:,.0f}{verdict}"
            )
            print(
                f"{'':<34} CPU ms a call: server {t['server_cpu_ms_per_call']:.2f}, "
                f"clients {t['client_cpu_ms_per_call']:.2f}"
            )
    return exit_status(args, all(v.get("met", True) for v in report.values()))


if __name__ == "__main__":
    sys.exit(main())
