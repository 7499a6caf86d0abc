"""The queue contract: what keyqueue.Queue and keyqueue.aio.Queue promise (every operation,
errors, timing, the counters, self-healing, a model-based state machine), the workers and
the reaper, and the fsck. Every test here that builds its queues through the ``make_queue``
or ``q`` fixtures runs on both faces (contract/conftest.py); modules named for one face
(``test_aio_*``, ``*_threads``) hold what only that face has, with queues of their own."""
