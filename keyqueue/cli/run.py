"""The long-running commands: worker, reaper, serve and demo, each a thin call into the
library (``run_process`` of a worker, ``Reaper.run``, ``serve_app``, ``run_demo``) once
its options are checked and logging is set up."""

from __future__ import annotations

import importlib
import logging
import os
import re
import sys
from typing import Any

import click

from ..connection import DEFAULT_URL, REFUSED
from ..core.shards import MAX_SHARDS
from ..errors import ConfigurationError, InvalidArgument
from .group import GIVEN, Config, cli, pass_config, refused

HANDLER_RE = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")


def setup_logging(level: str, pid: bool = False) -> None:
    """Log to stderr; ``pid``: each line names its process (a supervised worker's)."""
    logging.basicConfig(
        level=getattr(logging, level.upper()),
        stream=sys.stderr,
        format=f"%(asctime)s %(levelname)s %(name)s{'[%(process)d]' if pid else ''}: %(message)s",
    )


LOG_LEVEL = click.option(
    "--log-level", type=click.Choice(["debug", "info", "warning", "error"]), default="info", show_default=True
)


@cli.command()
@click.argument("queues", nargs=-1)
@click.option("--interval", type=click.FloatRange(min=0, min_open=True), default=1.0, show_default=True)
@LOG_LEVEL
@pass_config
def reaper(cfg: Config, queues: tuple[str, ...], interval: float, log_level: str) -> None:
    """Reap QUEUES (default: every queue) until SIGINT/SIGTERM. Waits for a Redis that is
    down; exits 78 when Redis refuses the credentials or the ACL."""
    from ..reaper import Reaper

    setup_logging(log_level)
    r = Reaper(list(queues) or None, url=cfg.url or DEFAULT_URL, prefix=cfg.prefix, interval=interval, **cfg.options())
    logging.getLogger("keyqueue.reaper").info(
        "reaping %s every %.3gs at %s", ", ".join(queues) or "every queue", interval, cfg.shown_url
    )
    try:
        r.run()
    except REFUSED as exc:
        raise refused(exc) from None


# -- worker -----------------------------------------------------------------------------


def load_handler(spec: str) -> Any:
    """The object MODULE:FUNC names: a function (plain or ``async def``), or a Worker made
    with ``@queue.worker`` (a ``keyqueue.Worker``, or a ``keyqueue.aio.Worker`` from an
    asyncio queue)."""
    from ..worker.base import WorkerBase

    if not HANDLER_RE.fullmatch(spec):
        raise InvalidArgument(f"handler must be MODULE:FUNC (like 'app.tasks:send'), not {spec!r}")
    module_name, func_name = spec.split(":")
    sys.path.insert(0, "")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise InvalidArgument(f"cannot import module {module_name!r}: {exc}") from None
    func = getattr(module, func_name, None)
    if not isinstance(func, WorkerBase) and not callable(func):
        raise InvalidArgument(f"module {module_name!r} has no function {func_name!r}")
    return func


def worker_class(target: Any) -> Any:
    """The Worker class that runs ``target``: a decorated Worker's own, keyqueue.aio.Worker
    for an ``async def`` function, else keyqueue.Worker (imported on use: other commands
    never load them)."""
    from ..worker.base import WorkerBase
    from ..worker.rules import is_async

    if isinstance(target, WorkerBase):
        return type(target)
    if is_async(target):
        from ..worker.tasks import Worker as AsyncWorker

        return AsyncWorker
    from ..worker.threads import Worker

    return Worker


#: The worker command's options that override a decorated Worker's: option name, parameter.
WORKER_OPTIONS = (
    ("concurrency", "concurrency"),
    ("grace_period", "grace"),
    ("visibility_timeout", "visibility_timeout"),
    ("timeout", "timeout"),
    ("metrics_port", "metrics_port"),
    ("metrics_host", "metrics_host"),
)


@cli.command()
@click.argument("handler")
@click.option(
    "-q",
    "--queue",
    "queues",
    multiple=True,
    help="Queue to serve; repeat for several, in priority order. Required unless "
    "HANDLER is a Worker made with @queue.worker (which names its queues).",
)
@click.option(
    "-c",
    "--concurrency",
    type=click.IntRange(min=1),
    default=None,
    help="Handlers at once: threads for a plain function (default 1), tasks on one "
    "event loop for an async one (default 10).",
)
@click.option("--burst", is_flag=True, help="Exit when the queues are empty.")
@click.option(
    "--grace",
    type=click.FloatRange(min=0),
    default=30.0,
    show_default=True,
    help="Seconds in-flight messages get to finish on SIGTERM/SIGINT.",
)
@click.option("--visibility-timeout", type=click.FloatRange(min=0, min_open=True), default=None)
@click.option(
    "--timeout",
    type=float,
    default=None,
    metavar="S",
    help="Seconds a handler may run; one still running then has its delivery failed "
    "(HandlerTimeout). A thread worker whose every thread is stuck exits 3.",
)
@click.option(
    "--processes",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Worker processes, each with -c threads or tasks. 2 or more run under a supervisor that "
    "replaces one that dies and passes SIGTERM/SIGINT on to all; 1 runs the worker in this process.",
)
@click.option("--supervisor-pid", type=int, default=None, hidden=True)
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    default=None,
    metavar="N",
    help="Serve the worker's Prometheus metrics on this port (needs keyqueue[web]).",
)
@click.option("--metrics-host", default="127.0.0.1", show_default=True, help="Address of --metrics-port.")
@LOG_LEVEL
@click.pass_context
def worker(
    ctx: click.Context,
    /,
    handler: str,
    queues: tuple[str, ...],
    burst: bool,
    log_level: str,
    processes: int,
    supervisor_pid: int | None,
    **options: Any,
) -> None:
    """Run HANDLER (MODULE:FUNC, called with each message) on the queues. HANDLER may be a
    Worker made with @queue.worker: its queues and options apply, and options given here
    override them. An `async def` HANDLER (or one decorated on a keyqueue.aio.Queue) runs
    on asyncio, with keyqueue.aio.Worker. Waits for a Redis that is down; exits 78 when
    Redis refuses the credentials or the ACL."""
    cfg = ctx.find_object(Config)
    assert cfg is not None
    target = load_handler(handler)
    kind = worker_class(target)
    decorated = isinstance(target, kind)
    given = {name: options[param] for name, param in WORKER_OPTIONS if ctx.get_parameter_source(param) in GIVEN}
    if not decorated and not queues:
        raise click.UsageError(
            f"Missing option '-q' / '--queue': {handler} is a plain function, so name the queues it serves", ctx
        )
    made: list[Any] = []  # the client made from --url (made once, on first use)
    from ..aio.queue import Queue as AsyncQueue
    from ..queue import Queue

    try:  # (a Queue reads its settings when made: an ACL may refuse that already)
        qs = cfg.served_queues(
            AsyncQueue if kind.awaited else Queue, queues, target.queues if decorated else None, made
        )
    except REFUSED as exc:
        raise refused(exc) from None
    w = target.with_options(queues=qs, **given) if decorated else kind(qs, target, **given)
    setup_logging(log_level, pid=processes > 1 or supervisor_pid is not None)
    if processes > 1:  # (checked above, once, as for one process: then run by the children)
        from .supervise import Supervisor, child_command

        if not kind.awaited:  # (an asyncio client made no connection yet)
            for client in made:
                client.close()
        sys.exit(Supervisor(child_command(cfg.argv, os.getpid()), processes, w.grace_period).run())
    if supervisor_pid is not None:
        from .supervise import watch_supervisor

        watch_supervisor(supervisor_pid)
    try:
        w.run_process(handler, url=cfg.shown_url if cfg.url_given or not decorated else None, burst=burst, close=made)
    except REFUSED as exc:
        raise refused(exc) from None


@cli.command()
@click.option(
    "--host", default="127.0.0.1", show_default=True, help="Address to bind; any but loopback needs --token-env."
)
@click.option("--port", type=click.IntRange(0, 65535), default=8080, show_default=True)
@click.option("--read-only", is_flag=True, help="Refuse every action (requeue, purge).")
@click.option(
    "--token-env",
    metavar="VAR",
    default=None,
    help="Environment variable holding the access token (Bearer header or login form).",
)
@click.option(
    "--sqs",
    is_flag=True,
    help="Serve the SQS wire API on the same port too (keys from "
    "KEYQUEUE_SQS_ACCESS_KEY_ID and KEYQUEUE_SQS_SECRET_ACCESS_KEY).",
)
@click.option(
    "--sqs-shards",
    type=click.IntRange(1, MAX_SHARDS),
    default=1,
    show_default=True,
    help="Shards of each queue the SQS API's CreateQueue makes (a FIFO queue's with "
    "DeduplicationScope messageGroup only); existing queues keep theirs.",
)
@LOG_LEVEL
@pass_config
def serve(
    cfg: Config,
    host: str,
    port: int,
    read_only: bool,
    token_env: str | None,
    sqs: bool,
    sqs_shards: int,
    log_level: str,
) -> None:
    """Run the web dashboard, the JSON API and /metrics (and with --sqs the SQS API)."""
    from ..serve import serve_app

    token = None
    if token_env is not None:
        # without the whitespace around it: a token read from a file or a Kubernetes secret often
        # ends in a newline, which no Authorization header can carry
        token = os.environ.get(token_env, "").strip() or None
        if token is None:
            raise ConfigurationError(f"--token-env {token_env}: that variable is unset or empty (or blank)")
    keys = None
    if sqs_shards > 1 and not sqs:
        raise ConfigurationError("--sqs-shards is for the SQS API: give --sqs too")
    if sqs:
        names = ("KEYQUEUE_SQS_ACCESS_KEY_ID", "KEYQUEUE_SQS_SECRET_ACCESS_KEY")
        missing = [n for n in names if not os.environ.get(n)]
        if missing:
            raise ConfigurationError(f"--sqs needs {' and '.join(missing)} set (and not empty)")
        keys = (os.environ[names[0]], os.environ[names[1]])
    setup_logging(log_level)
    serve_app(
        url=cfg.url or DEFAULT_URL,
        shown_url=cfg.shown_url,
        prefix=cfg.prefix,
        host=host,
        port=port,
        read_only=read_only,
        token=token,
        sqs=keys,
        queue_options=cfg.options(),
        log_level=log_level,
        sqs_shards=sqs_shards,
    )


@cli.command()
@click.option("-n", "--messages", type=click.IntRange(min=1), default=2000, show_default=True)
@click.option("--workers", type=click.IntRange(min=2), default=3, show_default=True)
@pass_config
def demo(cfg: Config, messages: int, workers: int) -> None:
    """Producers, worker processes and a reaper on a Redis of its own (or --url); one
    worker is SIGKILLed mid-batch; every message is accounted for."""
    from ..demo import run_demo

    result = run_demo(cfg.url, prefix=cfg.prefix, messages=messages, workers=workers)
    if not result.ok:
        raise click.ClickException("messages were lost")
