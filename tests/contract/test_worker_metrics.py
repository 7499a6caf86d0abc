"""Worker metrics (``Worker(metrics_port=)`` and ``aio.Worker(metrics_port=)``, on both faces,
and ``keyqueue worker --metrics-port``): handled_total{queue,outcome} and
handler_seconds{queue} count exactly what the handlers' messages became, scraped over HTTP
while the worker runs."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
from typing import Any, Callable

import httpx
import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families

from keyqueue import KeyQueueError, Message, Queue, Worker
from keyqueue.server import RedisServer

from ..support.helpers import wait_until
from ..support.workers import Workers

#: Bodies and what each becomes: max_receives=2, so "fail" is retried once, then dead.
BODIES = ["ok", "ok", "ok", "fail", "self-ack", "self-release", "self-dead"]


def by_body(message: Message) -> None:
    """ok: returns; fail: raises; self-*: settles its own message."""
    if message.text == "fail":
        raise RuntimeError("failing as asked")
    if message.text == "self-ack":
        message.ack()
    elif message.text == "self-release" and message.receives == 1:
        message.release(delay=0.0)
    elif message.text == "self-dead":
        message.dead_letter("given up")


#: What BODIES become: ok 3 + self-ack + self-release's second run; retry: fail's first
#: run, self-release's first; dead: fail's second run, self-dead. 9 handler calls.
EXPECTED = {"ok": 5, "retry": 2, "dead": 2}


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def handled(m: dict[Any, float], queue: str) -> dict[str, float]:
    return {
        o: m.get(("keyqueue_worker_handled_total", (("outcome", o), ("queue", queue))), 0.0)
        for o in ("ok", "retry", "dead")
    }


def finished(port: int, queue: str) -> bool:
    try:
        return handled(scrape(port), queue) == EXPECTED
    except httpx.TransportError:
        return False


def check(port: int, queue: str, q: Queue) -> None:
    m = scrape(port)
    assert handled(m, queue) == EXPECTED
    assert m[("keyqueue_worker_handler_seconds_count", (("queue", queue),))] == sum(EXPECTED.values())
    assert m[("keyqueue_worker_handler_seconds_sum", (("queue", queue),))] >= 0
    s = q.stats()
    assert (s.waiting, s.processing, s.dead) == (0, 0, 2)


def fill(q: Queue) -> None:
    q.enqueue_many(BODIES)


def test_worker_serves_exact_outcomes(make_queue: Callable[..., Queue], workers: Workers) -> None:
    q = make_queue("mjobs", max_receives=2)
    fill(q)
    with workers.running(workers.make(q, by_body, retry_backoff=0.0, metrics_port=0)) as w:
        wait_until(
            lambda: w.metrics is not None and w.metrics.port and finished(w.metrics.port, "mjobs"),
            timeout=30,
            interval=0.1,
        )
        assert w.metrics is not None
        check(w.metrics.port, "mjobs", q)
    port = w.metrics.port
    with pytest.raises(httpx.TransportError):  # served only while run() runs
        httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2)


def test_cli_worker_metrics_port(redis_server: RedisServer, r: redis.Redis) -> None:
    """--metrics-port 0: the worker logs the port it got, and serves there."""
    q = Queue("cjobs", client=r, max_receives=2)
    fill(q)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "keyqueue",
            "--url",
            redis_server.url,
            "worker",
            "tests.contract.test_worker_metrics:by_body",
            "-q",
            "cjobs",
            "--metrics-port",
            "0",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    )
    err = proc.stderr
    assert err is not None
    log: list[bytes] = []
    threading.Thread(target=lambda: log.extend(iter(err.readline, b"")), daemon=True).start()

    def logged_port() -> int | None:
        found = re.search(rb"metrics on http://127\.0\.0\.1:(\d+)/metrics", b"".join(log))
        return int(found.group(1)) if found else None

    try:
        wait_until(lambda: logged_port() is not None or proc.poll() is not None, timeout=30, interval=0.1)
        port = logged_port()
        assert port, b"".join(log).decode()
        wait_until(lambda: finished(port, "cjobs") or proc.poll() is not None, timeout=60, interval=0.2)
        assert proc.poll() is None, b"".join(log).decode()
        m = scrape(port)  # retry_backoff is the CLI's default 1 s: the retried message took its time
        assert handled(m, "cjobs") == EXPECTED
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
    assert proc.returncode == 0


def test_a_port_in_use_is_one_clear_error(r: redis.Redis) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        w = Worker(Queue("busy", client=r), by_body, metrics_port=port)
        with pytest.raises(KeyQueueError, match=f"cannot serve worker metrics on 127.0.0.1:{port}"):
            w.run(burst=True)
    with pytest.raises(ValueError, match="metrics_port"):
        Worker(Queue("busy", client=r), by_body, metrics_port=70000)
