"""``keyqueue enqueue``: bodies from the command line, or records of standard input sent
in batches as they arrive, never more than a chunk and a record held."""

from __future__ import annotations

import io
import select
import sys
from typing import IO, Callable, Iterator

import click

from ..errors import MessageTooLarge
from ..queue import BATCH
from ..settings import check_seconds
from .group import Config, cli, pass_config
from .progress import progress

#: Bytes read from stdin at a time by ``enqueue``; what has arrived is sent at once.
READ_CHUNK = 1 << 16
#: Seconds a wait for standard input lasts before it looks at the signals received.
SIGNAL_WAKE = 0.5


class Oversized(Exception):
    """A record of standard input over max_body_bytes (``size`` is a lower bound unless
    ``complete``): it and everything after it stay unsent."""

    def __init__(self, record: int, size: int, complete: bool) -> None:
        super().__init__(record, size, complete)
        self.record, self.size, self.complete = record, size, complete


def reader(stream: IO[bytes]) -> Callable[[int], bytes]:
    """What has arrived on ``stream``, up to n bytes, waiting for some. A stream with a file
    descriptor is waited on with select, waking every SIGNAL_WAKE seconds: a Ctrl-C that
    lands between Python's check for signals and a blocking read would otherwise wait for
    the next input (its handler runs only once the read returns). Then one read: ``read1``
    makes at most one read of the descriptor, which select found ready. (Bytes buffered
    before the first call wait for the descriptor's next: nothing reads stdin before it.)"""
    read1 = getattr(stream, "read1", stream.read)
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        return read1

    def read(n: int) -> bytes:
        while True:
            if select.select([fd], [], [], SIGNAL_WAKE)[0]:
                try:
                    got = read1(n)
                except BlockingIOError:  # (a non-blocking descriptor another reader emptied)
                    continue
                if got is not None:
                    return bytes(got)

    return read


def read_records(stream: IO[bytes], sep: bytes, limit: int) -> Iterator[list[bytes]]:
    """The records of ``stream`` split on ``sep`` (a last one without ``sep`` counts), as
    lists of what has arrived so far: a slow producer's lines go out as they come, a fast
    one's in chunks. Holds at most one chunk plus one record: a record over ``limit`` bytes
    raises Oversized once the records before it are yielded, without reading it whole."""
    read = reader(stream)
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
@click.option(
    "-0", "--null", "null", is_flag=True, help="Standard input holds NUL-separated bodies (a body may hold newlines)."
)
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
            "enqueued, nothing after"
        ) from None


def write_ids(ids: list[str]) -> None:
    if ids:
        sys.stdout.write("\n".join(ids) + "\n")
        sys.stdout.flush()
