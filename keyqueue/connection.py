"""Turn ``client=`` / ``url=`` into a redis-py client that returns bytes, without leaking passwords."""

from __future__ import annotations

import os
import re
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import redis

from .errors import ConfigurationError

DEFAULT_URL = "redis://localhost:6379/0"
#: Redis errors a worker or reaper waits out: the server is down, restarting or failing over.
TRANSIENT = (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError)


def redact(url: str) -> str:
    """The URL with its password replaced by ``***``: safe to print or log."""
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
        user = parts.username or ""
        host = parts.hostname or ""
        if ":" in host:
            host = f"[{host}]"
        port = f":{parts.port}" if parts.port else ""
        return urlunsplit(parts._replace(netloc=f"{user}:***@{host}{port}"))
    except ValueError:
        return "<unparseable URL>"


def from_url(url: str, cls: Any = redis.Redis) -> Any:
    """A client of ``cls`` (redis.Redis or redis.asyncio.Redis) for ``url``; no I/O."""
    if not isinstance(url, str) or not url:
        raise ConfigurationError("a Redis URL must be a non-empty string")
    try:
        client = cls.from_url(url)
        # redis-py checks unknown query parameters only when it first connects: make one
        # connection object (no I/O) so a typo in the URL fails here, as a bad URL.
        pool = client.connection_pool
        pool.connection_class(**pool.connection_kwargs)
        return client
    except (ValueError, TypeError) as exc:
        unknown = re.search(r"unexpected keyword argument '(\w+)'", str(exc))
        why = f"unknown query parameter {unknown.group(1)!r}" if unknown else str(exc)
        raise ConfigurationError(f"invalid Redis URL {redact(url)}: {why}") from None


def default_url() -> str:
    """``KEYQUEUE_URL`` when set (as the CLI reads it), else the local default."""
    env = os.environ.get("KEYQUEUE_URL")
    if env is None:
        return DEFAULT_URL
    if not env:
        raise ConfigurationError("KEYQUEUE_URL is set but empty: unset it or give a Redis URL")
    return env


def connection_kwargs(client: redis.Redis) -> dict[str, object]:
    """The settings of a client's connections (a Redis or a RedisCluster)."""
    pool = getattr(client, "connection_pool", None)
    if pool is not None:
        return dict(pool.connection_kwargs)
    return dict(getattr(getattr(client, "nodes_manager", None), "connection_kwargs", None) or {})


def resolve_client(client: Any, url: str | None, cls: Any = redis.Redis) -> Any:
    """One client that answers bytes: bodies are binary, so decode_responses is turned off.
    Neither given: ``KEYQUEUE_URL``, else redis://localhost:6379/0 (a client of ``cls``)."""
    if client is not None and url is not None:
        raise ConfigurationError("give either client= or url=, not both")
    if client is None:
        return from_url(default_url() if url is None else url, cls)
    if not connection_kwargs(client).get("decode_responses"):
        return client
    pool = getattr(client, "connection_pool", None)
    if pool is None:
        raise ConfigurationError("message bodies are bytes: give a RedisCluster made with "
                                 "decode_responses=False")
    kwargs = dict(pool.connection_kwargs, decode_responses=False)
    return type(client)(connection_pool=pool.__class__(connection_class=pool.connection_class, **kwargs))
