"""Workers run by the tests: ``Running`` runs a keyqueue.Worker in a thread for a ``with``
block, then stops it and joins the thread."""

from __future__ import annotations

import threading

from keyqueue import Worker


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
