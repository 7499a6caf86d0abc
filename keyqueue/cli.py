"""The ``keyqueue`` command line (click). Thin: every command calls the library; errors
are turned into one line and an exit code in one place (``main``)."""

from __future__ import annotations

import importlib
import json
import logging
import re
import sys
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any, Callable, Iterator

import click
import redis

from . import __version__
from .connection import DEFAULT_URL, from_url, redact
from .errors import InvalidArgument, KeyQueueError
from .queue import BATCH, Queue, list_queues

EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2
HANDLER_RE = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")
SOURCES_PEEK = ("waiting", "processing", "delayed", "dead")
SOURCES_PURGE = ("waiting", "delayed", "dead", "all")


@dataclass
class Config:
    url: str | None
    prefix: str
    scripting: bool

    _client: redis.Redis | None = None

    def client(self) -> redis.Redis:
        if self._client is None:
            self._client = from_url(self.url or DEFAULT_URL)
        return self._client

    def queue(self, name: str) -> Queue:
        return Queue(name, client=self.client(), prefix=self.prefix, scripting=self.scripting)

    @property
    def shown_url(self) -> str:
        return redact(self.url or DEFAULT_URL)


pass_config = click.make_pass_decorator(Config)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--url", envvar="KEYQUEUE_URL", default=None, metavar="URL",
              help=f"Redis URL (env KEYQUEUE_URL; default {DEFAULT_URL}).")
@click.option("--prefix", default="kq", show_default=True, help="Key prefix of the queues.")
@click.option("--no-scripting", is_flag=True, help="Use the script-free protocol (no EVAL).")
@click.pass_context
def cli(ctx: click.Context, url: str | None, prefix: str, no_scripting: bool) -> None:
    """keyqueue: a reliable, SQS-like work queue on plain Redis."""
    ctx.obj = Config(url, prefix, not no_scripting)


@cli.command()
def version() -> None:
    """Print keyqueue's version."""
    click.echo(__version__)


@cli.command("ls")
@pass_config
def ls(cfg: Config) -> None:
    """List the queues under the prefix."""
    for name in list_queues(cfg.client(), cfg.prefix):
        click.echo(name)


@cli.command("len")
@click.argument("queue")
@pass_config
def length(cfg: Config, queue: str) -> None:
    """Print how many messages wait to be claimed (only the number)."""
    click.echo(cfg.queue(queue).length())


@cli.command()
@click.argument("queue", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_config
def stats(cfg: Config, queue: str | None, as_json: bool) -> None:
    """Counts of waiting, in-flight, delayed and dead messages (one queue, or all)."""
    names = [queue] if queue else list_queues(cfg.client(), cfg.prefix)
    rows = {name: asdict(cfg.queue(name).stats()) for name in names}
    if as_json:
        click.echo(json.dumps(rows[queue] if queue else rows, indent=None if queue else 2))
        return
    header = f"{'queue':<24} {'waiting':>9} {'processing':>10} {'delayed':>9} {'dead':>9} {'oldest age':>11}"
    click.echo(header)
    for name, s in rows.items():
        age = "-" if s["oldest_age"] is None else f"{s['oldest_age']:.1f}s"
        click.echo(f"{name:<24} {s['waiting']:>9} {s['processing']:>10} {s['delayed']:>9} "
                   f"{s['dead']:>9} {age:>11}")


@cli.command()
@click.argument("queue")
@click.argument("bodies", nargs=-1)
@click.option("--delay", type=float, default=0.0, show_default=True, help="Seconds before they are visible.")
@pass_config
def enqueue(cfg: Config, queue: str, bodies: tuple[str, ...], delay: float) -> None:
    """Enqueue BODIES, or one message per line of standard input when none are given."""
    q = cfg.queue(queue)
    items = list(bodies) if bodies else [line.rstrip("\n") for line in sys.stdin]
    ids: list[str] = []
    for i in range(0, len(items), BATCH):
        ids.extend(q.enqueue_many(items[i : i + BATCH], delay=delay))
    for mid in ids:
        click.echo(mid)


@cli.command()
@click.argument("queue")
@click.option("--source", type=click.Choice(SOURCES_PEEK), default="waiting", show_default=True)
@click.option("-n", "count", type=click.IntRange(min=0), default=10, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@pass_config
def peek(cfg: Config, queue: str, source: str, count: int, as_json: bool) -> None:
    """Show messages without claiming them."""
    for m in cfg.queue(queue).peek(count, source=source):  # type: ignore[arg-type]
        body = m.body.decode("utf-8", "backslashreplace")
        if as_json:
            click.echo(json.dumps({"id": m.id, "receives": m.receives, "enqueued_at": m.enqueued_at,
                                   "deadline": m.deadline, "last_error": m.last_error, "body": body}))
        else:
            error = f"  last_error={m.last_error!r}" if m.last_error else ""
            click.echo(f"{m.id}  receives={m.receives}{error}  {body}")


@contextmanager
def progress(label: str, total: int) -> Iterator[Callable[[int], None]]:
    """A progress bar on stderr for work of more than one batch."""
    if total <= BATCH:
        yield lambda n: None
        return
    with click.progressbar(length=total, label=label, file=sys.stderr) as bar:
        yield bar.update


@cli.command()
@click.argument("queue")
@click.argument("ids", nargs=-1)
@click.option("--source", type=click.Choice(("dead", "processing")), default="dead", show_default=True)
@pass_config
def requeue(cfg: Config, queue: str, ids: tuple[str, ...], source: str) -> None:
    """Put dead (or in-flight) messages back on the queue with receives reset to 0: the
    given IDS, or all of them."""
    q = cfg.queue(queue)
    s = q.stats()
    total = len(ids) if ids else (s.dead if source == "dead" else s.processing)
    with progress(f"requeue {source}", total) as update:
        n = q.requeue(list(ids) if ids else None, source=source, progress=update)  # type: ignore[arg-type]
    click.echo(f"requeued {n}")


@cli.command()
@click.argument("queue")
@click.option("--source", type=click.Choice(SOURCES_PURGE), default="waiting", show_default=True)
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@pass_config
def purge(cfg: Config, queue: str, source: str, yes: bool) -> None:
    """Delete every message of a source ('all': every message)."""
    q = cfg.queue(queue)
    s = q.stats()
    total = {"waiting": s.waiting, "delayed": s.delayed, "dead": s.dead,
             "all": s.waiting + s.delayed + s.dead + s.processing}[source]
    if not yes:
        click.confirm(f"Delete {total} {source} messages of {queue!r} at {cfg.shown_url}?", abort=True)
    with progress(f"purge {source}", total) as update:
        n = q.purge(source=source, progress=update)  # type: ignore[arg-type]
    click.echo(f"purged {n}")


@cli.command()
@click.argument("queue")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@pass_config
def destroy(cfg: Config, queue: str, yes: bool) -> None:
    """Delete the queue: every message, its settings and its keys."""
    q = cfg.queue(queue)
    if not yes:
        click.confirm(f"Destroy queue {queue!r} at {cfg.shown_url} with all its messages?", abort=True)
    q.destroy()
    click.echo(f"destroyed {queue}")


@cli.command("check")
@click.argument("queue")
@click.option("--repair", is_flag=True, help="Fix what is found (safe while workers run).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option("--settle", type=click.FloatRange(min=0), default=1.0, show_default=True,
              help="Seconds before the second look that confirms a finding.")
@pass_config
def check_command(cfg: Config, queue: str, repair: bool, as_json: bool, settle: float) -> None:
    """Check that every message of QUEUE is in exactly one state (an fsck); exit 1 while
    problems remain. Uses no scripts."""
    from .check import check_queue

    report = check_queue(cfg.queue(queue), repair=repair, settle=settle)
    click.echo(json.dumps(report.to_dict()) if as_json else str(report))
    if not report.consistent:
        left = sum(len(p.ids) for p in report.problems if not p.repaired)
        hint = "" if repair else "; --repair fixes what it can"
        raise click.ClickException(f"queue {queue!r} is inconsistent: {left} unrepaired problems{hint}")


def setup_logging(level: str) -> None:
    logging.basicConfig(level=getattr(logging, level.upper()), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")


LOG_LEVEL = click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]),
                         default="info", show_default=True)


@cli.command()
@click.argument("queues", nargs=-1)
@click.option("--interval", type=click.FloatRange(min=0, min_open=True), default=1.0, show_default=True)
@LOG_LEVEL
@pass_config
def reaper(cfg: Config, queues: tuple[str, ...], interval: float, log_level: str) -> None:
    """Reap QUEUES (default: every queue) until SIGINT/SIGTERM."""
    from .reaper import Reaper

    setup_logging(log_level)
    r = Reaper(list(queues) or None, url=cfg.url or DEFAULT_URL, prefix=cfg.prefix,
               interval=interval, scripting=cfg.scripting)
    logging.getLogger("keyqueue.reaper").info(
        "reaping %s every %.3gs at %s", ", ".join(queues) or "every queue", interval, cfg.shown_url)
    r.run()


def load_handler(spec: str) -> Callable[..., Any]:
    if not HANDLER_RE.fullmatch(spec):
        raise InvalidArgument(f"handler must be MODULE:FUNC (like 'app.tasks:send'), not {spec!r}")
    module_name, func_name = spec.split(":")
    sys.path.insert(0, "")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise InvalidArgument(f"cannot import module {module_name!r}: {exc}") from None
    func = getattr(module, func_name, None)
    if not callable(func):
        raise InvalidArgument(f"module {module_name!r} has no function {func_name!r}")
    return func


@cli.command()
@click.argument("handler")
@click.option("-q", "--queue", "queues", multiple=True, required=True,
              help="Queue to serve; repeat for several, in priority order.")
@click.option("-c", "--concurrency", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--burst", is_flag=True, help="Exit when the queues are empty.")
@click.option("--grace", type=click.FloatRange(min=0), default=30.0, show_default=True,
              help="Seconds in-flight messages get to finish on SIGTERM/SIGINT.")
@click.option("--visibility-timeout", type=click.FloatRange(min=0, min_open=True), default=None)
@LOG_LEVEL
@pass_config
def worker(cfg: Config, handler: str, queues: tuple[str, ...], concurrency: int, burst: bool,
           grace: float, visibility_timeout: float | None, log_level: str) -> None:
    """Run HANDLER (MODULE:FUNC, called with each message) on the queues."""
    from .worker import Worker

    func = load_handler(handler)
    setup_logging(log_level)
    qs = [cfg.queue(name) for name in queues]
    w = Worker(qs, func, concurrency=concurrency, grace_period=grace,
               visibility_timeout=visibility_timeout)
    logging.getLogger("keyqueue.worker").info(
        "worker %s on %s at %s, concurrency %d", handler, ", ".join(queues), cfg.shown_url, concurrency)
    w.run(burst=burst)


@cli.command()
@click.option("-n", "--messages", type=click.IntRange(min=1), default=2000, show_default=True)
@click.option("--workers", type=click.IntRange(min=2), default=3, show_default=True)
@pass_config
def demo(cfg: Config, messages: int, workers: int) -> None:
    """Producers, worker processes and a reaper on a Redis of its own (or --url); one
    worker is SIGKILLed mid-batch; every message is accounted for."""
    from .demo import run_demo

    result = run_demo(cfg.url, prefix=cfg.prefix, messages=messages, workers=workers)
    if not result.ok:
        raise click.ClickException("messages were lost")


def main(argv: list[str] | None = None) -> None:
    """Entry point: exit 0 on success, 1 on a runtime failure, 2 on bad usage or input."""
    try:
        cli.main(args=argv, prog_name="keyqueue", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("Aborted.", err=True)
        sys.exit(EXIT_FAILURE)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except KeyQueueError as exc:  # bad input (also a ValueError) or a runtime failure
        click.echo(f"Error: {exc}", err=True)
        sys.exit(EXIT_USAGE if isinstance(exc, ValueError) else EXIT_FAILURE)
    except redis.ConnectionError as exc:
        click.echo(f"Error: cannot reach Redis: {exc}", err=True)
        sys.exit(EXIT_FAILURE)
    except redis.RedisError as exc:
        click.echo(f"Error: Redis said: {exc}", err=True)
        sys.exit(EXIT_FAILURE)
    sys.exit(EXIT_OK)
