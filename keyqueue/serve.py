"""``keyqueue serve``: checks that the address is safe to bind, then runs ``keyqueue.web``
with uvicorn (SIGINT/SIGTERM end it, exit 0)."""

from __future__ import annotations

import ipaddress
import logging
import socket
from typing import Any, Mapping

from .errors import ConfigurationError, KeyQueueError, MissingDependency
from .worker.signals import on_stop_signals

log = logging.getLogger("keyqueue.serve")

#: Seconds an idle keep-alive connection stays open. An SDK's pool (botocore, aiohttp) reuses
#: an idle connection without knowing the server is closing it: a request sent as the server
#: closes fails with "connection closed". uvicorn's 5 s puts that race in the pauses of every
#: client that polls every few seconds; 75 s is longer than those and than common load
#: balancers' idle timeouts (60 s), which then close first.
KEEP_ALIVE = 75


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:  # a host name: it may resolve to anything
        return False


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port`` (0: any free port), bound before anything is
    logged: a port in use is one clear error (exit 1), not uvicorn's log lines and exit 3."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host.strip("[]"), port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        sock = socket.socket(family, kind, proto)
    except OSError as exc:
        raise KeyQueueError(f"cannot serve on {host}:{port}: {exc.strerror or exc}") from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError as exc:
        sock.close()
        raise KeyQueueError(f"cannot serve on {host}:{port}: {exc.strerror or exc}") from None
    sock.set_inheritable(True)
    return sock


def serve_app(
    *,
    url: str,
    shown_url: str,
    prefix: str,
    host: str,
    port: int,
    read_only: bool,
    token: str | None,
    sqs: tuple[str, str] | None,
    queue_options: Mapping[str, Any],
    log_level: str = "info",
    sqs_shards: int = 1,
) -> None:
    if not is_loopback(host) and token is None:
        raise ConfigurationError(
            f"refusing to serve on {host} without a token: set one with --token-env VAR (or bind 127.0.0.1)"
        )
    try:
        import uvicorn

        from .web import create_app

        app = create_app(
            url=url,
            prefix=prefix,
            read_only=read_only,
            token=token,
            sqs=sqs,
            queue_options=queue_options,
            sqs_shards=sqs_shards,
        )
    except ImportError as exc:
        raise MissingDependency(f"keyqueue serve needs the web extra (pip install 'keyqueue[web]'): {exc}") from None
    sock = bind(host, port)
    log.info(
        "dashboard for %s (prefix %r) on http://%s:%d%s%s%s",
        shown_url,
        prefix,
        f"[{host}]" if ":" in host else host,
        sock.getsockname()[1],
        ", read-only" if read_only else "",
        ", token required" if token else "",
        ", SQS API on the same port" if sqs else "",
    )
    # uvicorn stops gracefully on SIGINT/SIGTERM, then raises the signal again under the
    # handlers it found: let those be no-ops, so a stopped server exits 0 as workers do.
    restore = on_stop_signals(lambda sig: None)
    try:
        config = uvicorn.Config(
            app, host=host, port=port, log_level=log_level, server_header=False, timeout_keep_alive=KEEP_ALIVE
        )
        server = uvicorn.Server(config)
        server.run(sockets=[sock])
    finally:
        sock.close()
        restore()
