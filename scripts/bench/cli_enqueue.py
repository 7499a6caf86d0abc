"""Throughput of ``keyqueue enqueue QUEUE`` fed N lines on stdin (like ``seq 1 N | keyqueue
enqueue q``), through the real CLI process, on a redis-server of its own.

    .venv/bin/python scripts/bench/cli_enqueue.py [--quick] [-n 1000000] [--no-scripting] [--ids FILE]

Ids go to /dev/null unless --ids names a file (or '-' for a pipe read by this script).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

from harness import QUEUE_NAME, ROOT, Options, throwaway_redis


def main(argv: list[str] | None = None) -> int:
    ap = Options(__doc__, json=False)
    ap.add_argument("-n", type=int, default=1_000_000, help="lines to enqueue")
    ap.add_argument("--no-scripting", action="store_true", help="the script-free mode")
    ap.add_argument("--ids", default=os.devnull, help="where the printed ids go ('-': a pipe)")
    args = ap.parse(argv)
    if args.quick:
        args.n = 1_000
    data = b"".join(b"%d\n" % i for i in range(1, args.n + 1))  # what `seq 1 N` writes
    with throwaway_redis() as (server, client):
        cmd = [
            sys.executable,
            "-m",
            "keyqueue",
            "--url",
            server.url,
            *(["--no-scripting"] if args.no_scripting else []),
            "enqueue",
            QUEUE_NAME,
        ]
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        lines = 0
        start = time.perf_counter()
        with open(os.devnull if args.ids == "-" else args.ids, "wb") as sink:
            proc = subprocess.Popen(
                cmd, stdin=subprocess.PIPE, env=env, cwd=ROOT, stdout=subprocess.PIPE if args.ids == "-" else sink
            )
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
        waiting = client.scard(f"kq:{{{QUEUE_NAME}}}:items")
    mode = "script-free" if args.no_scripting else "scripted"
    ids = f", {lines:,} ids read from its stdout" if args.ids == "-" else ""
    print(
        f"{args.n:,} lines ({mode}): exit {rc}, {waiting:,} waiting, {seconds:.2f}s, "
        f"{args.n / seconds:,.0f} messages/s{ids}"
    )
    return 0 if rc == 0 and waiting == args.n else 1


if __name__ == "__main__":
    sys.exit(main())
