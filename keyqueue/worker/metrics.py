"""A worker's own Prometheus metrics (``Worker(metrics_port=N)``, ``keyqueue worker
--metrics-port N``): what its handlers did and how long they took, served on loopback by
prometheus_client, imported only when asked for (the ``web`` extra)."""

from __future__ import annotations

import logging
from typing import Any

from ..errors import InvalidArgument, KeyQueueError, MissingDependency
from ..settings import whole_number

log = logging.getLogger("keyqueue.worker")

#: What a handled message became: acked, released for a retry, dead-lettered.
OUTCOMES = ("ok", "retry", "dead")
#: Where the metrics are served unless asked otherwise: loopback, not the network.
METRICS_HOST = "127.0.0.1"


class WorkerMetrics:
    """``keyqueue_worker_handled_total{queue,outcome}`` and the histogram
    ``keyqueue_worker_handler_seconds{queue}``, in a registry of this worker's own (two
    workers in one process do not mix), served while the worker runs. ``port`` 0: any free
    port (``port`` says which once started)."""

    def __init__(self, port: int, host: str = METRICS_HOST) -> None:
        try:
            from prometheus_client import CollectorRegistry, Counter, Histogram
        except ImportError:
            raise MissingDependency("worker metrics need prometheus_client: pip install 'keyqueue[web]'") from None
        self.port = whole_number("metrics_port", port, 0)
        if self.port > 65535:
            raise InvalidArgument(f"metrics_port must be at most 65535, not {port}")
        self.host = host
        self.registry = CollectorRegistry()
        self.handled = Counter(
            "keyqueue_worker_handled",
            "Messages handled, by what they became.",
            ["queue", "outcome"],
            registry=self.registry,
        )
        self.seconds = Histogram(
            "keyqueue_worker_handler_seconds", "Time in the handler, every call.", ["queue"], registry=self.registry
        )
        self._server: Any = None
        self._thread: Any = None

    def start(self) -> None:
        """Serve (once; again after stop()). A port in use is one clear error."""
        if self._server is not None:
            return
        from prometheus_client import start_http_server

        try:
            self._server, self._thread = start_http_server(self.port, addr=self.host, registry=self.registry)
        except OSError as exc:
            raise KeyQueueError(
                f"cannot serve worker metrics on {self.host}:{self.port}: {exc.strerror or exc}"
            ) from None
        self.port = self._server.server_port
        host = f"[{self.host}]" if ":" in self.host else self.host
        log.info("metrics on http://%s:%d/metrics", host, self.port)  # (port 0: the one it got)

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._thread.join(5)
            self._server = self._thread = None

    def observe(self, queue: str, outcome: str, seconds: float) -> None:
        self.handled.labels(queue, outcome).inc()
        self.seconds.labels(queue).observe(seconds)
