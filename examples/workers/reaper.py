"""A Reaper brings back delayed messages and those of crashed consumers for queues that no
worker serves (`keyqueue reaper` from the shell). Runs as it is: `python examples/workers/reaper.py`."""

import time

from keyqueue import Queue, Reaper

reports = Queue("reports")
reports.enqueue("monthly report", delay=1)  # delayed: not claimable for a second

reaper = Reaper(["reports"], interval=1.0)  # Reaper() alone: every queue under the prefix
reaper.start()  # in a background thread; reaper.run() blocks until SIGINT/SIGTERM
time.sleep(2.5)
reaper.shutdown()
print(reports.stats())  # waiting=1: the reaper made it visible once its delay was over
