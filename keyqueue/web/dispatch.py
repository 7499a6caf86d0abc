"""Sharing one port with the SQS wire API (``keyqueue serve --sqs``): a request that looks
like an SQS call goes to the SQS app untouched (it checks SigV4 itself), anything else to
the dashboard."""

from __future__ import annotations

from .auth import ASGIApp, Receive, Scope, Send, header, route_path

#: The account id in SQS queue URLs (``/000000000000/NAME``), as the SQS app serves them.
ACCOUNT_PATH = "/000000000000/"


def is_sqs(scope: Scope) -> bool:
    """An ``X-Amz-Target`` header (the JSON protocol), or a form POST to ``/`` or to a
    queue URL (the query protocol)."""
    if scope["type"] != "http":
        return False
    if header(scope, b"x-amz-target") is not None:
        return True
    content_type = (header(scope, b"content-type") or "").split(";")[0].strip().lower()
    path = route_path(scope)
    return (
        scope["method"] == "POST"
        and content_type == "application/x-www-form-urlencoded"
        and (path == "/" or path.startswith(ACCOUNT_PATH))
    )


class SqsDispatch:
    """ASGI: SQS calls to ``sqs``, the rest (lifespan included) to ``dashboard``."""

    def __init__(self, dashboard: ASGIApp, sqs: ASGIApp) -> None:
        self.dashboard, self.sqs = dashboard, sqs

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await (self.sqs if is_sqs(scope) else self.dashboard)(scope, receive, send)
