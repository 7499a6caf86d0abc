"""The ``keyqueue`` command line (click). Thin: every command calls the library."""

from __future__ import annotations

import sys

import click

from . import __version__
from .connection import redact
from .errors import KeyQueueError

EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2


class Context:
    def __init__(self, url: str | None, prefix: str, scripting: bool) -> None:
        self.url, self.prefix, self.scripting = url, prefix, scripting


@click.group()
@click.option("--url", envvar="KEYQUEUE_URL", default=None, help="Redis URL (env KEYQUEUE_URL).")
@click.option("--prefix", default="kq", show_default=True, help="Key prefix.")
@click.option("--no-scripting", is_flag=True, help="Use the script-free protocol.")
@click.pass_context
def cli(ctx: click.Context, url: str | None, prefix: str, no_scripting: bool) -> None:
    """keyqueue: a reliable, SQS-like work queue on plain Redis."""
    ctx.obj = Context(url, prefix, not no_scripting)


@cli.command()
def version() -> None:
    """Print keyqueue's version."""
    click.echo(__version__)


@cli.command()
@click.option("-n", "--messages", default=5000, show_default=True)
@click.pass_obj
def demo(obj: Context, messages: int) -> None:
    """Run producers and consumers on a Redis of its own (or --url), crash one, audit the result."""
    from .demo import run_demo

    if obj.url:
        click.echo(f"using {redact(obj.url)}")
    result = run_demo(obj.url, messages=messages, echo=click.echo)
    sys.exit(EXIT_OK if result.ok else EXIT_FAILURE)


def main() -> None:
    try:
        cli.main(standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("Aborted!", err=True)
        sys.exit(EXIT_FAILURE)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except KeyQueueError as exc:
        click.echo(f"Error: {exc}", err=True)
        sys.exit(EXIT_USAGE if isinstance(exc, ValueError) else EXIT_FAILURE)
    except SystemExit:
        raise
    sys.exit(EXIT_OK)
