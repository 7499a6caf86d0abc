"""Who may use the app: the bearer token or the session the login form sets, compared in
constant time; and a CSRF token per session for every action form.

Sessions are an HMAC-signed cookie (``sid.flag.signature``) keyed by a secret the app draws
at start: no server-side store, nothing to configure; a restart logs everyone out. Every
request has a session (so that actions can carry a CSRF token even without a token
configured), but only a response that puts its CSRF token in a form (``form_csrf``), or the
login, sets the cookie: /metrics, /healthz, the API and the assets set none, so a scraper or
a cache sees no cookie it never needs. ``flag`` 1 marks one that logged in with the token."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from http.cookies import SimpleCookie
from typing import Any, Awaitable, Callable, MutableMapping
from urllib.parse import quote

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

COOKIE = "keyqueue_session"
#: Paths anyone may open: the health check (load balancers), the login form, its assets.
OPEN_PATHS = ("/healthz", "/login", "/favicon.ico")
OPEN_PREFIXES = ("/static/",)


def route_path(scope: Scope) -> str:
    """The path inside the app: without the ``root_path`` it is mounted at."""
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    if root and path.startswith(root) and (len(path) == len(root) or path[len(root)] == "/"):
        return path[len(root) :] or "/"
    return path


@dataclass(frozen=True)
class Session:
    sid: str
    authenticated: bool
    csrf: str


class Sessions:
    """Signs and reads session cookies and derives their CSRF tokens."""

    def __init__(self, token: str | None) -> None:
        self.token = token
        self._key = secrets.token_bytes(32)

    def _sign(self, text: str) -> str:
        return hmac.new(self._key, text.encode(), hashlib.sha256).hexdigest()

    def new(self, authenticated: bool = False) -> Session:
        return self._session(secrets.token_urlsafe(18), authenticated)

    def _session(self, sid: str, authenticated: bool) -> Session:
        return Session(sid, authenticated, self._sign(f"csrf:{sid}"))

    def cookie_value(self, s: Session) -> str:
        text = f"{s.sid}.{int(s.authenticated)}"
        return f"{text}.{self._sign(text)}"

    def read(self, value: str | None) -> Session | None:
        """The session of a cookie value, None when it is absent or not ours."""
        if not value or value.count(".") != 2:
            return None
        sid, flag, sig = value.split(".")
        if flag not in ("0", "1") or not hmac.compare_digest(sig, self._sign(f"{sid}.{flag}")):
            return None
        return self._session(sid, flag == "1")

    def token_ok(self, given: str | None) -> bool:
        """Constant time, whatever the length or content of ``given``."""
        if self.token is None or given is None:
            return False
        return hmac.compare_digest(given.encode(), self.token.encode())

    def csrf_ok(self, session: Session, given: str | None) -> bool:
        return given is not None and hmac.compare_digest(given.encode(), session.csrf.encode())


def header(scope: Scope, name: bytes) -> str | None:
    for k, v in scope.get("headers", ()):
        if k.lower() == name:
            return bytes(v).decode("latin-1")
    return None


def bearer(scope: Scope) -> str | None:
    """The token of ``Authorization: Bearer TOKEN``, its bytes read as UTF-8 (what clients
    send, and what the login form's token is), so a non-ASCII token works in both."""
    value = header(scope, b"authorization")
    if value and value[:7].lower() == "bearer ":
        return value[7:].strip().encode("latin-1").decode("utf-8", "replace")
    return None


def form_csrf(scope: Scope) -> str:
    """The request's CSRF token for a form to carry. Asking for it is what makes the response
    set the session cookie (when the request came without one): the token is only good with
    the session it was derived from."""
    state = scope["state"]
    state["session_wanted"] = True
    session: Session = state["session"]
    return session.csrf


def set_cookie_header(sessions: Sessions, s: Session | None, scope: Scope) -> tuple[bytes, bytes]:
    """The Set-Cookie header of a session (None: one that deletes the cookie)."""
    cookie: SimpleCookie = SimpleCookie()
    cookie[COOKIE] = sessions.cookie_value(s) if s is not None else ""
    morsel = cookie[COOKIE]
    morsel["path"] = scope.get("root_path") or "/"
    morsel["httponly"] = True
    morsel["samesite"] = "Strict"
    if scope.get("scheme") == "https":
        morsel["secure"] = True
    if s is None:
        morsel["max-age"] = 0
    return b"set-cookie", morsel.OutputString().encode("latin-1")


class Gate:
    """ASGI middleware: gives every request a session (``scope["state"]["session"]``, its
    cookie set only when the response asked for ``form_csrf``) and, with a token configured,
    lets through only requests with ``Authorization: Bearer TOKEN`` or a logged-in session
    (pages redirect to the login form, the rest get 401)."""

    def __init__(self, app: ASGIApp, sessions: Sessions) -> None:
        self.app, self.sessions = app, sessions

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        cookie: SimpleCookie = SimpleCookie()
        try:
            cookie.load(header(scope, b"cookie") or "")
        except Exception:  # a malformed Cookie header is no session
            cookie = SimpleCookie()
        morsel = cookie.get(COOKIE)
        session = self.sessions.read(morsel.value if morsel else None)
        fresh = session is None
        if session is None:
            session = self.sessions.new()
        scope.setdefault("state", {})["session"] = session
        path = route_path(scope)
        allowed = (
            self.sessions.token is None
            or session.authenticated
            or self.sessions.token_ok(bearer(scope))
            or path in OPEN_PATHS
            or path.startswith(OPEN_PREFIXES)
        )
        if not allowed:
            await self._refuse(scope, send, path)
            return

        async def send_with_cookie(message: Message) -> None:
            state = scope["state"]
            if (
                message["type"] == "http.response.start"
                and fresh
                and state.get("session_wanted")
                and not state.get("session_set")
            ):
                message.setdefault("headers", []).append(set_cookie_header(self.sessions, session, scope))
            await send(message)

        await self.app(scope, receive, send_with_cookie)

    async def _refuse(self, scope: Scope, send: Send, path: str) -> None:
        wants_page = scope["method"] == "GET" and "text/html" in (header(scope, b"accept") or "")
        if wants_page:
            root = scope.get("root_path", "")
            qs = scope.get("query_string", b"").decode("latin-1")
            target = path + (f"?{qs}" if qs else "")
            location = f"{root}/login?next={quote(target, safe='')}"
            await send(
                {
                    "type": "http.response.start",
                    "status": 303,
                    "headers": [(b"location", location.encode("latin-1")), (b"content-length", b"0")],
                }
            )
            await send({"type": "http.response.body", "body": b""})
            return
        body = b'{"error": "unauthorized: send Authorization: Bearer TOKEN"}'
        await send(
            {
                "type": "http.response.start",
                "status": 401,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"www-authenticate", b'Bearer realm="keyqueue"'),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})
