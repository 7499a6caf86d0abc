"""``create_app``: the dashboard, the JSON API and /metrics as one Starlette app, served by
``keyqueue serve`` or mounted in your own Starlette/FastAPI app."""

from __future__ import annotations

import contextlib
import importlib
from typing import Any, AsyncIterator, Mapping

import jinja2
import redis
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from ..errors import KeyQueueError
from . import api, metrics, pages, present
from .auth import ASGIApp, Gate, Sessions, route_path
from .headers import SecurityHeaders
from .store import Store, UnknownQueue


def wants_json(request: Request) -> bool:
    """The API, /metrics, /healthz and the fragments the page's script fetches answer
    errors as JSON; the pages as a page."""
    return route_path(request.scope).startswith(("/api/", "/metrics", "/healthz", "/partials/"))


def failure(request: Request, status: int, title: str, detail: str) -> Response:
    if wants_json(request):
        return JSONResponse({"error": f"{title}: {detail}"}, status_code=status)
    return pages.render(request, "error.html", status, title=title, detail=detail)


async def unknown_queue(request: Request, exc: Exception) -> Response:
    store = api.store_of(request)
    return failure(
        request, 404, "No such queue", f"no queue {str(exc.args[0])!r} is registered under prefix {store.prefix!r}"
    )


async def bad_request(request: Request, exc: Exception) -> Response:
    return failure(request, 400, "Bad request", str(exc))


async def unreachable(request: Request, exc: Exception) -> Response:
    store = api.store_of(request)
    kind = "did not answer in time" if isinstance(exc, redis.TimeoutError) else "is unreachable"
    return failure(
        request,
        503,
        "Redis unreachable",
        f"Redis at {store.shown_url} {kind}; this page will work again once it answers.",
    )


async def refused_credentials(request: Request, exc: Exception) -> Response:
    store = api.store_of(request)
    return failure(
        request,
        503,
        "Redis refused the credentials",
        f"Redis at {store.shown_url} refused the URL's credentials: {exc}",
    )


async def redis_error(request: Request, exc: Exception) -> Response:
    return failure(request, 502, "Redis error", f"Redis said: {exc}")


async def http_error(request: Request, exc: Exception) -> Response:
    """A path no route has (404) or a method it does not take (405): the app's own page, or
    JSON under /api/, not Starlette's plain text."""
    assert isinstance(exc, HTTPException)
    titles = {404: "Not found", 405: "Method not allowed"}
    response = failure(
        request,
        exc.status_code,
        titles.get(exc.status_code, "HTTP error"),
        f"{request.method} {route_path(request.scope)}: {exc.detail}",
    )
    response.headers.update(exc.headers or {})
    return response


async def keyqueue_error(request: Request, exc: Exception) -> Response:
    return failure(request, 500, "Queue error", str(exc))


def environment() -> jinja2.Environment:
    """Templates from the package, every value escaped (bodies are never HTML)."""
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("keyqueue.web", "templates"), autoescape=True, undefined=jinja2.StrictUndefined
    )
    env.filters.update(number=present.number, duration=present.duration, rate=present.rate, when=present.when)
    env.globals.update(
        relative=present.relative,
        points=present.points,
        top=present.top,
        spark_w=present.SPARK_W,
        spark_h=present.SPARK_H,
        error_chars=present.ERROR_CHARS,
        full_chars=present.FULL_CHARS,
    )
    return env


def create_app(
    url: str | None = None,
    client: Any = None,
    prefix: str = "kq",
    read_only: bool = False,
    token: str | None = None,
    sqs: tuple[str, str] | None = None,
    queue_options: Mapping[str, Any] | None = None,
    sqs_shards: int = 1,
) -> ASGIApp:
    """The ASGI app of ``keyqueue serve``.

    Args:
        url, client: the Redis to show (``client``: a ``redis.asyncio.Redis``, which stays
            yours; from ``url`` or KEYQUEUE_URL the app makes one, closed on shutdown).
        prefix: the key prefix whose queues it shows.
        read_only: refuse every action (403).
        token: require ``Authorization: Bearer TOKEN`` or a login with it on every route
            but /healthz (and the login form and its assets).
        sqs: ``(access_key_id, secret_access_key)``: serve the SQS wire API
            (``keyqueue.sqs``) on the same port too.
        queue_options: passed to every ``keyqueue.aio.Queue`` it builds (``scripting``,
            ``min_replicas``, ``replica_timeout``).
        sqs_shards: the shard count of the queues the SQS API's CreateQueue makes.
    """
    if token is not None and not token:
        raise KeyQueueError("an empty token is no token: give None or a non-empty string")
    store = Store(url, client, prefix, queue_options)
    sessions = Sessions(token)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await store.aclose()

    static = StaticFiles(packages=[("keyqueue.web", "static")])
    app = Starlette(
        routes=[*pages.routes, *api.routes, *metrics.routes, Mount("/static", static, name="static")],
        middleware=[Middleware(SecurityHeaders), Middleware(Gate, sessions=sessions)],
        exception_handlers={
            HTTPException: http_error,
            UnknownQueue: unknown_queue,
            api.BadRequest: bad_request,
            redis.AuthenticationError: refused_credentials,
            redis.ConnectionError: unreachable,
            redis.TimeoutError: unreachable,
            redis.BusyLoadingError: unreachable,
            redis.RedisError: redis_error,
            KeyQueueError: keyqueue_error,
        },
        lifespan=lifespan,
    )
    app.state.store = store
    app.state.sessions = sessions
    app.state.read_only = read_only
    app.state.templates = Jinja2Templates(env=environment())
    if sqs is None:
        return app
    from .dispatch import SqsDispatch

    # keyqueue.sqs, imported by name: it is built beside this module and imports downward too
    sqs_module: Any = importlib.import_module("keyqueue.sqs")
    access_key_id, secret_access_key = sqs
    sqs_app = sqs_module.create_sqs_app(
        client=store.client,
        prefix=prefix,
        access_key_id=access_key_id,
        secret_access_key=secret_access_key,
        shards=sqs_shards,
    )
    return SqsDispatch(app, sqs_app)
