"""One URL parser: redis://, rediss://, unix://, redis+sentinel://, rediss+sentinel://,
sync and async clients, one clear line for a malformed URL, passwords never shown."""

from __future__ import annotations

import re

import pytest
import redis
import redis.asyncio
from redis.backoff import NoBackoff
from redis.retry import Retry
from redis.sentinel import MasterNotFoundError

from keyqueue import ConfigurationError
from keyqueue.connection import from_url, redact
from keyqueue.sentinels import SafeSentinel
from keyqueue.server import free_port

SENTINEL = "redis+sentinel://kq:s3cret@127.0.0.1:26379,127.0.0.1:26380,[::1]:26381/mymaster/2"


@pytest.mark.parametrize("cls", [redis.Redis, redis.asyncio.Redis])
def test_every_scheme_makes_a_client_without_io(cls: type) -> None:
    for url in (
        "redis://127.0.0.1:1/0",
        "rediss://127.0.0.1:1/0?ssl_cert_reqs=required",
        "unix:///tmp/nowhere.sock?db=1",
        SENTINEL + "?sentinel_password=x&socket_timeout=2",
        "rediss+sentinel://h1:1/svc?ssl_ca_certs=/tmp/ca.pem",
    ):
        client = from_url(url, cls)
        assert isinstance(client, cls)
    client = from_url(SENTINEL + "?sentinel_password=sp&socket_timeout=2", cls)
    pool = client.connection_pool
    assert "SentinelConnectionPool" in {c.__name__ for c in type(pool).__mro__} and pool.service_name == "mymaster"
    kw = pool.connection_kwargs
    assert (kw["db"], kw["username"], kw["password"], kw["socket_timeout"]) == (2, "kq", "s3cret", 2.0)
    sentinels = pool.sentinel_manager.sentinels
    assert len(sentinels) == 3
    assert sentinels[0].connection_pool.connection_kwargs["password"] == "sp"
    assert sentinels[2].connection_pool.connection_kwargs["host"] == "::1"


@pytest.mark.parametrize(
    "url,why",
    [
        ("redis+sentinel://", "bad sentinel address"),
        ("redis+sentinel://h:port/s", "bad sentinel address 'h:port'"),
        ("redis+sentinel://h:99999/s", "bad port"),
        ("redis+sentinel://h:1", "the path must name the monitored service"),
        ("redis+sentinel://h:1/s/db", "the database must be a number"),
        ("redis+sentinel://h:1/s?colour=red", "unknown query parameter 'colour'"),
        ("redis+sentinel://h:1/s?socket_timeout=soon", "invalid value for 'socket_timeout'"),
        ("redis+sentinel://h:1/s?ssl_ca_certs=/x", "needs TLS"),
        ("redis://h:1/0?timeout_s=1", "unknown query parameter 'timeout_s'"),
        ("rediss://h:1/0?ssl_ca_cert=/x", "unknown query parameter 'ssl_ca_cert'"),
        ("http://h:1/0", "the scheme must be redis://, rediss://, unix://, redis+sentinel://"),
        ("localhost:6379", "the scheme must be"),
    ],
)
def test_a_malformed_url_is_one_line_naming_the_problem(url: str, why: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        from_url(url)
    msg = str(info.value)
    assert why in msg and "\n" not in msg


def test_passwords_never_appear_in_errors_or_redacted_urls() -> None:
    for url in (
        SENTINEL + "?colour=red",
        SENTINEL + "?sentinel_password=topsecret&colour=red",
        "redis://u:s3cret@h:1/0?timeout_s=1",
        "redis://:s3cret@h:1/0?password=topsecret&x=1",
    ):
        with pytest.raises(ConfigurationError) as info:
            from_url(url)
        assert "s3cret" not in str(info.value) and "topsecret" not in str(info.value)
        assert "s3cret" not in redact(url) and "topsecret" not in redact(url)
    assert redact(SENTINEL) == "redis+sentinel://kq:***@127.0.0.1:26379,127.0.0.1:26380,[::1]:26381/mymaster/2"
    assert redact("redis://h:1/0") == "redis://h:1/0"


@pytest.mark.parametrize("password", ["s3cr/et-pw", "s3cr?et-pw", "s3cr#et-pw", "k3yA/x9Qz?Lm2w#Rt7v"])
def test_a_password_holding_url_delimiters_never_appears_either(password: str) -> None:
    """Managed services hand out passwords with "/", "?" or "#" unencoded: a parser splits
    the URL there, and what it quotes of the pieces must not show them."""
    pieces = [p for p in re.split(r"[/?#]", password) if len(p) > 1]
    for url in (
        f"redis+cluster://user:{password}@h1:7000/1",
        f"redis+cluster://user:{password}@h1:70x00",
        f"redis+sentinel://user:{password}@h:26379",
        f"redis://user:{password}@localhost:6379/x",
    ):
        with pytest.raises(ConfigurationError) as info:
            from_url(url)
        shown = str(info.value) + redact(url)
        assert all(p not in shown for p in pieces), shown
    assert redact(f"rediss+cluster://user:{password}@h1:7000,h2:7001") == "rediss+cluster://user:***@h1:7000,h2:7001"


@pytest.mark.parametrize(
    "url",
    [
        "rediss+cluster://u:p@h1:7000/?ssl_cert_reqs=maybe",
        "redis+cluster://h1:7000/?socket_keepalive=anything",
        "rediss+sentinel://h:26379/m?ssl_check_hostname=perhaps",
    ],
)
def test_an_option_value_a_url_cannot_mean_is_refused_before_any_connection(url: str) -> None:
    with pytest.raises(ConfigurationError, match="invalid value for"):
        from_url(url)


@pytest.mark.parametrize("url", ["redis://:pw@127.0.0.1:6380/abc", "rediss://h:6380/0x1", "redis://h/1/2"])
def test_a_database_that_is_no_number_is_refused_before_any_connection(url: str) -> None:
    with pytest.raises(ConfigurationError, match=r"the database \(after the port\) must be a number") as info:
        from_url(url)
    assert "pw" not in str(info.value)
    assert from_url("redis://:pw@127.0.0.1:6380/3").connection_pool.connection_kwargs["db"] == 3
    assert from_url("redis://127.0.0.1:6380/").connection_pool.connection_kwargs.get("db", 0) == 0


def test_no_sentinel_answering_is_one_short_line_naming_each() -> None:
    """Each sentinel's failure by its address, not by the client's repr (its whole pool)."""
    first, other = free_port(), free_port()  # (nothing listens there)
    no_retry = {"retry": Retry(NoBackoff(), 0), "password": "pw"}
    with pytest.raises(MasterNotFoundError) as info:
        SafeSentinel([("127.0.0.1", first), ("127.0.0.1", other)], sentinel_kwargs=no_retry).discover_master("mym")
    text = str(info.value)
    assert text.startswith("No master found for 'mym' : ") and len(text) < 400 and "\n" not in text
    assert f"127.0.0.1:{first}: " in text and f"127.0.0.1:{other}: " in text
    assert "ConnectionPool" not in text and "pw" not in text


@pytest.mark.parametrize("userinfo", ["", "kq:s3cr@t@"])
def test_an_at_sign_in_a_query_value_is_not_the_end_of_a_user_info(userinfo: str) -> None:
    """The user info runs to the last "@" but for one inside a query parameter's value: a
    sentinel password holding "@" leaves the addresses and the service where they are."""
    url = f"redis+sentinel://{userinfo}127.0.0.1:26379/mymaster?sentinel_password=sp@ss"
    pool = from_url(url).connection_pool
    assert pool.service_name == "mymaster"
    sentinel = pool.sentinel_manager.sentinels[0].connection_pool.connection_kwargs
    assert (sentinel["host"], sentinel["port"], sentinel["password"]) == ("127.0.0.1", 26379, "sp@ss")
    assert pool.connection_kwargs.get("password") == ("s3cr@t" if userinfo else None)
    assert redact(url) == url.replace("s3cr@t", "***").replace("sp@ss", "***")
