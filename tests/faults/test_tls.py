"""TLS: rediss:// URLs with ssl_ca_certs, on a redis-server that speaks only TLS,
with a throwaway CA made by the tests."""

from __future__ import annotations

import asyncio
import subprocess
from typing import Iterator

import pytest
import redis

from keyqueue import ConfigurationError, Queue, aio

from ..support.ha_servers import TLSServer
from ..support.processes import in_process


@pytest.fixture(scope="module")
def tls() -> Iterator[TLSServer]:
    server = TLSServer()
    try:
        yield server
    finally:
        server.stop()


def test_queue_and_async_queue_over_tls(tls: TLSServer) -> None:
    q = Queue("t", url=tls.url)
    mid = q.enqueue("over TLS")
    m = q.claim()
    assert m is not None and m.id == mid and m.text == "over TLS" and q.ack(m)
    assert q.client.connection_pool.connection_class.__name__ == "SSLConnection"

    async def main() -> None:
        async with aio.Queue("t", url=tls.url) as aq:
            await aq.enqueue("async over TLS")
            m = await aq.claim()
            assert m is not None and m.text == "async over TLS" and await m.ack()

    asyncio.run(main())


def test_the_cli_over_tls(tls: TLSServer) -> None:
    sent = in_process(["--url", tls.url, "enqueue", "t2", "x"])
    assert sent.returncode == 0, sent.stderr
    out = in_process(["--url", tls.url, "stats", "t2", "--json"])
    assert out.returncode == 0 and '"waiting": 1' in out.stdout, out.stderr


def test_a_wrong_ca_fails_to_connect_and_plain_redis_is_refused(tls: TLSServer, tmp_path) -> None:
    other = tmp_path / "other.crt"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            str(tmp_path / "k"),
            "-out",
            str(other),
            "-days",
            "1",
            "-subj",
            "/CN=someone-else",
        ],
        check=True,
        capture_output=True,
    )
    q = Queue("t", url=f"rediss://127.0.0.1:{tls.port}/0?ssl_ca_certs={other}&socket_connect_timeout=2")
    with pytest.raises(redis.ConnectionError, match="(?i)certificate"):
        q.enqueue("x")
    with pytest.raises(redis.ConnectionError):
        Queue("t", url=f"redis://127.0.0.1:{tls.port}/0?socket_connect_timeout=2&socket_timeout=2").enqueue("x")


def test_bad_tls_parameters_are_configuration_errors() -> None:
    with pytest.raises(ConfigurationError, match="unknown query parameter 'ssl_ca_cert'"):
        Queue("t", url="rediss://127.0.0.1:1/0?ssl_ca_cert=/x")
