"""Progress bars on stderr for the commands that work through many messages (enqueue from
standard input, requeue, purge): shown only on a terminal, and only past one batch."""

from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import TYPE_CHECKING, Callable, Iterator

import click

from ..queue import BATCH

if TYPE_CHECKING:
    from click._termui_impl import ProgressBar


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
