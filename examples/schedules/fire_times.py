"""Fire times without Redis: the spring-forward gap and the fall-back repeat in Berlin."""

from datetime import datetime
from zoneinfo import ZoneInfo

from keyqueue import next_fires

berlin = ZoneInfo("Europe/Berlin")
# 02:30 does not exist on 29 March 2026: it fires once, when the gap ends (03:00 CEST).
for t in next_fires(cron="30 2 * * *", tz="Europe/Berlin", after=datetime(2026, 3, 28, 12, tzinfo=berlin), count=2):
    print(t.isoformat())
# 02:00-03:00 happens twice on 25 October 2026: each wall time fires once, on its first pass.
for t in next_fires(cron="*/30 2 * * *", tz="Europe/Berlin", after=datetime(2026, 10, 25, tzinfo=berlin), count=3):
    print(t.isoformat())
