"""Enqueue and ack rates from the Redis counters, sampled when the dashboard or /metrics
reads them: a short history per queue in the app (no I/O here), for the rate columns and
the sparklines."""

from __future__ import annotations

import time
from collections import deque
from typing import Callable, Mapping

#: Counters the dashboard shows as rates.
RATE_COUNTERS = ("enqueued", "acked")
#: Samples closer together than this are not kept (a burst of requests is one sample).
MIN_STEP = 1.0
#: A rate is the counter's growth over about this many seconds.
WINDOW = 10.0
#: Samples kept per queue (two minutes at the page's 2-second refresh).
KEEP = 60


class RateHistory:
    """Samples of each queue's counters on a monotonic clock. A counter that went down (the
    queue was destroyed and made again) starts the queue's history afresh."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._samples: dict[str, deque[tuple[float, Mapping[str, int]]]] = {}

    def record(self, name: str, counters: Mapping[str, int]) -> None:
        now = self.clock()
        samples = self._samples.setdefault(name, deque(maxlen=KEEP))
        if samples and any(counters.get(c, 0) < samples[-1][1].get(c, 0) for c in RATE_COUNTERS):
            samples.clear()
        if samples and now - samples[-1][0] < MIN_STEP:
            return
        samples.append((now, dict(counters)))

    def rate(self, name: str, counter: str) -> float | None:
        """Per second over the last WINDOW seconds (or what history there is); None before
        two samples."""
        samples = self._samples.get(name)
        if not samples or len(samples) < 2:
            return None
        end_t, end = samples[-1]
        start_t, start = next(((t, c) for t, c in samples if end_t - t <= WINDOW), samples[-2])
        if start_t == end_t:
            start_t, start = samples[-2]
        return (end.get(counter, 0) - start.get(counter, 0)) / (end_t - start_t)

    def series(self, name: str, counter: str) -> list[float]:
        """The rate between each two consecutive samples, oldest first."""
        samples = list(self._samples.get(name, ()))
        return [(b.get(counter, 0) - a.get(counter, 0)) / (tb - ta) for (ta, a), (tb, b) in zip(samples, samples[1:])]

    def keep_only(self, names: set[str]) -> None:
        """Forget the queues that are gone."""
        for name in set(self._samples) - names:
            del self._samples[name]
