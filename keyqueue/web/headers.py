"""Response headers every dashboard response gets: nothing with message data is cached (a
page left after logging out is not one Back away), and no other site may frame it (its
actions are one click behind a dialog)."""

from __future__ import annotations

from .auth import ASGIApp, Message, Receive, Scope, Send, route_path

#: Headers added unless the response set them itself.
COMMON = (
    (b"x-frame-options", b"SAMEORIGIN"),
    (b"content-security-policy", b"frame-ancestors 'self'"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
)
NO_STORE = (b"cache-control", b"no-store")


class SecurityHeaders:
    """ASGI middleware: COMMON on every HTTP response, ``Cache-Control: no-store`` on all but
    the static assets."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        wanted = COMMON if route_path(scope).startswith("/static/") else (*COMMON, NO_STORE)

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                present = {bytes(k).lower() for k, _ in headers}
                headers.extend(h for h in wanted if h[0] not in present)
                message["headers"] = headers
            await send(message)

        await self.app(scope, receive, send_with_headers)
