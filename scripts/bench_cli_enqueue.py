"""Throughput of ``keyqueue enqueue QUEUE`` fed N lines on stdin (like ``seq 1 N | keyqueue
enqueue q``), through the real CLI process, on a redis-server of its own.

    .venv/bin/python scripts/bench_cli_enqueue.py [-n 1000000] [--no-scripting] [--ids FILE]

Ids go to /dev/null unless --ids names a file (or '-' for a pipe read by this script).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import redis

from keyqueue.server import RedisServer

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=1_000_000, help="lines to enqueue")
    ap.add_argument("--no-scripting", action="store_true", help="the script-free mode")
    ap.add_argument("--ids", default=os.devnull, help="where the printed ids go ('-': a pipe)")
    args = ap.parse_args()
    data = b"".join(b"%d\n" % i for i in range(1, args.n + 1))  # what `seq 1 N` writes
    with RedisServer() as server:
        cmd = [sys.executable, "-m", "keyqueue", "--url", server.url,
               *(["--no-scripting"] if args.no_scripting else []), "enqueue", "bench"]
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        lines = 0
        start = time.perf_counter()
        with open(os.devnull if args.ids == "-" else args.ids, "wb") as sink:
            proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, env=env, cwd=ROOT,
                                    stdout=subprocess.PIPE if args.ids == "-" else sink)
            if args.ids == "-":
                def count() -> None:
                    nonlocal lines
                    assert proc.stdout is not None
                    for _ in proc.stdout:
                        lines += 1
                reader = threading.Thread(target=count)
                reader.start()
            assert proc.stdin is not None
            proc.stdin.write(data)
            proc.stdin.close()
            rc = proc.wait()
            if args.ids == "-":
                reader.join()
        seconds = time.perf_counter() - start
        client = redis.Redis(port=server.port)
        waiting = client.scard("kq:{bench}:items")
        client.close()
    mode = "script-free" if args.no_scripting else "scripted"
    ids = f", {lines:,} ids read from its stdout" if args.ids == "-" else ""
    print(f"{args.n:,} lines ({mode}): exit {rc}, {waiting:,} waiting, {seconds:.2f}s, "
          f"{args.n / seconds:,.0f} messages/s{ids}")
    if rc != 0 or waiting != args.n:
        sys.exit(1)


if __name__ == "__main__":
    main()
