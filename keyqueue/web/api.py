"""The JSON API of keyqueue serve (/api/queues, a queue, its messages, the overview), and /healthz."""

from __future__ import annotations

import re
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..core.sources import PeekSource, peek_source
from ..errors import InvalidArgument
from .store import Store

#: Most messages one request returns.
MAX_COUNT = 1000


class BadRequest(ValueError):
    """A query parameter the API cannot use: a 400 naming it."""


def store_of(request: Request) -> Store:
    store: Store = request.app.state.store
    return store


def source_and_count(request: Request, default_count: int) -> tuple[PeekSource, int]:
    try:
        source = peek_source(request.query_params.get("source", "waiting"))
    except InvalidArgument as exc:
        raise BadRequest(str(exc)) from None
    return source, count_of(request, default_count)


def count_of(request: Request, default_count: int) -> int:
    """The ``count`` query parameter: 0 to MAX_COUNT."""
    raw = request.query_params.get("count", str(default_count))
    # ASCII digits only: str.isdigit() takes "²" (int() then fails: a 500) and "١" (Arabic 1)
    if not re.fullmatch(r"[0-9]{1,9}", raw) or int(raw) > MAX_COUNT:
        raise BadRequest(f"count must be a whole number from 0 to {MAX_COUNT}, not {raw[:20]!r}")
    return int(raw)


async def queues(request: Request) -> Response:
    return JSONResponse([v.api() for v in await store_of(request).overview()])


async def queue(request: Request) -> Response:
    return JSONResponse((await store_of(request).view(request.path_params["name"])).api())


async def messages(request: Request) -> Response:
    from .present import api_message

    store = store_of(request)
    q = await store.existing(request.path_params["name"])
    source, count = source_and_count(request, 10)
    return JSONResponse([api_message(m) for m in await store.peek(q.name, count, source)])


async def schedules(request: Request) -> Response:
    """The queue's schedules, as objects with the fields of keyqueue.Schedule."""
    return JSONResponse([s.to_json() for s in await store_of(request).schedules(request.path_params["name"])])


async def groups(request: Request) -> Response:
    """The queue's busiest message groups (most messages first): id, held, active."""
    found = await store_of(request).groups(request.path_params["name"], count_of(request, 10))
    return JSONResponse([g._asdict() for g in found])


async def overview(request: Request) -> Response:
    """What the overview shows, with counters and rates (beyond the /api/queues objects: the
    dashboard's own, documented in docs/dashboard.md)."""
    out: list[dict[str, Any]] = []
    for v in await store_of(request).overview():
        out.append({**v.api(), "counters": dict(v.counters), "rates": dict(v.rates)})
    return JSONResponse(out)


async def healthz(request: Request) -> Response:
    state = await store_of(request).ping()
    return JSONResponse({"redis": state}, status_code=200 if state == "ok" else 503)


routes = [
    Route("/healthz", healthz),
    Route("/api/queues", queues),
    Route("/api/overview", overview),
    Route("/api/queues/{name}", queue),
    Route("/api/queues/{name}/messages", messages),
    Route("/api/queues/{name}/schedules", schedules),
    Route("/api/queues/{name}/groups", groups),
]
