"""The worker and what its handlers do, on both faces: settle their own messages, extend
them, raise any BaseException; the settings it logs at start. (A second stop signal:
test_worker_threads.py and test_aio_worker.py.)"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable

import pytest

from keyqueue import Message, Queue

from ..support.helpers import wait_until
from ..support.workers import Workers

PAST = {"ack": "acked", "release": "released", "dead_letter": "dead-lettered"}


@pytest.mark.parametrize("then_raise", [False, True], ids=["returns", "raises"])
@pytest.mark.parametrize("action", ["ack", "release", "dead_letter"])
def test_a_handler_that_settles_its_message_is_taken_at_its_word(
    make_queue: Callable[..., Queue], workers: Workers, caplog: pytest.LogCaptureFixture, action: str, then_raise: bool
) -> None:
    q = make_queue()
    q.enqueue("x")

    def handler(m: Message) -> None:
        if action == "ack":
            assert m.ack()
        elif action == "release":
            assert m.release(delay=60, error="later")
        else:
            assert m.dead_letter("no use")
        if then_raise:
            raise RuntimeError("boom")

    w = workers.make(q, handler)
    with caplog.at_level(logging.DEBUG, logger="keyqueue.worker"):
        workers.run(w)
    s = q.stats()
    assert s.processing == 0 and s.waiting == 0
    assert (s.delayed, s.dead) == {"ack": (0, 0), "release": (1, 0), "dead_letter": (0, 1)}[action]
    if action != "ack":
        (m,) = q.peek(source="delayed" if action == "release" else "dead")
        assert m.last_error == ("later" if action == "release" else "no use")
    warnings = [rec.getMessage() for rec in caplog.records if rec.levelno >= logging.WARNING]
    if then_raise:  # the failure is logged, and nothing is redone
        assert w.failed == 1 and len(warnings) == 1
        assert (
            warnings[0]
            == f"failed queue=q id=1 receives=1: RuntimeError: boom; the handler had {PAST[action]} it already, so it is not released"
        )
    else:
        assert w.processed == 1 and warnings == []
        assert f"handler {PAST[action]} queue=q id=1 receives=1 itself" in caplog.messages
        assert not any(line.startswith("acked ") for line in caplog.messages)


def test_the_heartbeat_never_shortens_a_deadline_the_handler_extended(
    make_queue: Callable[..., Queue], workers: Workers
) -> None:
    q = make_queue(visibility_timeout=0.6, bucket_seconds=1)
    q.enqueue_many(["long", "control"])
    proceed = threading.Event()
    extended = threading.Event()

    def handler(m: Message) -> None:
        if m.text == "long":
            assert m.extend(600)
            extended.set()
        proceed.wait(20)

    def deadline(text: str) -> float:
        (m,) = [m for m in q.peek(source="processing") if m.text == text]
        assert m.deadline is not None
        return m.deadline

    try:
        with workers.running(workers.make(q, handler, concurrency=2)):
            wait_until(lambda: q.stats().processing == 2 and extended.is_set())
            first = deadline("control")
            # Two heartbeats on the control message: the old heartbeat had extended "long" by then.
            wait_until(lambda: deadline("control") > first + 0.3, timeout=5)
            assert deadline("long") - time.time() > 590
            proceed.set()
            wait_until(lambda: q.stats().processing == 0)
    finally:
        proceed.set()


class Cancelled(BaseException):
    pass


@pytest.mark.parametrize("max_receives", [None, 1], ids=["retried", "dead-lettered"])
@pytest.mark.parametrize(
    "exc",
    [Cancelled("nope"), SystemExit(3), KeyboardInterrupt()],
    ids=["BaseException", "SystemExit", "KeyboardInterrupt"],
)
def test_a_base_exception_fails_the_delivery(
    make_queue: Callable[..., Queue], workers: Workers, exc: BaseException, max_receives: int | None
) -> None:
    q = make_queue(max_receives=max_receives)
    q.enqueue_many(["raise", "fine"])
    done: list[str] = []

    def handler(m: Message) -> None:
        if m.text == "raise":
            raise exc
        done.append(m.text)

    w = workers.make(q, handler, concurrency=1, retry_backoff=30)
    stops = isinstance(exc, (SystemExit, KeyboardInterrupt))
    if stops:
        with pytest.raises(type(exc)) as info:
            workers.run(w)
        assert info.value is exc
    else:
        workers.run(w)
    assert w.failed == 1
    expected = {"nope": "Cancelled: nope", "3": "SystemExit: 3", "": "KeyboardInterrupt"}[str(exc)]
    (m,) = q.peek(source="delayed" if max_receives is None else "dead")
    assert m.text == "raise" and m.receives == 1 and m.last_error == expected
    if max_receives is None:
        assert m.deadline is not None and m.deadline - time.time() > 25  # with backoff
    # A plain BaseException: the worker carries on. SystemExit/KeyboardInterrupt: it stops.
    assert done == ([] if stops else ["fine"])
    assert q.stats().processing == 0 and q.length() == (1 if stops else 0)


def test_system_exit_from_a_handler_lets_in_flight_work_finish(
    make_queue: Callable[..., Queue], workers: Workers, caplog: pytest.LogCaptureFixture
) -> None:
    q = make_queue("jobs")
    q.enqueue_many(["slow", "exit"])
    slow_started = threading.Event()
    done: list[str] = []

    def handler(m: Message) -> None:
        if m.text == "exit":
            slow_started.wait(10)
            raise SystemExit(3)
        slow_started.set()
        wait_until(lambda: w.stopping)  # still running when the worker stops
        done.append(m.text)

    w = workers.make(q, handler, concurrency=2, retry_backoff=30, grace_period=10)
    with caplog.at_level(logging.INFO, logger="keyqueue.worker"), pytest.raises(SystemExit) as info:
        workers.run(w, burst=False)
    assert info.value.code == 3 and done == ["slow"]
    s = q.stats()
    assert (s.waiting, s.processing, s.delayed) == (0, 0, 1)  # "slow" acked, "exit" to retry
    assert "handler raised SystemExit(3) on queue=jobs id=2; stopping" in caplog.messages
    assert not any("grace period over" in line for line in caplog.messages)


def test_the_worker_logs_its_settings_at_start(
    make_queue: Callable[..., Queue], workers: Workers, caplog: pytest.LogCaptureFixture
) -> None:
    make_queue("mail", visibility_timeout=12, max_receives=4, bucket_seconds=5)  # another process's settings
    mail, bulk = make_queue("mail"), make_queue("bulk")
    with caplog.at_level(logging.INFO, logger="keyqueue.worker"):
        workers.run(workers.make([mail, bulk], lambda m: None, concurrency=3, retry_backoff=2, grace_period=7.5))
    mode = "scripted" if mail.scripting else "script-free"
    assert caplog.messages[:3] == [
        "worker options: concurrency=3 retry_backoff=2 grace_period=7.5 heartbeat=on reap_on_start=on "
        "visibility_timeout=per queue timeout=none",
        "queue=mail priority=1 visibility_timeout=12 max_receives=4 bucket_seconds=5 max_body_bytes=262144 "
        f"dedup_window=300 retention=none dead_retention=none rate_limit=none max_in_flight=none mode={mode}",
        "queue=bulk priority=2 visibility_timeout=30 max_receives=none bucket_seconds=60 max_body_bytes=262144 "
        f"dedup_window=300 retention=none dead_retention=none rate_limit=none max_in_flight=none mode={mode}",
    ]
