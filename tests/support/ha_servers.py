"""High-availability test servers on loopback: a primary with replicas and three sentinels
(redis-server's Sentinel mode), each a real process on a free port, stopped by PID."""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from typing import Iterator

import redis

from keyqueue.server import RedisServer, free_port

from .helpers import wait_until

SERVICE = "mymaster"
#: Replicas sync as this ACL user (on every server, as a promoted replica must accept the
#: others), so a test can cut a primary's replication link while its clients carry on.
REPL_USER, REPL_PASSWORD = "repl", "repl-secret"
REPL_ARGS = [
    "--user",
    REPL_USER,
    "on",
    f">{REPL_PASSWORD}",
    "~*",
    "&*",
    "+@all",
    "--masteruser",
    REPL_USER,
    "--masterauth",
    REPL_PASSWORD,
]


class Sentinel:
    """One redis-server --sentinel process with its own config file (sentinels rewrite it)."""

    def __init__(self, primary_port: int, quorum: int) -> None:
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="keyqueue-sentinel-")
        self.conf = os.path.join(self.dir, "sentinel.conf")
        with open(self.conf, "w") as f:
            f.write(
                f"port {self.port}\nbind 127.0.0.1\ndir {self.dir}\n"
                f"sentinel monitor {SERVICE} 127.0.0.1 {primary_port} {quorum}\n"
                f"sentinel down-after-milliseconds {SERVICE} 600\n"
                f"sentinel failover-timeout {SERVICE} 4000\n"
                f"sentinel parallel-syncs {SERVICE} 2\n"
            )
        self.proc = subprocess.Popen(
            ["redis-server", self.conf, "--sentinel", "--logfile", os.path.join(self.dir, "sentinel.log")],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        client = redis.Redis(port=self.port, socket_connect_timeout=0.2)
        wait_until(lambda: _pings(client))
        client.close()

    def master(self) -> tuple[str, int] | None:
        r = redis.Redis(port=self.port, decode_responses=True)
        try:
            addr = r.sentinel_get_master_addr_by_name(SERVICE)
            return (addr[0], int(addr[1])) if addr else None
        finally:
            r.close()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def _pings(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.ConnectionError:
        return False


def _knows(c: redis.Redis, replicas: int) -> bool:
    m = c.sentinel_master(SERVICE)
    return int(m["num-other-sentinels"]) == 2 and int(m["num-slaves"]) == replicas


class SentinelSet:
    """A primary, ``replicas`` replicas of it and three sentinels (quorum 2)."""

    def __init__(self, replicas: int = 2) -> None:
        self.primary = RedisServer(REPL_ARGS).start()
        self.replicas = [
            RedisServer([*REPL_ARGS, "--replicaof", "127.0.0.1", str(self.primary.port)]).start()
            for _ in range(replicas)
        ]
        for replica in self.replicas:  # synced: a WAIT counts it
            c = redis.Redis(port=replica.port)
            wait_until(lambda: c.info("replication")["master_link_status"] == "up", timeout=30)
            c.close()
        self.sentinels = [Sentinel(self.primary.port, 2) for _ in range(3)]
        # every sentinel has found the replicas and the other sentinels
        for s in self.sentinels:
            c = redis.Redis(port=s.port, decode_responses=True)
            wait_until(lambda: _knows(c, replicas), timeout=30)
            c.close()

    @property
    def url(self) -> str:
        hosts = ",".join(f"127.0.0.1:{s.port}" for s in self.sentinels)
        return f"redis+sentinel://{hosts}/{SERVICE}/0"

    def servers(self) -> Iterator[RedisServer]:
        yield self.primary
        yield from self.replicas

    def current_primary_port(self) -> int | None:
        for s in self.sentinels:
            if s.proc.poll() is None:
                addr = s.master()
                if addr:
                    return addr[1]
        return None

    def wait_for_failover(self, old_port: int, timeout: float = 30.0) -> int:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            port = self.current_primary_port()
            if port is not None and port != old_port:
                return port
            time.sleep(0.05)
        raise AssertionError(f"no failover away from port {old_port} within {timeout}s")

    def cut_replication(self) -> None:
        """A partition between the primary and its replicas: the replication user is
        disabled on the primary and the replicas' links killed, so they cannot resync, while
        the primary goes on taking writes from its clients (a lagging or broken link, as a
        network failure would make it; SIGSTOPped replicas would still receive the stream
        into their socket buffers on loopback)."""
        port = self.current_primary_port()
        c = redis.Redis(port=port)
        try:
            c.acl_setuser(REPL_USER, enabled=False)
            c.client_kill_filter(_type="replica")
            wait_until(lambda: c.info("replication")["connected_slaves"] == 0)
        finally:
            c.close()

    def stop(self) -> None:
        for s in self.sentinels:
            s.stop()
        for server in self.servers():
            server.cleanup()


class TLSServer:
    """A redis-server that speaks only TLS, with a throwaway CA and a certificate for
    127.0.0.1 made by the openssl CLI in a private directory."""

    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="keyqueue-tls-")
        self.ca = os.path.join(self.dir, "ca.crt")
        self.port = free_port()

        def run(*args: str) -> None:
            subprocess.run(["openssl", *args], cwd=self.dir, check=True, capture_output=True)

        run(
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
            "-days",
            "1",
            "-subj",
            "/CN=keyqueue-test-ca",
        )
        run(
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
            "-subj",
            "/CN=127.0.0.1",
        )
        with open(os.path.join(self.dir, "ext"), "w") as f:
            f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
        run(
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "server.crt",
            "-days",
            "1",
            "-extfile",
            "ext",
        )
        self.proc = subprocess.Popen(
            [
                "redis-server",
                "--port",
                "0",
                "--tls-port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--tls-cert-file",
                os.path.join(self.dir, "server.crt"),
                "--tls-key-file",
                os.path.join(self.dir, "server.key"),
                "--tls-ca-cert-file",
                self.ca,
                "--tls-auth-clients",
                "no",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                self.dir,
                "--logfile",
                os.path.join(self.dir, "redis.log"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        client = redis.Redis(port=self.port, ssl=True, ssl_ca_certs=self.ca, socket_connect_timeout=0.5)
        wait_until(lambda: _pings(client))
        client.close()

    @property
    def url(self) -> str:
        return f"rediss://127.0.0.1:{self.port}/0?ssl_ca_certs={self.ca}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
