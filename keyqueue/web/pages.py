"""The dashboard's HTML: the overview, a page per queue, the fragments the page's script
swaps in to refresh itself, the actions behind a confirmation, and the login form."""

from __future__ import annotations

import asyncio
import functools
import re
import time
from typing import Any
from urllib.parse import urlencode

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route
from starlette.templating import Jinja2Templates

from ..aio.queue import Queue
from ..core.sources import PURGE_SOURCES, SHOWN_STATES, purge_source
from ..errors import InvalidArgument, UnknownSchedule
from ..keys import NAME_RE
from .api import MAX_COUNT, BadRequest, source_and_count, store_of
from .auth import Session, Sessions, form_csrf, set_cookie_header
from .present import body_view

#: Messages a queue page lists per source unless ?count= says otherwise.
PAGE_COUNT = 50
#: Message groups a queue page lists (the busiest).
GROUPS_SHOWN = 10
NOTICES = {
    "requeue": "Requeued {n} dead letter{s}.",
    "purge": "Purged {n} {source} message{s}.",
    "purge-all": "Purged {n} message{s} (every state).",
    "deleted": "Deleted dead letter {id}.",
    "missing": "Message {id} is not a dead letter (any more): nothing was changed.",
    "paused": "Paused schedule {schedule}.",
    "resumed": "Resumed schedule {schedule}.",
    "fired": "Fired schedule {schedule}: message {id}.",
    "no-schedule": "There is no schedule {schedule} (any more): nothing was changed.",
}
#: What a schedule action calls, by the last part of its path.
SCHEDULE_ACTIONS = ("pause", "resume", "fire")


def templates(request: Request) -> Jinja2Templates:
    t: Jinja2Templates = request.app.state.templates
    return t


def sessions(request: Request) -> Sessions:
    s: Sessions = request.app.state.sessions
    return s


def session(request: Request) -> Session:
    s: Session = request.state.session
    return s


def base(request: Request) -> str:
    """Where the app is mounted: every link and form starts with it."""
    root: str = request.scope.get("root_path", "")
    return root.rstrip("/")


def render(request: Request, name: str, status: int = 200, **context: Any) -> Response:
    store = store_of(request)
    # csrf(): a function, so that only a page whose template has a form with it sets a cookie
    context.update(
        base=base(request),
        read_only=request.app.state.read_only,
        csrf=functools.partial(form_csrf, request.scope),
        shown_url=store.shown_url,
        prefix=store.prefix,
        logged_in=session(request).authenticated,
        now=time.time(),
    )
    return templates(request).TemplateResponse(request, name, context, status_code=status)


async def overview(request: Request) -> Response:
    return render(request, "overview.html", views=await store_of(request).overview())


async def overview_rows(request: Request) -> Response:
    return render(request, "_overview_rows.html", views=await store_of(request).overview())


async def queue_page(request: Request) -> Response:
    live = await live_part(request)
    source, count = source_and_count(request, PAGE_COUNT)
    messages = await store_of(request).peek(live["view"].name, count, source)
    return render(
        request,
        "queue.html",
        **live,
        source=source,
        count=count,
        messages=[(m, body_view(m.body)) for m in messages],
        notice=notice_text(request),
        purge_sources=PURGE_SOURCES,
        max_count=MAX_COUNT,
        more=min(max(count * 4, PAGE_COUNT), MAX_COUNT),
    )  # ("?count=0" asks for more than 0)


async def live_part(request: Request) -> dict[str, Any]:
    """What the part of a queue page that refreshes itself shows: the counts, the tabs, the
    schedules and the busiest message groups."""
    store = store_of(request)
    view = await store.view(request.path_params["name"])
    schedules, groups = await asyncio.gather(store.schedules(view.name), store.groups(view.name, GROUPS_SHOWN))
    return {"view": view, "schedules": schedules, "groups": groups, "sources": SHOWN_STATES}


def notice_text(request: Request) -> str | None:
    """What the action that redirected here did, from its query (notice, n, purged, id)."""
    q = request.query_params
    notice, src = q.get("notice"), q.get("purged", "")
    if notice == "purge" and src == "all":
        notice = "purge-all"
    if notice not in NOTICES:
        return None
    n, one, sid = q.get("n", "0"), q.get("id", ""), q.get("schedule", "")
    return NOTICES[notice].format(
        schedule=sid if NAME_RE.fullmatch(sid) else "?",
        n=n if re.fullmatch("[0-9]{1,20}", n) else "?",
        s="" if n == "1" else "s",
        source=src if src in PURGE_SOURCES else "",
        id=one if re.fullmatch("([0-9]{1,4}#)?[0-9]{1,20}", one) else "?",  # (a sharded queue's: "<shard>#<id>")
    )


async def queue_live(request: Request) -> Response:
    """The refreshing part of a queue page, for its script to swap in."""
    source, _ = source_and_count(request, PAGE_COUNT)
    return render(request, "_queue_live.html", **(await live_part(request)), source=source)


# -- actions ----------------------------------------------------------------------------


async def checked(request: Request) -> Response | tuple[Queue, FormData]:
    """The queue and the form of an action, or the page refusing it: 404 for an unknown queue
    (first, as on every route), 403 in read-only mode or without this session's CSRF token
    (nothing is changed)."""
    q = await store_of(request).existing(request.path_params["name"])
    if request.app.state.read_only:
        return render(
            request,
            "error.html",
            403,
            title="Read-only",
            detail="This dashboard runs with --read-only: actions are disabled.",
        )
    form = await request.form()
    given = form.get("csrf")
    if not sessions(request).csrf_ok(session(request), given if isinstance(given, str) else None):
        return render(
            request,
            "error.html",
            403,
            title="Action refused",
            detail="The form's CSRF token is missing or stale: reload the page and try again.",
        )
    return q, form


def back(request: Request, name: str, **query: str) -> Response:
    return RedirectResponse(f"{base(request)}/queues/{name}?{urlencode(query)}", status_code=303)


async def requeue(request: Request) -> Response:
    got = await checked(request)
    if isinstance(got, Response):
        return got
    q, form = got
    one = str(form.get("id") or "").strip()
    if form.get("confirm") != "1":
        total = (await q.stats()).dead
        what = f"dead letter {one}" if one else f"all {total} dead letters"
        return render(
            request,
            "confirm.html",
            action=f"{base(request)}/queues/{q.name}/requeue",
            fields={"id": one},
            title=f"Requeue {what} of {q.name}?",
            detail="They go to the tail of the queue with receives reset to 0.",
            button="Requeue",
        )
    n = await q.requeue([one] if one else None, source="dead")
    if one and not n:
        return back(request, q.name, source="dead", notice="missing", id=one)
    return back(request, q.name, source="dead", notice="requeue", n=str(n))


async def purge(request: Request) -> Response:
    got = await checked(request)
    if isinstance(got, Response):
        return got
    q, form = got
    try:
        source = purge_source(str(form.get("source") or ""))
    except InvalidArgument as exc:
        raise BadRequest(str(exc)) from None
    one = str(form.get("id") or "").strip()  # one dead letter
    if one and source != "dead":
        raise BadRequest(f"only a dead letter is deleted by id, not a {source} message")
    if form.get("confirm") != "1":
        s = await q.stats()
        total = {
            "waiting": s.waiting,
            "delayed": s.delayed,
            "dead": s.dead,
            "all": s.waiting + s.processing + s.delayed + s.dead,
        }[source]
        what = "every message" if source == "all" else f"the {source} messages"
        title = f"Delete dead letter {one} of {q.name}?" if one else f"Delete {what} of {q.name} ({total})?"
        return render(
            request,
            "confirm.html",
            action=f"{base(request)}/queues/{q.name}/purge",
            fields={"source": source, "id": one},
            title=title,
            detail="Deleted messages cannot be recovered.",
            button="Delete",
            danger=True,
        )
    n = await q.purge(source=source, ids=[one] if one else None)
    if one:
        return back(request, q.name, source="dead", notice="deleted" if n else "missing", id=one)
    return back(
        request, q.name, source="waiting" if source == "all" else source, notice="purge", n=str(n), purged=source
    )


async def schedule_action(request: Request) -> Response:
    """Pause, resume or fire a schedule now: no confirmation (nothing is lost by any of them)."""
    got = await checked(request)
    if isinstance(got, Response):
        return got
    q, _ = got
    sid, action = request.path_params["schedule"], request.path_params["action"]
    if action not in SCHEDULE_ACTIONS:
        raise BadRequest(f"a schedule action is one of {', '.join(SCHEDULE_ACTIONS)}, not {action[:20]!r}")
    if not NAME_RE.fullmatch(sid):
        return back(request, q.name, notice="no-schedule")
    if action == "fire":
        try:
            mid = await q.fire_schedule(sid)
        except UnknownSchedule:
            return back(request, q.name, notice="no-schedule", schedule=sid)
        return back(request, q.name, notice="fired", schedule=sid, id=mid)
    done = await (q.pause_schedule(sid) if action == "pause" else q.resume_schedule(sid))
    return back(request, q.name, notice=f"{action}d" if done else "no-schedule", schedule=sid)


# -- login ------------------------------------------------------------------------------


def safe_next(target: str | None) -> str:
    """Only a path inside the app (no other host, no scheme)."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target


async def login(request: Request) -> Response:
    if sessions(request).token is None:  # nothing to log in to
        return RedirectResponse(base(request) + "/", status_code=303)
    if request.method == "GET":
        return render(request, "login.html", next=safe_next(request.query_params.get("next")), failed=False)
    form = await request.form()
    given = form.get("token")
    target = safe_next(str(form.get("next") or "/"))
    if not sessions(request).token_ok(given if isinstance(given, str) else None):
        return render(request, "login.html", 401, next=target, failed=True)
    fresh = sessions(request).new(authenticated=True)  # a new id: no session fixation
    response = RedirectResponse(base(request) + target, status_code=303)
    response.raw_headers.append(set_cookie_header(sessions(request), fresh, request.scope))
    request.state.session_set = True
    return response


async def logout(request: Request) -> Response:
    form = await request.form()
    given = form.get("csrf")
    if not sessions(request).csrf_ok(session(request), given if isinstance(given, str) else None):
        return render(request, "error.html", 403, title="Action refused", detail="Missing or stale CSRF token.")
    response = RedirectResponse(base(request) + "/login", status_code=303)
    response.raw_headers.append(set_cookie_header(sessions(request), None, request.scope))
    request.state.session_set = True
    return response


async def favicon(request: Request) -> Response:
    """Browsers ask for /favicon.ico on every page, JSON ones too: answer it, not a 404."""
    return RedirectResponse(f"{base(request)}/static/favicon.svg", status_code=301)


routes = [
    Route("/", overview),
    Route("/favicon.ico", favicon),
    Route("/partials/overview", overview_rows),
    Route("/queues/{name}", queue_page),
    Route("/partials/queues/{name}", queue_live),
    Route("/queues/{name}/requeue", requeue, methods=["POST"]),
    Route("/queues/{name}/purge", purge, methods=["POST"]),
    Route("/queues/{name}/schedules/{schedule}/{action}", schedule_action, methods=["POST"]),
    Route("/login", login, methods=["GET", "POST"]),
    Route("/logout", logout, methods=["POST"]),
]
