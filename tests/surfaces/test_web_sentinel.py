"""`keyqueue serve` through a Sentinel URL follows a failover: /healthz answers 503 while no
primary answers, then 200 again, without a restart (real primary, replica, three
sentinels)."""

from __future__ import annotations

import time

import httpx

from keyqueue import Queue
from keyqueue.web import create_app

from ..support.ha_servers import SentinelSet
from ..support.helpers import wait_until
from ..support.web_support import Served


def test_healthz_follows_a_failover() -> None:
    ha = SentinelSet(replicas=1)
    served = None
    try:
        Queue("jobs", url=ha.url, min_replicas=1).enqueue("survives the failover")  # on the replica too
        served = Served(create_app(url=ha.url))
        with httpx.Client(base_url=served.url, timeout=30) as c:
            assert c.get("/healthz").status_code == 200
            assert c.get("/api/queues/jobs").json()["waiting"] == 1
            old = ha.primary.port
            ha.primary.kill()
            seen = []
            end = time.monotonic() + 60
            while time.monotonic() < end:  # every answer until the new primary answers
                seen.append(c.get("/healthz").status_code)
                if seen[-1] == 200 and ha.current_primary_port() not in (None, old):
                    break
                time.sleep(0.05)
            assert 503 in seen and seen[-1] == 200 and set(seen) <= {200, 503}, seen
            assert "Redis unreachable" not in c.get("/").text
            wait_until(lambda: c.get("/api/queues/jobs").status_code == 200, timeout=30, interval=0.2)
            assert c.get("/api/queues/jobs").json()["waiting"] == 1
    finally:
        if served is not None:
            served.stop()
        ha.stop()
