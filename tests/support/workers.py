"""Workers run by the tests. ``Workers`` runs the worker of a face for the contract suite:
keyqueue.Worker (its threads) on a keyqueue.Queue, or keyqueue.aio.Worker on the event loop
of an async queue's SyncFace; a handler is written once, as a plain function, and the
asyncio face awaits it in a thread of the loop's executor with its message behind a
SyncMessage (so it may block, and settle its own message). ``Running`` runs a
keyqueue.Worker in a thread for a ``with`` block (the faults suites)."""

from __future__ import annotations

import asyncio
import threading
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from keyqueue import Worker
from keyqueue.aio import Worker as AioWorker

from .async_face import LoopThread, SyncFace, SyncMessage


class Running:
    """A Worker run() in a thread, stopped and joined on exit."""

    def __init__(self, worker: Worker, **run_kw: object) -> None:
        self.worker = worker
        self.thread = threading.Thread(target=worker.run, kwargs=run_kw, daemon=True)

    def __enter__(self) -> Worker:
        self.thread.start()
        return self.worker

    def __exit__(self, *exc: object) -> None:
        self.worker.stop()
        self.thread.join(30)
        assert not self.thread.is_alive()


class Run:
    """One run() under way: in a thread (keyqueue.Worker) or on the loop (keyqueue.aio.Worker)."""

    def __init__(self, worker: Any, finished: Callable[[float], bool], outcome: Callable[[], Any]) -> None:
        self.worker = worker
        self._finished, self._outcome = finished, outcome

    def join(self, timeout: float) -> bool:
        """Wait at most ``timeout`` seconds for run() to return; whether it has."""
        return self._finished(timeout)

    def result(self, timeout: float = 30) -> None:
        """Wait for run() to return (failing past ``timeout``); raise what it raised."""
        assert self.join(timeout), f"run() still running after {timeout}s"
        error = self._outcome()
        if error is not None:
            raise error


class Workers:
    """The worker of one face: ``make`` builds it over the queues the test holds, ``run``
    runs it to the end (burst by default), ``start`` runs it in the background and
    ``running`` for a ``with`` block (stopped and waited for at its end)."""

    def __init__(self, face: str, loop: LoopThread | None = None) -> None:
        self.face, self.loop = face, loop
        #: The worker class of this face.
        self.kind: type[Any] = Worker if face == "sync" else AioWorker
        self._faces: dict[int, SyncFace] = {}

    def queue(self, q: Any) -> Any:
        """The queue of this face behind what the test holds (an async queue's SyncFace)."""
        if isinstance(q, SyncFace):
            self._faces[id(q.aio)] = q
            return q.aio
        return q

    def handler(self, fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
        """``fn`` as this face's handler: itself, or awaited in a thread with its message
        behind a SyncMessage (whose ``queue`` is the SyncFace the test holds)."""
        if self.face == "sync":
            return fn
        loop = self.loop
        assert loop is not None
        faces = self._faces

        async def handle(m: Any) -> Any:
            face = SyncMessage(m, loop)
            object.__setattr__(face, "_face", faces.get(id(m.queue), m.queue))
            return await asyncio.to_thread(fn, face)

        handle.__name__ = getattr(fn, "__name__", "handle")
        return handle

    def make(self, queues: Any, fn: Callable[[Any], Any], **options: Any) -> Any:
        many = isinstance(queues, list)
        mine = [self.queue(q) for q in queues] if many else self.queue(queues)
        return self.kind(mine, self.handler(fn), **options)

    def start(self, worker: Any, **run_kw: Any) -> Run:
        if self.face == "sync":
            errors: list[BaseException] = []

            def target() -> None:
                try:
                    worker.run(**run_kw)
                except BaseException as exc:
                    errors.append(exc)

            thread = threading.Thread(target=target, daemon=True)
            thread.start()

            def joined(timeout: float) -> bool:
                thread.join(timeout)
                return not thread.is_alive()

            return Run(worker, joined, lambda: errors[0] if errors else None)

        async def run() -> BaseException | None:
            try:  # (a SystemExit out of a task would end the loop's thread: it is handed over)
                await worker.run(**run_kw)
            except BaseException as exc:
                return exc
            return None

        assert self.loop is not None
        future = asyncio.run_coroutine_threadsafe(run(), self.loop.loop)

        def done(timeout: float) -> bool:
            try:
                future.result(timeout)
            except TimeoutError:
                pass
            return future.done()

        return Run(worker, done, future.result)

    def run(self, worker: Any, *, burst: bool = True, timeout: float = 120) -> Any:
        """``worker.run(burst=burst)`` to its end; the worker (raises what run() raised)."""
        self.start(worker, burst=burst).result(timeout)
        return worker

    @contextmanager
    def running(self, worker: Any, **run_kw: Any) -> Iterator[Any]:
        run = self.start(worker, **run_kw)
        try:
            yield worker
        except BaseException:
            worker.stop()
            run.join(30)
            raise
        worker.stop()
        run.result(30)
