"""The ``keyqueue`` command line (click). Thin: every command calls the library; errors
are turned into one line and an exit code in one place (``main``)."""

from __future__ import annotations

import difflib
import importlib
import json
import logging
import os
import re
import sys
from contextlib import contextmanager
from dataclasses import asdict, dataclass, fields
from typing import IO, TYPE_CHECKING, Any, Callable, Iterator

import click
import redis
from click.core import ParameterSource

from . import __version__
from .connection import DEFAULT_URL, from_url, redact
from .errors import ConfigurationError, InvalidArgument, KeyQueueError, MessageTooLarge
from .keys import unknown_queue
from .message import json_body
from .queue import BATCH, Queue, list_queues
from .settings import QueueSettings, check_seconds, validate

if TYPE_CHECKING:
    from click._termui_impl import ProgressBar

EXIT_OK, EXIT_FAILURE, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
HANDLER_RE = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")
SOURCES_PEEK = ("waiting", "processing", "delayed", "dead")
SOURCES_PURGE = ("waiting", "delayed", "dead", "all")
#: Bytes read from stdin at a time by ``enqueue``; what has arrived is sent at once.
READ_CHUNK = 1 << 16
#: How each setting is written after ``--set NAME=``.
SETTING_TYPES: dict[str, type] = {f.name: (int if f.name in ("max_receives", "max_body_bytes") else float)
                                  for f in fields(QueueSettings)}
GIVEN = (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)


@dataclass
class Config:
    url: str | None
    prefix: str
    scripting: bool
    #: which of the group options the user gave (command line or environment)
    url_given: bool = False
    prefix_given: bool = False
    scripting_given: bool = False
    min_replicas: int = 0
    replica_timeout: float = 1.0
    replicas_given: bool = False

    _client: redis.Redis | None = None

    def options(self) -> dict[str, Any]:
        """How every Queue the CLI builds talks to Redis."""
        return dict(scripting=self.scripting, min_replicas=self.min_replicas,
                    replica_timeout=self.replica_timeout)

    def client(self) -> redis.Redis:
        if self._client is None:
            self._client = from_url(self.url or DEFAULT_URL)
        return self._client

    def queue(self, name: str) -> Queue:
        return Queue(name, client=self.client(), prefix=self.prefix, **self.options())

    def existing(self, name: str) -> Queue:
        """The queue, or a one-line error naming the closest registered names (a typo must
        not read as an empty queue)."""
        q = self.queue(name)
        names = list_queues(self.client(), self.prefix)
        if name not in names:
            raise click.ClickException(unknown_queue(name, self.prefix, self.shown_url, names))
        return q

    @property
    def shown_url(self) -> str:
        return redact(self.url or DEFAULT_URL)

    def served_queues(self, queue_class: Any, names: tuple[str, ...], like: list[Any] | None,
                      made: list[Any]) -> list[Any]:
        """The queues ``keyqueue worker`` serves: ``names``, or a decorated worker's own
        queues (``like``); a decorated worker's queues keep what the group options given do
        not override. The one client made from the URL is put in ``made``, to be closed."""
        def client() -> Any:
            if not made:
                made.append(from_url(self.url or DEFAULT_URL, queue_class.client_class))
            return made[0]

        if like is None:
            return [queue_class(name, client=client(), prefix=self.prefix, **self.options()) for name in names]
        if not names and not (self.url_given or self.prefix_given or self.scripting_given or self.replicas_given):
            return like
        pairs = [(name, like[0]) for name in names] if names else [(q.name, q) for q in like]
        return [queue_class(name, client=client() if self.url_given else q.client,
                            prefix=self.prefix if self.prefix_given else q.prefix,
                            scripting=self.scripting if self.scripting_given else q.scripting,
                            min_replicas=self.min_replicas if self.replicas_given else q.min_replicas,
                            replica_timeout=self.replica_timeout if self.replicas_given else q.replica_timeout)
                for name, q in pairs]


pass_config = click.make_pass_decorator(Config)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--url", envvar="KEYQUEUE_URL", default=None, metavar="URL",
              help=f"Redis URL (env KEYQUEUE_URL; default {DEFAULT_URL}).")
@click.option("--prefix", default="kq", show_default=True, help="Key prefix of the queues.")
@click.option("--no-scripting", is_flag=True, help="Use the script-free protocol (no EVAL).")
@click.option("--min-replicas", type=click.IntRange(min=0), default=0, show_default=True,
              help="Replicas that must acknowledge every write (WAIT), else NotReplicated.")
@click.option("--replica-timeout", type=click.FloatRange(min=0, min_open=True, max=3600), default=1.0,
              show_default=True, help="Seconds a write waits for --min-replicas.")
@click.version_option(__version__, "--version", prog_name="keyqueue", message="%(prog)s %(version)s")
@click.pass_context
def cli(ctx: click.Context, url: str | None, prefix: str, no_scripting: bool, min_replicas: int,
        replica_timeout: float) -> None:
    """keyqueue: a reliable, SQS-like work queue on plain Redis."""
    if url is not None and not url.strip():
        raise ConfigurationError("--url is empty: give a Redis URL such as redis://HOST:6379/0")
    if url is None and os.environ.get("KEYQUEUE_URL") is not None:  # click reads "" as unset
        raise ConfigurationError("KEYQUEUE_URL is empty: set it to a Redis URL such as "
                                 "redis://HOST:6379/0, or unset it")
    ctx.obj = Config(url, prefix, not no_scripting,
                     url_given=ctx.get_parameter_source("url") in GIVEN,
                     prefix_given=ctx.get_parameter_source("prefix") in GIVEN,
                     scripting_given=ctx.get_parameter_source("no_scripting") in GIVEN,
                     min_replicas=min_replicas, replica_timeout=replica_timeout,
                     replicas_given=any(ctx.get_parameter_source(p) in GIVEN
                                        for p in ("min_replicas", "replica_timeout")))


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
    click.echo(cfg.existing(queue).length())


@cli.command()
@click.argument("queue", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_config
def stats(cfg: Config, queue: str | None, as_json: bool) -> None:
    """Counts of waiting, in-flight, delayed and dead messages (one queue, or all)."""
    if queue:
        rows = {queue: asdict(cfg.existing(queue).stats())}
    else:
        rows = {name: asdict(cfg.queue(name).stats()) for name in list_queues(cfg.client(), cfg.prefix)}
    if as_json:
        click.echo(json.dumps(rows[queue] if queue else rows, indent=None if queue else 2))
        return
    header = f"{'queue':<24} {'waiting':>9} {'processing':>10} {'delayed':>9} {'dead':>9} {'oldest age':>11}"
    click.echo(header)
    for name, s in rows.items():
        age = "-" if s["oldest_age"] is None else f"{s['oldest_age']:.1f}s"
        click.echo(f"{name:<24} {s['waiting']:>9} {s['processing']:>10} {s['delayed']:>9} "
                   f"{s['dead']:>9} {age:>11}")


# -- enqueue ----------------------------------------------------------------------------


class Oversized(Exception):
    """A record of standard input over max_body_bytes (``size`` is a lower bound unless
    ``complete``): it and everything after it stay unsent."""

    def __init__(self, record: int, size: int, complete: bool) -> None:
        super().__init__(record, size, complete)
        self.record, self.size, self.complete = record, size, complete


def read_records(stream: IO[bytes], sep: bytes, limit: int) -> Iterator[list[bytes]]:
    """The records of ``stream`` split on ``sep`` (a last one without ``sep`` counts), as
    lists of what has arrived so far: a slow producer's lines go out as they come, a fast
    one's in chunks. Holds at most one chunk plus one record: a record over ``limit`` bytes
    raises Oversized once the records before it are yielded, without reading it whole."""
    read = getattr(stream, "read1", stream.read)
    partial: list[bytes] = []  # the pieces of a record that has not ended yet
    partial_len = 0
    done = 0  # records yielded
    while True:
        chunk = read(READ_CHUNK)
        if not chunk:
            break
        if sep not in chunk:
            partial.append(chunk)
            partial_len += len(chunk)
            if partial_len > limit:
                raise Oversized(done + 1, partial_len, complete=False)
            continue
        records = chunk.split(sep)
        if partial:
            records[0] = b"".join(partial) + records[0]
        last = records.pop()
        partial, partial_len = ([last], len(last)) if last else ([], 0)
        if max(map(len, records)) > limit:
            bad = next(i for i, rec in enumerate(records) if len(rec) > limit)
            if bad:
                yield records[:bad]
            raise Oversized(done + bad + 1, len(records[bad]), complete=True)
        yield records
        done += len(records)
        if partial_len > limit:
            raise Oversized(done + 1, partial_len, complete=False)
    if partial:
        yield [b"".join(partial)]


@cli.command()
@click.argument("queue")
@click.argument("bodies", nargs=-1)
@click.option("--delay", type=float, default=0.0, show_default=True, help="Seconds before they are visible.")
@click.option("-0", "--null", "null", is_flag=True,
              help="Standard input holds NUL-separated bodies (a body may hold newlines).")
@pass_config
def enqueue(cfg: Config, queue: str, bodies: tuple[str, ...], delay: float, null: bool) -> None:
    """Enqueue BODIES, or each line of standard input as one message of its exact bytes
    (without the newline); prints one id per line. Standard input is sent in batches as it
    is read."""
    check_seconds("delay", delay)
    q = cfg.queue(queue)
    if bodies and null:
        raise click.UsageError("--null applies to standard input: give no BODY with it")
    if bodies:
        for i in range(0, len(bodies), BATCH):
            write_ids(q.enqueue_many(bodies[i : i + BATCH], delay=delay))
        return
    limit = q.settings.max_body_bytes
    show = sys.stderr.isatty() and not sys.stdout.isatty()  # ids on a terminal are progress enough
    try:
        with progress("enqueued", None, show=show) as update:
            for records in read_records(sys.stdin.buffer, b"\0" if null else b"\n", limit):
                for i in range(0, len(records), BATCH):
                    batch = records[i : i + BATCH]
                    write_ids(q.enqueue_many(batch, delay=delay))
                    update(len(batch))
    except Oversized as exc:
        size = exc.size if exc.complete else f"more than {limit}"
        raise MessageTooLarge(
            f"message body of {size} bytes (record {exc.record} of standard input) exceeds "
            f"max_body_bytes={limit} of queue {queue!r}; the {exc.record - 1} before it were "
            "enqueued, nothing after") from None


def write_ids(ids: list[str]) -> None:
    if ids:
        sys.stdout.write("\n".join(ids) + "\n")
        sys.stdout.flush()


# -- reading and operating a queue ------------------------------------------------------

#: Control characters (C0, DEL, C1) shown escaped, so a body cannot move the cursor,
#: recolour the terminal or break the one-message-a-line output.
_ESCAPES = {c: f"\\x{c:02x}" for c in [*range(0x20), *range(0x7F, 0xA0)]}
_ESCAPES.update({0x09: "\\t", 0x0A: "\\n", 0x0D: "\\r"})


def shown_body(body: bytes) -> str:
    """A body for a human on one line: bytes that are not UTF-8 and control characters
    are escaped (\\xff, \\n)."""
    return body.decode("utf-8", "backslashreplace").translate(_ESCAPES)


@cli.command()
@click.argument("queue")
@click.option("--source", type=click.Choice(SOURCES_PEEK), default="waiting", show_default=True)
@click.option("-n", "count", type=click.IntRange(min=0), default=10, show_default=True)
@click.option("--json", "as_json", is_flag=True,
              help="One JSON object per line; a body that is not UTF-8 is base64 with body_base64 true.")
@pass_config
def peek(cfg: Config, queue: str, source: str, count: int, as_json: bool) -> None:
    """Show messages without claiming them."""
    for m in cfg.existing(queue).peek(count, source=source):  # type: ignore[arg-type]
        if as_json:
            body, b64 = json_body(m.body)
            click.echo(json.dumps({"id": m.id, "receives": m.receives, "enqueued_at": m.enqueued_at,
                                   "deadline": m.deadline, "last_error": m.last_error, "body": body,
                                   "body_base64": b64}))
        else:
            error = f"  last_error={m.last_error!r}" if m.last_error else ""
            click.echo(f"{m.id}  receives={m.receives}{error}  {shown_body(m.body)}")


@contextmanager
def progress(label: str, total: int | None, *, show: bool | None = None) -> Iterator[Callable[[int], None]]:
    """A progress bar on stderr for work of more than one batch, shown only when stderr is
    a terminal (``show`` overrides that). ``total`` None: a count of unknown length (the
    bar appears once more than a batch is done)."""
    if show is None:
        show = sys.stderr.isatty()
    if not show or (total is not None and total <= BATCH):
        yield lambda n: None
        return
    if total is not None:
        with click.progressbar(length=total, label=label, file=sys.stderr) as bar:
            yield bar.update
        return
    counter = Counter(label)
    try:
        yield counter.update
    finally:
        counter.close()


class Counter:
    """Progress of unknown length: a moving bar and the count, once more than a batch is done."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.done = 0
        self.bar: ProgressBar[int] | None = None

    def update(self, n: int) -> None:
        self.done += n
        if self.bar is not None:
            self.bar.update(n)
        elif self.done > BATCH:
            unknown: Iterator[int] = iter(self._nothing())  # no length hint
            self.bar = click.progressbar(unknown, label=self.label, show_pos=True, file=sys.stderr)
            self.bar.__enter__()
            self.bar.update(self.done)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.__exit__(None, None, None)

    @staticmethod
    def _nothing() -> Iterator[int]:
        yield from ()


@cli.command()
@click.argument("queue")
@click.argument("ids", nargs=-1)
@click.option("--source", type=click.Choice(("dead", "processing")), default="dead", show_default=True)
@pass_config
def requeue(cfg: Config, queue: str, ids: tuple[str, ...], source: str) -> None:
    """Put dead (or in-flight) messages back on the queue with receives reset to 0: the
    given IDS, or all of them. Exit 1 when some IDS are not in the source."""
    q = cfg.existing(queue)
    if not ids:
        s = q.stats()
        total = s.dead if source == "dead" else s.processing
        with progress(f"requeue {source}", total) as update:
            n = q.requeue(None, source=source, progress=update)  # type: ignore[arg-type]
        click.echo(f"requeued {n}")
        return
    # One call per id: the library's batched requeue returns only a count, and the user
    # must learn which ids were not there.
    wanted = list(dict.fromkeys(ids))
    missing: list[str] = []
    n = 0
    with progress(f"requeue {source}", len(wanted)) as update:
        for mid in wanted:
            got = q.requeue([mid], source=source)  # type: ignore[arg-type]
            n += got
            if not got:
                missing.append(mid)
            update(1)
    click.echo(f"requeued {n}")
    if missing:
        where = "dead letters" if source == "dead" else "in-flight messages"
        raise click.ClickException(f"{len(missing)} of {len(wanted)} ids not among the {where} of "
                                   f"{queue!r}: {' '.join(missing)}")


@cli.command()
@click.argument("queue")
@click.option("--source", type=click.Choice(SOURCES_PURGE), default="waiting", show_default=True)
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@pass_config
def purge(cfg: Config, queue: str, source: str, yes: bool) -> None:
    """Delete every message of a source ('all': every message)."""
    q = cfg.existing(queue)
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
    q = cfg.existing(queue)
    if not yes:
        click.confirm(f"Destroy queue {queue!r} at {cfg.shown_url} with all its messages?", abort=True)
    q.destroy()
    click.echo(f"destroyed {queue}")


# -- config -----------------------------------------------------------------------------


def parse_setting(text: str) -> tuple[str, Any]:
    """``NAME=VALUE`` of ``--set``, typed as the setting (max_receives: none or empty = no limit)."""
    name, sep, raw = text.partition("=")
    name, raw = name.strip(), raw.strip()
    if not sep:
        raise InvalidArgument(f"--set takes NAME=VALUE, not {text!r}")
    if name not in SETTING_TYPES:
        close = difflib.get_close_matches(name, SETTING_TYPES, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise InvalidArgument(f"unknown setting {name!r}: {hint}settings are {', '.join(SETTING_TYPES)}")
    if name == "max_receives" and raw.lower() in ("", "none"):
        return name, None
    try:
        value = SETTING_TYPES[name](raw)
    except ValueError:
        value = None
    if value is None or name == "max_receives" and value < 1:
        kind = {"max_receives": "a whole number >= 1, or none for no limit",
                "max_body_bytes": "a whole number of bytes"}.get(name, "a number of seconds")
        raise InvalidArgument(f"{name} must be {kind}, not {raw!r}")
    return name, value


def setting_text(value: float | int | None) -> str:
    if value is None:
        return "none"
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


@cli.command("config")
@click.argument("queue")
@click.option("--set", "assignments", multiple=True, metavar="NAME=VALUE",
              help="Write a setting (repeatable; max_receives=none: no limit). All are checked "
                   "before any is written.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object keyed by setting name.")
@pass_config
def config_command(cfg: Config, queue: str, assignments: tuple[str, ...], as_json: bool) -> None:
    """Print the settings in force for QUEUE (or change them with --set)."""
    values = dict(parse_setting(a) for a in assignments)
    validate(QueueSettings(), values)  # every value checked before anything is written
    q = cfg.existing(queue)
    if values:
        q = Queue(queue, client=cfg.client(), prefix=cfg.prefix, **cfg.options(), **values)
    settings = asdict(q.settings)
    if as_json:
        click.echo(json.dumps(settings))
        return
    for name, value in settings.items():
        click.echo(f"{name:<20}{setting_text(value)}")


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
    from .fsck import WRONG_TYPE, check_queue

    report = check_queue(cfg.existing(queue), repair=repair, settle=settle)
    click.echo(json.dumps(report.to_dict()) if as_json else str(report))
    if not report.consistent:
        left = [p for p in report.problems if not p.repaired]
        count = sum(len(p.ids) for p in left)
        wrong = [p for p in left if p.kind == WRONG_TYPE]
        hint = ("" if repair or len(wrong) == len(left) else "; --repair fixes what it can")
        if wrong:  # repair never touches them: say the way out
            hint += ("; a key of the wrong type is never changed by keyqueue: inspect it, then "
                     "DEL or RENAME it and run check --repair (a missing item hash is then repaired)")
        raise click.ClickException(f"queue {queue!r} is inconsistent: {count} unrepaired "
                                   f"problem{'s' if count != 1 else ''}{hint}")


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
               interval=interval, **cfg.options())
    logging.getLogger("keyqueue.reaper").info(
        "reaping %s every %.3gs at %s", ", ".join(queues) or "every queue", interval, cfg.shown_url)
    r.run()


# -- worker -----------------------------------------------------------------------------


def load_handler(spec: str) -> Any:
    """The object MODULE:FUNC names: a function (plain or ``async def``), or a Worker made
    with ``@queue.worker`` (a ``keyqueue.Worker``, or a ``keyqueue.aio.Worker`` from an
    asyncio queue)."""
    from .worker.base import WorkerBase

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
    from .worker.base import WorkerBase
    from .worker.rules import is_async

    if isinstance(target, WorkerBase):
        return type(target)
    if is_async(target):
        from .worker.tasks import Worker as AsyncWorker

        return AsyncWorker
    from .worker.threads import Worker

    return Worker


#: The worker command's options that override a decorated Worker's: option name, parameter.
WORKER_OPTIONS = (("concurrency", "concurrency"), ("grace_period", "grace"),
                  ("visibility_timeout", "visibility_timeout"), ("metrics_port", "metrics_port"),
                  ("metrics_host", "metrics_host"))


@cli.command()
@click.argument("handler")
@click.option("-q", "--queue", "queues", multiple=True,
              help="Queue to serve; repeat for several, in priority order. Required unless "
                   "HANDLER is a Worker made with @queue.worker (which names its queues).")
@click.option("-c", "--concurrency", type=click.IntRange(min=1), default=None,
              help="Handlers at once: threads for a plain function (default 1), tasks on one "
                   "event loop for an async one (default 10).")
@click.option("--burst", is_flag=True, help="Exit when the queues are empty.")
@click.option("--grace", type=click.FloatRange(min=0), default=30.0, show_default=True,
              help="Seconds in-flight messages get to finish on SIGTERM/SIGINT.")
@click.option("--visibility-timeout", type=click.FloatRange(min=0, min_open=True), default=None)
@click.option("--metrics-port", type=click.IntRange(0, 65535), default=None, metavar="N",
              help="Serve the worker's Prometheus metrics on this port (needs keyqueue[web]).")
@click.option("--metrics-host", default="127.0.0.1", show_default=True, help="Address of --metrics-port.")
@LOG_LEVEL
@click.pass_context
def worker(ctx: click.Context, /, handler: str, queues: tuple[str, ...], burst: bool, log_level: str,
           **options: Any) -> None:
    """Run HANDLER (MODULE:FUNC, called with each message) on the queues. HANDLER may be a
    Worker made with @queue.worker: its queues and options apply, and options given here
    override them. An `async def` HANDLER (or one decorated on a keyqueue.aio.Queue) runs
    on asyncio, with keyqueue.aio.Worker."""
    cfg = ctx.find_object(Config)
    assert cfg is not None
    target = load_handler(handler)
    kind = worker_class(target)
    decorated = isinstance(target, kind)
    given = {name: options[param] for name, param in WORKER_OPTIONS if ctx.get_parameter_source(param) in GIVEN}
    if not decorated and not queues:
        raise click.UsageError(f"Missing option '-q' / '--queue': {handler} is a plain function, "
                               "so name the queues it serves", ctx)
    made: list[Any] = []  # the client made from --url (made once, on first use)
    qs = cfg.served_queues(kind.queue_class, queues, target.queues if decorated else None, made)
    w = target.with_options(queues=qs, **given) if decorated else kind(qs, target, **given)
    setup_logging(log_level)
    w.run_process(handler, url=cfg.shown_url if cfg.url_given or not decorated else None, burst=burst,
                  close=made)


@cli.command()
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to bind; any but loopback needs --token-env.")
@click.option("--port", type=click.IntRange(0, 65535), default=8080, show_default=True)
@click.option("--read-only", is_flag=True, help="Refuse every action (requeue, purge).")
@click.option("--token-env", metavar="VAR", default=None,
              help="Environment variable holding the access token (Bearer header or login form).")
@click.option("--sqs", is_flag=True, help="Serve the SQS wire API on the same port too (keys from "
              "KEYQUEUE_SQS_ACCESS_KEY_ID and KEYQUEUE_SQS_SECRET_ACCESS_KEY).")
@LOG_LEVEL
@pass_config
def serve(cfg: Config, host: str, port: int, read_only: bool, token_env: str | None, sqs: bool,
          log_level: str) -> None:
    """Run the web dashboard, the JSON API and /metrics (and with --sqs the SQS API)."""
    from .serve import serve_app

    token = None
    if token_env is not None:
        # without the whitespace around it: a token read from a file or a Kubernetes secret often
        # ends in a newline, which no Authorization header can carry
        token = os.environ.get(token_env, "").strip() or None
        if token is None:
            raise ConfigurationError(f"--token-env {token_env}: that variable is unset or empty (or blank)")
    keys = None
    if sqs:
        names = ("KEYQUEUE_SQS_ACCESS_KEY_ID", "KEYQUEUE_SQS_SECRET_ACCESS_KEY")
        missing = [n for n in names if not os.environ.get(n)]
        if missing:
            raise ConfigurationError(f"--sqs needs {' and '.join(missing)} set (and not empty)")
        keys = (os.environ[names[0]], os.environ[names[1]])
    setup_logging(log_level)
    serve_app(url=cfg.url or DEFAULT_URL, shown_url=cfg.shown_url, prefix=cfg.prefix, host=host, port=port,
              read_only=read_only, token=token, sqs=keys, queue_options=cfg.options(), log_level=log_level)


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
    """Entry point: exit 0 on success, 1 on a runtime failure, 2 on bad usage or input,
    130 when interrupted (Ctrl-C)."""
    try:
        cli.main(args=argv, prog_name="keyqueue", standalone_mode=False)
    except click.exceptions.Abort as exc:
        # click turns Ctrl-C (also at a prompt) into Abort; a declined confirmation is one too
        if isinstance(exc.__cause__ or exc.__context__, KeyboardInterrupt):
            click.echo("Interrupted.", err=True)
            sys.exit(EXIT_INTERRUPTED)
        click.echo("Aborted.", err=True)
        sys.exit(EXIT_FAILURE)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except KeyQueueError as exc:  # bad input (also a ValueError) or a runtime failure
        click.echo(f"Error: {exc}", err=True)
        sys.exit(EXIT_USAGE if isinstance(exc, ValueError) else EXIT_FAILURE)
    except redis.AuthenticationError as exc:  # a ConnectionError, but Redis was reached
        click.echo(f"Error: Redis refused the credentials: {exc}", err=True)
        sys.exit(EXIT_FAILURE)
    except redis.ConnectionError as exc:
        click.echo(f"Error: cannot reach Redis: {exc}", err=True)
        sys.exit(EXIT_FAILURE)
    except redis.RedisError as exc:
        click.echo(f"Error: Redis said: {exc}", err=True)
        sys.exit(EXIT_FAILURE)
    sys.exit(EXIT_OK)
