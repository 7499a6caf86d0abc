"""The dashboard's test servers: an ASGI app served by a real uvicorn on a free loopback
port, in a thread of the test process."""

from __future__ import annotations

import threading
from typing import Any

import uvicorn

from keyqueue.server import free_port

from .helpers import wait_until


class Served:
    """``app`` on http://127.0.0.1:PORT until ``stop()`` (lifespan on: the app closes what
    it opened)."""

    def __init__(self, app: Any) -> None:
        self.port = free_port()
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="on")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name=f"uvicorn-{self.port}", daemon=True)
        self.thread.start()
        wait_until(lambda: self.server.started or not self.thread.is_alive(), timeout=20)
        assert self.server.started, "uvicorn did not start"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(20)
