"""``GET /metrics``: the queues' gauges and their Redis counters in Prometheus' text format,
read from Redis at each scrape (so every replica of the app says the same)."""

from __future__ import annotations

from typing import Iterable, Sequence

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..core.sources import SHOWN_STATES
from .store import QueueView, Store

STATES = SHOWN_STATES
#: Counter name in Redis -> metric name (without ``_total``) and help.
COUNTERS = {
    "enqueued": ("keyqueue_enqueued", "Messages enqueued (a deduplicated enqueue is none)."),
    "acked": ("keyqueue_acked", "Deliveries acknowledged."),
    "redelivered": ("keyqueue_redelivered", "Messages made visible again after their visibility timeout."),
    "dead_lettered": ("keyqueue_dead_lettered", "Messages moved to the dead letters."),
    "expired": ("keyqueue_expired", "Messages and dead letters deleted by retention or dead_retention."),
    "scheduled": ("keyqueue_scheduled", "Messages schedules enqueued (also counted as enqueued)."),
    "throttled": ("keyqueue_throttled", "Claims refused by a rate limit, max_in_flight or a throttle."),
}


class Snapshot(Collector):
    """The metric families of views read for one scrape."""

    def __init__(self, views: Sequence[QueueView]) -> None:
        self.views = views

    def collect(self) -> Iterable[Metric]:
        messages = GaugeMetricFamily("keyqueue_messages", "Messages per state.", labels=["queue", "state"])
        oldest = GaugeMetricFamily(
            "keyqueue_oldest_message_age_seconds",
            "Age of the oldest waiting message (absent while none waits).",
            labels=["queue"],
        )
        counters = {k: CounterMetricFamily(name, text, labels=["queue"]) for k, (name, text) in COUNTERS.items()}
        held = GaugeMetricFamily(
            "keyqueue_held_messages",
            "Waiting messages held behind their group's current ones (counted in the waiting state too).",
            labels=["queue"],
        )
        corrupt = GaugeMetricFamily(
            "keyqueue_queue_corrupt",
            "1 while a key of the queue holds the wrong type (its other metrics are then absent).",
            labels=["queue"],
        )
        for v in self.views:
            corrupt.add_metric([v.name], 0 if v.error is None else 1)
            if v.error is not None:
                continue
            for state in STATES:
                messages.add_metric([v.name, state], getattr(v.stats, state))
            held.add_metric([v.name], v.stats.held)
            if v.stats.oldest_age is not None:
                oldest.add_metric([v.name], v.stats.oldest_age)
            for k, family in counters.items():
                family.add_metric([v.name], v.counters.get(k, 0))
        yield messages
        yield oldest
        yield held
        yield from counters.values()
        yield corrupt


def exposition(views: Sequence[QueueView]) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(Snapshot(views))
    return generate_latest(registry)


async def metrics(request: Request) -> Response:
    store: Store = request.app.state.store
    return Response(exposition(await store.overview()), media_type=CONTENT_TYPE_LATEST)


routes = [Route("/metrics", metrics)]
