"""What the tests share but is no test: polling and thread helpers (``helpers``), the asyncio
queue behind a sync face (``async_face``), worker runners (``workers``), ``keyqueue``
processes (``processes``), servers for replication, Sentinel and TLS (``ha_servers``), the
dashboard served on loopback (``web_support``), the fsck's keys and findings
(``check_support``), the crash-point client and scenarios (``crashing``,
``crash_scenarios``), and the handler modules that ``keyqueue worker`` and Spark's Python
workers import by name (``tests.support.handlers:record``, ``aio_handlers``,
``cli_handlers``, ``spark_handlers``)."""
