"""SQS wire API benchmark: boto3 against ``keyqueue serve --sqs`` and against moto's server.

1. Send: one boto3 client sends N messages of 100 bytes as SendMessageBatch calls of 10.
2. Receive + delete: N messages waiting (sent before the clock starts); one boto3 client
   loops ReceiveMessage(MaxNumberOfMessages=10) + DeleteMessageBatch until it has them all.
   Both run against keyqueue and against moto in interleaved rounds (moto, keyqueue, moto,
   keyqueue, ...), a fresh queue each round; each figure is the per-round ratio keyqueue /
   moto in messages per second, min / median / max over the rounds (target: median >= 5x).
3. Threads: 4 client threads, one boto3 client each, send batches of 10 to one keyqueue
   queue for a fixed number of batches each: messages per second in all (target >= 5,000).

Every server runs in its own process: a throwaway redis-server on a free loopback port,
``keyqueue serve --sqs`` on it (uvicorn, one process), and ``moto_server``; the clients run
in this process. Figures depend on the machine: the clients (boto3 signs and parses every
call in Python) share its cores with the servers.

Run from the repository root (a minute or two; --quick: seconds):

    .venv/bin/python scripts/bench_sqs.py [--quick] [--json] [--rounds R] [--messages N]
        [--threads T] [--batches B]

The exit status is 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Callable

import boto3

from keyqueue.server import RedisServer, free_port

KEY_ID, SECRET = "AKIABENCHMARK", "bench-secret"
BODY = "x" * 100
BIN = Path(sys.executable).parent


def client(endpoint: str) -> Any:
    return boto3.client("sqs", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id=KEY_ID,
                        aws_secret_access_key=SECRET)


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
            c.delete_message_batch(QueueUrl=url, Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]}
                                                          for i, m in enumerate(messages)])
            got += len(messages)


def timed(fn: Callable[[], None]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def fresh_queue(c: Any) -> str:
    return str(c.create_queue(QueueName=f"bench-{uuid.uuid4().hex[:8]}")["QueueUrl"])


def rate_send(c: Any, n: int) -> float:
    url = fresh_queue(c)
    return n / timed(lambda: send(c, url, n))


def rate_drain(c: Any, n: int) -> float:
    url = fresh_queue(c)
    send(c, url, n)  # before the clock
    return n / timed(lambda: drain(c, url, n))


def rate_threads(endpoint: str, threads: int, batches: int) -> float:
    setup = client(endpoint)
    url = fresh_queue(setup)
    clients = [client(endpoint) for _ in range(threads)]
    for c in clients:  # a first call each, so connection set-up is not timed
        c.get_queue_url(QueueName=url.rsplit("/", 1)[1])
    start = threading.Barrier(threads + 1)

    def work(c: Any) -> None:
        start.wait()
        send(c, url, batches * 10)

    pool = [threading.Thread(target=work, args=(c,)) for c in clients]
    for t in pool:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    for t in pool:
        t.join()
    took = time.perf_counter() - t0
    n = int(setup.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"])
            ["Attributes"]["ApproximateNumberOfMessages"])
    assert n == threads * batches * 10, (n, threads * batches * 10)
    return n / took


def spread(values: list[float]) -> dict[str, float]:
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--messages", type=int, default=1000)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--batches", type=int, default=300)
    args = ap.parse_args()
    if args.quick:
        args.messages, args.batches = 300, 30
    env = dict(os.environ, KEYQUEUE_SQS_ACCESS_KEY_ID=KEY_ID, KEYQUEUE_SQS_SECRET_ACCESS_KEY=SECRET)
    procs: list[subprocess.Popen[bytes]] = []
    with RedisServer() as redis_server:
        try:
            kq_port, moto_port = free_port(), free_port()
            procs.append(subprocess.Popen([str(BIN / "keyqueue"), "--url", redis_server.url, "serve", "--sqs",
                                           "--port", str(kq_port), "--log-level", "warning"], env=env,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            procs.append(subprocess.Popen([str(BIN / "moto_server"), "-H", "127.0.0.1", "-p", str(moto_port)],
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            wait_for_port(kq_port, procs[0])
            wait_for_port(moto_port, procs[1])
            sides = {"moto": client(f"http://127.0.0.1:{moto_port}"),
                     "keyqueue": client(f"http://127.0.0.1:{kq_port}")}
            for c in sides.values():  # warm both: connections, imports, first queue
                rate_send(c, 50)
            rates: dict[str, dict[str, list[float]]] = {"send": {}, "receive_delete": {}}
            for _ in range(args.rounds):
                for name, c in sides.items():  # moto first, then keyqueue, every round
                    rates["send"].setdefault(name, []).append(rate_send(c, args.messages))
                    rates["receive_delete"].setdefault(name, []).append(rate_drain(c, args.messages))
            threaded = [rate_threads(f"http://127.0.0.1:{kq_port}", args.threads, args.batches)
                        for _ in range(args.rounds)]
        finally:
            for p in procs:
                p.terminate()
                p.wait(10)
    report: dict[str, Any] = {}
    for what, by_side in rates.items():
        ratios = [k / m for k, m in zip(by_side["keyqueue"], by_side["moto"])]
        report[what] = {"keyqueue_msgs_per_s": spread(by_side["keyqueue"]), "moto_msgs_per_s": spread(by_side["moto"]),
                        "ratio": spread(ratios), "target": 5.0, "met": statistics.median(ratios) >= 5.0}
    report["threads_send"] = {"threads": args.threads, "msgs_per_s": spread(threaded), "target": 5000.0,
                              "met": statistics.median(threaded) >= 5000.0}
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(f"{args.rounds} interleaved rounds, {args.messages} messages of 100 bytes a round and side")
        print(f"{'measurement':<34} {'keyqueue msg/s':>16} {'moto msg/s':>12} {'keyqueue/moto min/med/max':>28}")
        for what, label in (("send", "SendMessageBatch(10)"), ("receive_delete", "ReceiveMessage(10)+DeleteBatch")):
            r = report[what]
            print(f"{label:<34} {r['keyqueue_msgs_per_s']['median']:>16,.0f} {r['moto_msgs_per_s']['median']:>12,.0f}"
                  f" {r['ratio']['min']:>9.1f} / {r['ratio']['median']:.1f} / {r['ratio']['max']:.1f}"
                  f"  {'met' if r['met'] else 'MISSED'} (>= 5x)")
        t = report["threads_send"]
        print(f"{f'{args.threads} threads, SendMessageBatch(10)':<34} {t['msgs_per_s']['median']:>16,.0f}"
              f" {'':>12} min {t['msgs_per_s']['min']:,.0f} max {t['msgs_per_s']['max']:,.0f}"
              f"  {'met' if t['met'] else 'MISSED'} (>= 5,000 msg/s)")
    return 0 if all(v["met"] for v in report.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
