"""The worker runtime: ``keyqueue.Worker`` (threads.py) and ``keyqueue.aio.Worker``
(tasks.py), two ways of running the handlers over one base (base.py) and one set of
per-message steps (steps.py), so both do the same to every message.

rules.py holds the pure rules (retry backoff, batch sizes, how an error reads),
signals.py the SIGINT/SIGTERM handling, metrics.py the worker's own Prometheus metrics,
reaping.py one logged reap (the Reaper's too). This file imports nothing: an asyncio
producer that imports ``keyqueue.aio`` never loads tasks.py.
"""
