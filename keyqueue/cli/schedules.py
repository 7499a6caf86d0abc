"""``keyqueue schedule``: add, list, remove, pause, resume and fire a queue's schedules."""

from __future__ import annotations

import json
import math
import time

import click

from ..core.schedules import Schedule
from ..errors import InvalidSchedule
from .group import Config, cli, pass_config


@cli.group("schedule")
def schedule() -> None:
    """Periodic enqueue: schedules kept in Redis with the queue, fired by reapers, workers
    and claims."""


def seconds(option: str, text: str | None) -> float | None:
    """A number of seconds given as text: bad input is one Error line and exit 2, as the
    library's own checks."""
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        raise InvalidSchedule(f"{option} must be a number of seconds, not {text!r}") from None
    if not math.isfinite(value):
        raise InvalidSchedule(f"{option} must be a number of seconds, not {text!r}")
    return value


@schedule.command("add")
@click.argument("queue")
@click.argument("schedule_id", metavar="ID")
@click.argument("body", required=False, default="")
@click.option("--cron", metavar="EXPR", help="5 fields (minute first), or 6 with seconds first.")
@click.option("--every", metavar="S", help="Seconds between fires (>= 1), anchored at the first add.")
@click.option("--tz", default="UTC", show_default=True, help="IANA zone the cron expression is read in.")
@click.option("--jitter", metavar="S", default="0", help="Delay each message by up to S seconds.")
@click.option("--catch-up", "catch_up", default="one", show_default=True, help="one, all or none.")
@pass_config
def add(
    cfg: Config,
    queue: str,
    schedule_id: str,
    body: str,
    cron: str | None,
    every: str | None,
    tz: str,
    jitter: str,
    catch_up: str,
) -> None:
    """Add a schedule, or change it (the same again changes nothing)."""
    s = cfg.queue(queue).schedule(
        schedule_id,
        cron=cron,
        every=seconds("--every", every),
        body=body,
        tz=tz,
        jitter=seconds("--jitter", jitter) or 0.0,
        catch_up=catch_up,
    )
    click.echo(f"{s.id}: next fire {when(s.next_fire)}")


def when(t: float | None) -> str:
    if t is None:
        return "-"
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def rule(s: Schedule) -> str:
    return f"cron {s.cron}" if s.cron else f"every {s.every:g}s"


@schedule.command("ls")
@click.argument("queue")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line, with every Schedule field.")
@pass_config
def ls(cfg: Config, queue: str, as_json: bool) -> None:
    """List the queue's schedules."""
    for s in cfg.existing(queue).schedules():
        if as_json:
            click.echo(json.dumps(s.to_json()))
        else:
            click.echo(
                f"{s.id}  {rule(s)}  tz={s.tz}  next={when(s.next_fire)}  last={when(s.last_fire)}  "
                f"fired={s.fired}  missed={s.missed}{'  paused' if s.paused else ''}"
            )


def edit(name: str, method: str, doc: str) -> None:
    """``schedule NAME QUEUE ID``: the Queue method of that name, False as one Error line, exit 1."""

    @schedule.command(name, help=doc)
    @click.argument("queue")
    @click.argument("schedule_id", metavar="ID")
    @pass_config
    def command(cfg: Config, queue: str, schedule_id: str) -> None:
        if not getattr(cfg.existing(queue), method)(schedule_id):
            raise click.ClickException(f"queue {queue!r} has no schedule {schedule_id!r}")


edit("rm", "unschedule", "Remove a schedule (the messages it made stay).")
edit("pause", "pause_schedule", "Pause a schedule: nothing fires until it is resumed.")
edit("resume", "resume_schedule", "Resume a paused schedule from its next fire time after now.")


@schedule.command("fire")
@click.argument("queue")
@click.argument("schedule_id", metavar="ID")
@pass_config
def fire(cfg: Config, queue: str, schedule_id: str) -> None:
    """Enqueue one message of the schedule now (prints its id); the schedule stays as it is."""
    click.echo(cfg.existing(queue).fire_schedule(schedule_id))
