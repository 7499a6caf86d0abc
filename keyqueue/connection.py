"""Turn ``client=`` / ``url=`` into a redis-py client that returns bytes, without leaking passwords."""

from __future__ import annotations

import os
import re
from typing import Any, Callable
from urllib.parse import parse_qsl, unquote

import redis

from .clusters import RedisCluster
from .errors import ConfigurationError
from .pools import MAX_CONNECTIONS, POOL_TIMEOUT, pool_class
from .sentinels import SafeAsyncSentinel, SafeSentinel

DEFAULT_URL = "redis://localhost:6379/0"
#: Redis errors a worker or reaper waits out: the server is down, restarting or failing over
#: (a cluster: down, still forming, or moving a slot).
TRANSIENT = (
    redis.ConnectionError,
    redis.TimeoutError,
    redis.BusyLoadingError,
    redis.exceptions.ClusterDownError,
    redis.exceptions.TryAgainError,
    # a slot moved or migrating longer than a round trip follows it (the next one does)
    redis.exceptions.MovedError,
    redis.exceptions.AskError,
)
#: Redis answered and refused who we are (a wrong password, a user the ACL denies keys or
#: commands): configuration that no wait fixes, so a worker or reaper starting meets it with
#: one error line (the CLI exits 78). (AuthenticationError is a ConnectionError: catch this first.)
REFUSED = (redis.AuthenticationError, redis.exceptions.NoPermissionError)
#: Longest wait between two tries while Redis is unreachable.
MAX_PAUSE = 5.0


def outage_delay(failures: int) -> float:
    """The wait after the ``failures``-th failure in a row to reach Redis: 0.1 s doubling to
    5 s, for workers and reapers alike (quick back when Redis restarts, quiet when it stays down)."""
    return min(0.1 * 2 ** (failures - 1), MAX_PAUSE)


_QUERY_PASSWORD = re.compile(r"((?:^|[?&])[a-z_]*password=)[^&#]*", re.I)
#: Text that ends inside a query parameter's value (``?name=...`` or ``&name=...``).
_IN_QUERY_VALUE = re.compile(r"[?&][a-z_]+=[^&]*$", re.I)


def _split_userinfo(rest: str) -> tuple[str, str]:
    """(user info, the rest) of what follows a URL's ``://``. A user info's password runs to
    the last "@" (passwords from managed services hold "/", "?" or "#" unencoded), but for
    an "@" inside a query parameter's value (``?sentinel_password=a@b``)."""
    end = len(rest)
    while (at := rest.rfind("@", 0, end)) >= 0:
        if not _IN_QUERY_VALUE.search(rest, 0, at):
            return rest[:at], rest[at + 1 :]
        end = at
    return "", rest


def _password_of(url: str) -> str:
    """The password in a URL's user info ("" when none)."""
    return _split_userinfo(url.partition("://")[2])[0].partition(":")[2]


def _without_password(text: str, url: str) -> str:
    """``text`` (what a parser said of ``url``) with every word that is a piece of the URL's
    password (a parser split at a "/" or "?" inside it) replaced by ``***``."""
    password = _password_of(url)
    if not password:
        return text
    return re.sub(
        r"[^\s'\"]+", lambda m: "***" if len(m[0]) > 1 and (m[0] in password or password in m[0]) else m[0], text
    )


def redact(url: str) -> str:
    """The URL with every password (in its user info, or a ``...password=`` query
    parameter) replaced by ``***``: safe to print or log, whatever its scheme."""
    if not isinstance(url, str):
        return "<not a URL>"
    scheme, sep, rest = url.partition("://")
    userinfo, after = _split_userinfo(rest) if sep else ("", rest)
    if ":" in userinfo:
        url = f"{scheme}://{userinfo.partition(':')[0]}:***@{after}"
    return _QUERY_PASSWORD.sub(r"\1***", url)


#: The words a boolean query parameter takes (the first four are true).
BOOLEAN_WORDS = ("1", "true", "yes", "on", "0", "false", "no", "off")


def _choice(value: str, allowed: tuple[str, ...]) -> str:
    """``value`` when it is one of ``allowed`` (any case), else ValueError."""
    if value.lower() not in allowed:
        raise ValueError(value)
    return value.lower()


#: Sentinel URLs: redis+sentinel://[user:password@]host:port[,host:port...]/SERVICE[/DB]
SENTINEL_SCHEMES = {"redis+sentinel": False, "rediss+sentinel": True}
#: Cluster URLs: redis+cluster://[user:password@]host:port[,host:port...][/?options]
CLUSTER_SCHEMES = {"redis+cluster": False, "rediss+cluster": True}
SCHEMES = {"redis", "rediss", "unix", *SENTINEL_SCHEMES, *CLUSTER_SCHEMES}
SENTINEL_PORT = 26379
#: Query parameters of a Sentinel URL: the sentinels' own credentials, and connection
#: settings applied to the servers and the sentinels alike (redis-py's URL parsers).
SENTINEL_CREDENTIALS = ("sentinel_username", "sentinel_password")
SENTINEL_OPTIONS: dict[str, Callable[[str], Any]] = {
    "socket_timeout": float,
    "socket_connect_timeout": float,
    "socket_keepalive": lambda v: _choice(v, BOOLEAN_WORDS),
    "health_check_interval": int,
    "max_connections": int,
    "pool_timeout": float,
    "ssl_ca_certs": str,
    "ssl_certfile": str,
    "ssl_keyfile": str,
    "ssl_cert_reqs": lambda v: _choice(v, ("none", "optional", "required")),
    "ssl_check_hostname": lambda v: _choice(v, BOOLEAN_WORDS),
}


def _addresses(hostlist: str, default_port: int | None, what: str) -> list[tuple[str, int]]:
    """The (host, port) pairs of a comma-separated ``host:port`` list; ValueError naming the
    first bad one (a port is required when there is no ``default_port``)."""
    hosts = []
    for item in hostlist.split(","):
        m = re.fullmatch(r"(\[[0-9a-fA-F:.]+\]|[^:\[\]]+)(?::(\d*))?", item)
        if not item or m is None or (default_port is None and not m.group(2)):
            raise ValueError(f"bad {what} address {item!r} (want host:port[,host:port...])")
        port = int(m.group(2)) if m.group(2) else default_port
        if port is None or not 0 < port < 65536:
            raise ValueError(f"bad port in {what} address {item!r}")
        hosts.append((m.group(1).strip("[]"), port))
    return hosts


def _userinfo(userinfo: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    user, _, password = userinfo.partition(":")
    if user:
        out["username"] = unquote(user)
    if password:
        out["password"] = unquote(password)
    return out


def _options(query: str, tls: bool, scheme: str, extra: tuple[str, ...] = ()) -> tuple[dict[str, Any], dict[str, Any]]:
    """(connection settings, the ``extra`` parameters as written) of a URL's query; ValueError
    naming an unknown or unparsable parameter."""
    shared: dict[str, Any] = {"ssl": True} if tls else {}
    others: dict[str, Any] = {}
    for name, value in parse_qsl(query, keep_blank_values=True):
        if name in extra:
            others[name] = value
        elif name in SENTINEL_OPTIONS:
            if name.startswith("ssl_") and not tls:
                raise ValueError(f"{name} needs TLS: use {scheme.replace('redis+', 'rediss+')}://")
            try:
                parsed = SENTINEL_OPTIONS[name](value)
            except ValueError:
                raise ValueError(f"invalid value for {name!r}") from None
            shared[name] = (
                parsed if name not in ("socket_keepalive", "ssl_check_hostname") else parsed in BOOLEAN_WORDS[:4]
            )
        else:
            raise ValueError(f"unknown query parameter {name!r}")
    return shared, others


def _sentinel_parts(url: str) -> tuple[list[tuple[str, int]], str, int, dict[str, Any], dict[str, Any]]:
    """(sentinels, service, db, server kwargs, sentinel kwargs) of a Sentinel URL; ValueError
    naming the first problem."""
    scheme, _, rest = url.partition("://")
    tls = SENTINEL_SCHEMES[scheme]
    userinfo, rest = _split_userinfo(rest)
    rest, _, query = rest.partition("?")
    hostlist, _, path = rest.partition("/")
    server = _userinfo(userinfo)
    hosts = _addresses(hostlist, SENTINEL_PORT, "sentinel")
    names = [unquote(p) for p in path.split("/") if p] if path else []
    if not names or len(names) > 2:
        raise ValueError("the path must name the monitored service: /SERVICE or /SERVICE/DB")
    if len(names) == 2 and not names[1].isdigit():
        raise ValueError(f"the database must be a number, not {names[1]!r}")
    db = int(names[1]) if len(names) == 2 else 0
    shared, credentials = _options(query, tls, scheme, SENTINEL_CREDENTIALS)
    sentinel = {name[len("sentinel_") :]: value for name, value in credentials.items()}
    server.update(shared, db=db)
    sentinel.update({k: v for k, v in shared.items() if k not in POOL_OPTIONS})
    return hosts, names[0], db, server, sentinel


def cluster_parts(url: str) -> tuple[list[tuple[str, int]], dict[str, Any]]:
    """(seed nodes, client settings) of a cluster URL; ValueError naming the first problem.
    A cluster has one database, so the URL has no path."""
    scheme, _, rest = url.partition("://")
    userinfo, rest = _split_userinfo(rest)
    rest, _, query = rest.partition("?")
    hostlist, _, path = rest.partition("/")
    if path:
        raise ValueError(f"a cluster has no databases: drop the path /{path}")
    settings = _userinfo(userinfo)
    hosts = _addresses(hostlist, None, "cluster node")
    shared, _ = _options(query, CLUSTER_SCHEMES[scheme], scheme)
    if "pool_timeout" in shared:
        raise ValueError("pool_timeout is not taken on a cluster (each node has its own pool)")
    settings.update(shared)
    return hosts, settings


#: Query parameters that size and time the pool of the client keyqueue makes (not the connections).
POOL_OPTIONS = ("max_connections", "pool_timeout")


def _pool_settings(options: dict[str, Any]) -> dict[str, Any]:
    """The blocking pool's own arguments, taken out of ``options``: its size and how long an
    operation waits for a free connection; ValueError naming a bad one."""
    try:
        size = int(options.pop("max_connections", MAX_CONNECTIONS))
    except ValueError:
        raise ValueError("invalid value for 'max_connections'") from None
    try:
        wait = float(options.pop("pool_timeout", POOL_TIMEOUT))
    except ValueError:
        raise ValueError("invalid value for 'pool_timeout'") from None
    if size < 1:
        raise ValueError("max_connections must be a positive whole number")
    if not wait > 0:
        raise ValueError("pool_timeout must be a positive number of seconds")
    return {"max_connections": size, "timeout": wait}


def _split_pool_options(url: str) -> tuple[str, dict[str, Any]]:
    """The URL without its pool parameters (the rest left as written), and those parameters."""
    base, _, query = url.partition("?")
    kept, pool = [], {}
    for pair in query.split("&") if query else []:
        name, _, value = pair.partition("=")
        if unquote(name) == "timeout":  # redis-py would hand it, unparsed, to the pool as its wait
            raise ValueError("unknown query parameter 'timeout' (socket_timeout? pool_timeout?)")
        if unquote(name) in POOL_OPTIONS:
            pool[unquote(name)] = unquote(value)
        else:
            kept.append(pair)
    return base + ("?" + "&".join(kept) if kept else ""), pool


def sentinels_of(client: Any) -> list[Any]:
    """The clients of the sentinels behind a client made from a Sentinel URL (none for
    another client): whoever closes the client closes these too."""
    manager = getattr(getattr(client, "connection_pool", None), "sentinel_manager", None)
    return list(getattr(manager, "sentinels", None) or [])


def sentinel_client(url: str, cls: Any) -> Any:
    """A client of the master of a Sentinel URL's service, by redis-py's Sentinel support
    (sync or asyncio after ``cls``; its discovery made safe in keyqueue/sentinels.py): it asks
    the sentinels for the master on each new connection, so it follows a failover. No I/O."""
    hosts, service, _db, server, sentinel_kwargs = _sentinel_parts(url)
    pool = _pool_settings(server)
    manager_class = SafeAsyncSentinel if cls.__module__.startswith("redis.asyncio") else SafeSentinel
    manager = manager_class(hosts, sentinel_kwargs=sentinel_kwargs, **server)
    return manager.master_for(service, redis_class=cls, connection_pool_class=pool_class(cls, True), **pool)


def cluster_client(url: str, cls: Any) -> Any:
    """A Redis Cluster client for a cluster URL, of redis-py's asyncio cluster after ``cls``
    or of its blocking one; no I/O: each learns the slot map at its first command."""
    hosts, settings = cluster_parts(url)
    if cls.__module__.startswith("redis.asyncio"):
        from redis.asyncio.cluster import ClusterNode as AsyncNode
        from redis.asyncio.cluster import RedisCluster as AsyncCluster

        return AsyncCluster(startup_nodes=[AsyncNode(h, p) for h, p in hosts], **settings)
    from redis.cluster import ClusterNode

    return RedisCluster(startup_nodes=[ClusterNode(h, p) for h, p in hosts], **settings)


def from_url(url: str, cls: Any = redis.Redis) -> Any:
    """A client of ``cls`` (redis.Redis or redis.asyncio.Redis) for ``url``; no I/O."""
    if not isinstance(url, str) or not url:
        raise ConfigurationError("a Redis URL must be a non-empty string")
    try:
        scheme = url.partition("://")[0] if "://" in url else ""
        if scheme not in SCHEMES:
            raise ValueError(
                "the scheme must be redis://, rediss://, unix://, redis+sentinel://, rediss+sentinel://,"
                " redis+cluster:// or rediss+cluster://"
            )
        if scheme in SENTINEL_SCHEMES:
            return sentinel_client(url, cls)
        if scheme in CLUSTER_SCHEMES:
            cluster_parts(url)  # a bad URL is a ConfigurationError before any connection
            return cluster_client(url, cls)
        rest, options = _split_pool_options(url)
        if scheme in ("redis", "rediss"):
            # (after the user info, which runs to the last "@" and may hold a "/")
            where = re.split(r"[?#]", rest.partition("://")[2].rpartition("@")[2])[0]
            database = where.partition("/")[2]
            if database and not database.isdigit():  # (redis-py would take database 0, without a word)
                raise ValueError("the database (after the port) must be a number, as in redis://host:6379/0")
        pool = pool_class(cls, False).from_url(rest, **_pool_settings(options))
        # redis-py checks unknown query parameters only when it first connects: make one
        # connection object (no I/O) so a typo in the URL fails here, as a bad URL.
        pool.connection_class(**pool.connection_kwargs)
        return cls.from_pool(pool)
    except (ValueError, TypeError) as exc:
        unknown = re.search(r"unexpected keyword argument '(\w+)'", str(exc))
        why = f"unknown query parameter {unknown.group(1)!r}" if unknown else str(exc)
        raise ConfigurationError(f"invalid Redis URL {redact(url)}: {_without_password(why, url)}") from None


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
    if isinstance(client, RedisCluster):  # (without connecting it)
        return client.kwargs
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
        raise ConfigurationError("message bodies are bytes: give a RedisCluster made with decode_responses=False")
    kwargs = dict(pool.connection_kwargs, decode_responses=False)
    return type(client)(connection_pool=pool.__class__(connection_class=pool.connection_class, **kwargs))
