"""The states a message can be read from or moved out of, named once: every tuple, type and
choice (the faces, the CLI, the dashboard, Spark) derives from these, and the checks that
turn a caller's text into one of them live here."""

from __future__ import annotations

from typing import Literal, TypeVar, get_args

from ..errors import InvalidArgument

#: Where peek, ids and Spark snapshots read (every state a message can be in; held: grouped
#: messages waiting behind their group's released ones, which count as waiting too).
PeekSource = Literal["waiting", "processing", "delayed", "dead", "held"]
#: What purge deletes: a state, or "all" (every message; processing included).
PurgeSource = Literal["waiting", "delayed", "dead", "all"]
#: Where requeue takes messages from.
RequeueSource = Literal["dead", "processing"]

PEEK_SOURCES: tuple[PeekSource, ...] = get_args(PeekSource)
PURGE_SOURCES: tuple[PurgeSource, ...] = get_args(PurgeSource)
#: The states whose counts the dashboard and /metrics show: held messages are counted in
#: waiting already.
SHOWN_STATES: tuple[PeekSource, ...] = tuple(s for s in PEEK_SOURCES if s != "held")
REQUEUE_SOURCES: tuple[RequeueSource, ...] = get_args(RequeueSource)

S = TypeVar("S", bound=str)


def one_of(value: object, allowed: tuple[S, ...], what: str) -> S:
    """``value`` as one of ``allowed``, else InvalidArgument naming them."""
    if value not in allowed:
        raise InvalidArgument(f"{what} must be one of {', '.join(allowed)}, not {value!r}")
    return allowed[allowed.index(value)]


def peek_source(value: object) -> PeekSource:
    return one_of(value, PEEK_SOURCES, "source")


def purge_source(value: object) -> PurgeSource:
    return one_of(value, PURGE_SOURCES, "purge source")


def requeue_source(value: object) -> RequeueSource:
    return one_of(value, REQUEUE_SOURCES, "requeue source")
