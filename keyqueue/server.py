"""A throwaway redis-server on a free loopback port: for ``keyqueue demo``, tests and benchmarks."""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from typing import Sequence

import redis

from .errors import KeyQueueError

#: Ports a server is started on: below Linux's ephemeral range (32768 on), which the kernel
#: hands out to outgoing connections, so none takes a port chosen and not yet listened on.
PORTS = range(20000, 32768)


def free_port() -> int:
    """A loopback port nothing listens on now, chosen at random among ``PORTS``."""
    for _ in range(100):
        port = random.choice(PORTS)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RedisServer:
    """A real redis-server process that keeps its data in a private directory.

    ``extra`` adds command-line settings (``["--appendonly", "yes"]``). The port stays the
    same across ``restart()``, so clients reconnect to it.
    """

    def __init__(self, extra: Sequence[str] = (), *, port: int | None = None) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise KeyQueueError("redis-server is not on PATH (apt-get install redis-server)")
        self.binary = binary
        self.extra = list(extra)
        self.port = port or free_port()
        self.dir = tempfile.mkdtemp(prefix="keyqueue-redis-")
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 10.0) -> RedisServer:
        args = [
            self.binary,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            self.dir,
            "--logfile",
            os.path.join(self.dir, "redis.log"),
            *self.extra,
        ]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        client = redis.Redis(port=self.port, socket_connect_timeout=0.2)
        end = time.monotonic() + timeout
        try:
            while True:
                try:
                    if client.ping():
                        return self
                except redis.ConnectionError:
                    if self.proc.poll() is not None or time.monotonic() > end:
                        raise KeyQueueError(
                            f"redis-server did not start on port {self.port}: see {self.dir}/redis.log"
                        ) from None
                    time.sleep(0.02)
                except redis.BusyLoadingError:
                    time.sleep(0.02)
        finally:
            client.close()

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10.0) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def kill(self) -> None:
        """SIGKILL: the server dies as in a crash, keeping only what it had persisted."""
        self.stop(signal.SIGKILL)

    def restart(self) -> RedisServer:
        self.stop()
        return self.start()

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.cleanup()
