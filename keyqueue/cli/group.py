"""The ``keyqueue`` group: its options (a Config every command is handed), the exit codes
and ``main``, where every error becomes one line and an exit code."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from typing import Any

import click
import redis
from click.core import ParameterSource

from .. import __version__
from ..connection import DEFAULT_URL, from_url, redact
from ..errors import ConfigurationError, KeyQueueError
from ..keys import unknown_queue
from ..queue import Queue, list_queues

EXIT_OK, EXIT_FAILURE, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
#: ``worker`` and ``reaper`` when Redis refused the credentials or the ACL at start (sysexits'
#: EX_CONFIG): no restart can help, so the supervisor does not replace such a process and
#: a systemd unit says ``RestartPreventExitStatus=78``.
EXIT_REFUSED = 78
#: Where an option counts as given by the user (not a default).
GIVEN = (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)


@dataclass
class Config:
    """The group's options, handed to every command: how the queues it builds talk to
    Redis, and which options the user gave (a decorated worker keeps the others)."""

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
    #: The command line's arguments (a supervisor runs its children with them).
    argv: list[str] = field(default_factory=list)

    _client: redis.Redis | None = None

    def options(self) -> dict[str, Any]:
        """How every Queue the CLI builds talks to Redis."""
        return dict(scripting=self.scripting, min_replicas=self.min_replicas, replica_timeout=self.replica_timeout)

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

    def served_queues(
        self, queue_class: Any, names: tuple[str, ...], like: list[Any] | None, made: list[Any]
    ) -> list[Any]:
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
        return [
            queue_class(
                name,
                client=client() if self.url_given else q.client,
                prefix=self.prefix if self.prefix_given else q.prefix,
                scripting=self.scripting if self.scripting_given else q.scripting,
                min_replicas=self.min_replicas if self.replicas_given else q.min_replicas,
                replica_timeout=self.replica_timeout if self.replicas_given else q.replica_timeout,
            )
            for name, q in pairs
        ]


pass_config = click.make_pass_decorator(Config)


class Refused(click.ClickException):
    """A worker or reaper that Redis refused at start: one line, exit ``EXIT_REFUSED``."""

    exit_code = EXIT_REFUSED


def refused(exc: Exception) -> Refused:
    """The one line of a worker or reaper that Redis refused at start."""
    why = "refused the credentials" if isinstance(exc, redis.AuthenticationError) else "refused this user"
    return Refused(f"Redis {why}: {exc} (a configuration error: not retried)")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--url",
    envvar="KEYQUEUE_URL",
    default=None,
    metavar="URL",
    help=f"Redis URL (env KEYQUEUE_URL; default {DEFAULT_URL}).",
)
@click.option("--prefix", default="kq", show_default=True, help="Key prefix of the queues.")
@click.option("--no-scripting", is_flag=True, help="Use the script-free protocol (no EVAL).")
@click.option(
    "--min-replicas",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Replicas that must acknowledge every write (WAIT), else NotReplicated.",
)
@click.option(
    "--replica-timeout",
    type=click.FloatRange(min=0, min_open=True, max=3600),
    default=1.0,
    show_default=True,
    help="Seconds a write waits for --min-replicas.",
)
@click.version_option(__version__, "--version", prog_name="keyqueue", message="%(prog)s %(version)s")
@click.pass_context
def cli(
    ctx: click.Context, url: str | None, prefix: str, no_scripting: bool, min_replicas: int, replica_timeout: float
) -> None:
    """keyqueue: a reliable, SQS-like work queue on plain Redis."""
    if url is not None and not url.strip():
        raise ConfigurationError("--url is empty: give a Redis URL such as redis://HOST:6379/0")
    if url is None and os.environ.get("KEYQUEUE_URL") is not None:  # click reads "" as unset
        raise ConfigurationError(
            "KEYQUEUE_URL is empty: set it to a Redis URL such as redis://HOST:6379/0, or unset it"
        )
    ctx.obj = Config(
        url,
        prefix,
        not no_scripting,
        url_given=ctx.get_parameter_source("url") in GIVEN,
        prefix_given=ctx.get_parameter_source("prefix") in GIVEN,
        scripting_given=ctx.get_parameter_source("no_scripting") in GIVEN,
        min_replicas=min_replicas,
        replica_timeout=replica_timeout,
        replicas_given=any(ctx.get_parameter_source(p) in GIVEN for p in ("min_replicas", "replica_timeout")),
        argv=ctx.obj if isinstance(ctx.obj, list) else sys.argv[1:],
    )


@cli.command()
def version() -> None:
    """Print keyqueue's version."""
    click.echo(__version__)


def main(argv: list[str] | None = None) -> None:
    """Entry point: exit 0 on success, 1 on a runtime failure, 2 on bad usage or input,
    130 when interrupted (Ctrl-C)."""
    try:
        args = sys.argv[1:] if argv is None else list(argv)
        cli.main(args=args, prog_name="keyqueue", standalone_mode=False, obj=args)
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
