"""The commands that read or operate a queue: ls, len, stats, peek, requeue, purge,
destroy, config and check. A named queue must be registered (``Config.existing``): a typo
must not read as an empty queue."""

from __future__ import annotations

import difflib
import json
from dataclasses import asdict, fields
from typing import Any

import click

from ..core.sources import PEEK_SOURCES, PURGE_SOURCES, REQUEUE_SOURCES, peek_source, purge_source, requeue_source
from ..errors import InvalidArgument
from ..message import json_body
from ..queue import Queue, list_queues
from ..settings import OPTIONAL, QueueSettings, validate
from .group import Config, cli, pass_config
from .progress import progress

#: How each setting is written after ``--set NAME=``.
SETTING_TYPES: dict[str, type] = {
    f.name: (
        int
        if f.name in ("max_receives", "max_body_bytes", "max_in_flight", "group_concurrency")
        else str
        if f.name == "rate_limit"
        else float
    )
    for f in fields(QueueSettings)
}


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
@click.option(
    "--shards",
    "per_shard",
    is_flag=True,
    help="Also each shard of a sharded queue (rows NAME#i; in JSON a 'shards' list).",
)
@pass_config
def stats(cfg: Config, queue: str | None, as_json: bool, per_shard: bool) -> None:
    """Counts of waiting, in-flight, delayed and dead messages (one queue, or all); a
    sharded queue's are the sums of its shards'."""
    queues = {queue: cfg.existing(queue)} if queue else {n: cfg.queue(n) for n in list_queues(cfg.client(), cfg.prefix)}
    rows: dict[str, dict[str, Any]] = {}
    shard_rows: dict[str, list[dict[str, Any]]] = {}
    for name, q in queues.items():
        rows[name] = asdict(q.stats())
        if per_shard and q.shards > 1:
            shard_rows[name] = [asdict(s) for s in q.shard_stats()]
            if as_json:
                rows[name]["shards"] = shard_rows[name]
    if as_json:
        click.echo(json.dumps(rows[queue] if queue else rows, indent=None if queue else 2))
        return
    header = (
        f"{'queue':<24} {'waiting':>9} {'processing':>10} {'delayed':>9} {'dead':>9} {'oldest age':>11} {'held':>9}"
    )
    click.echo(header)
    for name, s in rows.items():
        listed = [(name, s)] + [(f"{name}#{i}", one) for i, one in enumerate(shard_rows.get(name, []))]
        for shown, row in listed:
            age = "-" if row["oldest_age"] is None else f"{row['oldest_age']:.1f}s"
            click.echo(
                f"{shown:<24} {row['waiting']:>9} {row['processing']:>10} {row['delayed']:>9} {row['dead']:>9} "
                f"{age:>11} {row['held']:>9}"
            )


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
@click.option("--source", type=click.Choice(PEEK_SOURCES), default="waiting", show_default=True)
@click.option("-n", "count", type=click.IntRange(min=0), default=10, show_default=True)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="One JSON object per line; a body that is not UTF-8 is base64 with body_base64 true.",
)
@pass_config
def peek(cfg: Config, queue: str, source: str, count: int, as_json: bool) -> None:
    """Show messages without claiming them."""
    for m in cfg.existing(queue).peek(count, source=peek_source(source)):
        if as_json:
            body, b64 = json_body(m.body)
            click.echo(
                json.dumps(
                    {
                        "id": m.id,
                        "receives": m.receives,
                        "enqueued_at": m.enqueued_at,
                        "deadline": m.deadline,
                        "last_error": m.last_error,
                        "group": m.group,
                        "body": body,
                        "body_base64": b64,
                    }
                )
            )
        else:
            error = f"  last_error={m.last_error!r}" if m.last_error else ""
            group = f"  group={m.group}" if m.group is not None else ""
            click.echo(f"{m.id}  receives={m.receives}{group}{error}  {shown_body(m.body)}")


@cli.command()
@click.argument("queue")
@click.argument("ids", nargs=-1)
@click.option("--source", type=click.Choice(REQUEUE_SOURCES), default="dead", show_default=True)
@pass_config
def requeue(cfg: Config, queue: str, ids: tuple[str, ...], source: str) -> None:
    """Put dead (or in-flight) messages back on the queue with receives reset to 0: the
    given IDS, or all of them. Exit 1 when some IDS are not in the source."""
    q = cfg.existing(queue)
    if not ids:
        s = q.stats()
        total = s.dead if source == "dead" else s.processing
        with progress(f"requeue {source}", total) as update:
            n = q.requeue(None, source=requeue_source(source), progress=update)
        click.echo(f"requeued {n}")
        return
    # One call per id: the library's batched requeue returns only a count, and the user
    # must learn which ids were not there.
    wanted = list(dict.fromkeys(ids))
    missing: list[str] = []
    n = 0
    with progress(f"requeue {source}", len(wanted)) as update:
        for mid in wanted:
            got = q.requeue([mid], source=requeue_source(source))
            n += got
            if not got:
                missing.append(mid)
            update(1)
    click.echo(f"requeued {n}")
    if missing:
        where = "dead letters" if source == "dead" else "in-flight messages"
        raise click.ClickException(
            f"{len(missing)} of {len(wanted)} ids not among the {where} of {queue!r}: {' '.join(missing)}"
        )


@cli.command()
@click.argument("queue")
@click.option("--source", type=click.Choice(PURGE_SOURCES), default="waiting", show_default=True)
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@pass_config
def purge(cfg: Config, queue: str, source: str, yes: bool) -> None:
    """Delete every message of a source ('all': every message)."""
    q = cfg.existing(queue)
    s = q.stats()
    total = {
        "waiting": s.waiting,
        "delayed": s.delayed,
        "dead": s.dead,
        "all": s.waiting + s.delayed + s.dead + s.processing,
    }[source]
    if not yes:
        click.confirm(f"Delete {total} {source} messages of {queue!r} at {cfg.shown_url}?", abort=True)
    with progress(f"purge {source}", total) as update:
        n = q.purge(source=purge_source(source), progress=update)
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
    """``NAME=VALUE`` of ``--set``, typed as the setting (max_receives, retention,
    dead_retention, rate_limit and max_in_flight: none or empty = no limit)."""
    name, sep, raw = text.partition("=")
    name, raw = name.strip(), raw.strip()
    if not sep:
        raise InvalidArgument(f"--set takes NAME=VALUE, not {text!r}")
    if name not in SETTING_TYPES:
        close = difflib.get_close_matches(name, SETTING_TYPES, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise InvalidArgument(f"unknown setting {name!r}: {hint}settings are {', '.join(SETTING_TYPES)}")
    if name in OPTIONAL and raw.lower() in ("", "none"):
        return name, None
    try:
        value = SETTING_TYPES[name](raw)
    except ValueError:
        value = None
    if value is None or name in ("max_receives", "max_in_flight", "group_concurrency") and value < 1:
        kind = {
            "max_receives": "a whole number >= 1, or none for no limit",
            "max_in_flight": "a whole number >= 1, or none for no limit",
            "group_concurrency": "a whole number >= 1",
            "max_body_bytes": "a whole number of bytes",
            "retention": "a number of seconds, or empty for none",
            "dead_retention": "a number of seconds, or empty for none",
        }.get(name, "a number of seconds")
        raise InvalidArgument(f"{name} must be {kind}, not {raw!r}")
    return name, value


def setting_text(value: float | int | str | None) -> str:
    if value is None:
        return "none"
    if isinstance(value, str):
        return value
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


@cli.command("config")
@click.argument("queue")
@click.option(
    "--set",
    "assignments",
    multiple=True,
    metavar="NAME=VALUE",
    help="Write a setting (repeatable; max_receives=, retention=, dead_retention=, rate_limit= (N/S: N claims "
    "per S seconds) and max_in_flight= empty or none: no limit). "
    "All are checked before any is written.",
)
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
@click.option(
    "--settle",
    type=click.FloatRange(min=0),
    default=1.0,
    show_default=True,
    help="Seconds before the second look that confirms a finding.",
)
@pass_config
def check_command(cfg: Config, queue: str, repair: bool, as_json: bool, settle: float) -> None:
    """Check that every message of QUEUE is in exactly one state (an fsck); exit 1 while
    problems remain. Uses no scripts."""
    from ..fsck import WRONG_TYPE, check_queue

    report = check_queue(cfg.existing(queue), repair=repair, settle=settle)
    click.echo(json.dumps(report.to_dict()) if as_json else str(report))
    if not report.consistent:
        left = [p for p in report.problems if not p.repaired]
        count = sum(len(p.ids) for p in left)
        wrong = [p for p in left if p.kind == WRONG_TYPE]
        hint = "" if repair or len(wrong) == len(left) else "; --repair fixes what it can"
        if wrong:  # repair never touches them: say the way out
            hint += (
                "; a key of the wrong type is never changed by keyqueue: inspect it, then "
                "DEL or RENAME it and run check --repair (a missing item hash is then repaired)"
            )
        raise click.ClickException(
            f"queue {queue!r} is inconsistent: {count} unrepaired problem{'s' if count != 1 else ''}{hint}"
        )
