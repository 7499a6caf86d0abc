"""The ``keyqueue`` command line (click). Thin: every command calls the library; errors
become one line and an exit code in one place (``main``).

group.py: the group, its options (Config), the exit codes and ``main``; queues.py: the
commands that read or operate a queue; enqueue.py: enqueue and its standard-input reader;
run.py: the long-running commands (worker, reaper, serve, demo); schedules.py: the
schedule group (add, ls, rm, pause, resume, fire); progress.py: the
progress bars of long commands.
"""

from . import enqueue, queues, run, schedules  # noqa: F401 (importing them adds their commands to the group)
from .group import cli, main

__all__ = ["cli", "main"]
