"""The ASGI app: read a request, refuse the query protocol, verify its signature, run the
operation, answer in the JSON protocol. A plain ASGI callable (no router: every SQS call
is a POST whose operation is in a header), so a request costs little beyond its work."""

from __future__ import annotations

import logging
from typing import Any, Awaitable, Callable, MutableMapping

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ..core.shards import check_shards
from .auth import Verifier
from .errors import SqsError
from .handles import Handles
from .operations import OPERATIONS, Sqs
from .protocol import error_reply, parse, query_refusal, reply, request_id
from .queues import Directory

log = logging.getLogger("keyqueue.sqs")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

#: Largest request body read: a 1 MiB batch as an SDK writes it. botocore escapes every
#: non-ASCII character (an 'é' of 2 bytes is 6, \u00e9), binary attributes go base64 (4/3):
#: 3 MiB at most, and JSON around it.
MAX_REQUEST_BYTES = 4 << 20


class SqsApp:
    """ASGI app answering the SQS JSON protocol for the queues under one key prefix."""

    def __init__(
        self, *, client: Any, prefix: str, access_key_id: str, secret_access_key: str, region: str, shards: int = 1
    ) -> None:
        self.verifier = Verifier(access_key_id, secret_access_key)
        self.sqs = Sqs(Directory(client, prefix, region, shards), Handles(secret_access_key, prefix), access_key_id)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        status, headers, body = await self.handle(scope, receive)
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            event = await receive()
            if event["type"] == "lifespan.startup":
                self.sqs.redriver.start()
                await send({"type": "lifespan.startup.complete"})
            elif event["type"] == "lifespan.shutdown":
                if self.sqs.redriver.task is not None:
                    self.sqs.redriver.task.cancel()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def handle(self, scope: Scope, receive: Receive) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        rid = request_id()
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        target = headers.get("x-amz-target")
        if target is None and headers.get("content-type", "").startswith("application/x-www-form-urlencoded"):
            return query_refusal(rid)
        try:
            body = await read_body(receive)
            self.verifier.verify(scope["method"], url_of(scope, headers), headers, body)
            # started here too: a server that forwards requests but not the lifespan still redrives
            self.sqs.redriver.start()
            name, params = parse(target, body)
            operation = OPERATIONS.get(name)
            if operation is None:
                raise SqsError("InvalidAction", f"The action {name} is not valid for this endpoint.")
            host = f"{scope.get('scheme', 'http')}://{headers.get('host', 'localhost')}"
            return reply(await operation(self.sqs, params, host), rid)
        except SqsError as exc:
            return error_reply(exc, rid)
        except (RedisConnectionError, RedisTimeoutError) as exc:
            log.warning("sqs request %s: Redis unavailable: %s", rid, exc)
            return error_reply(SqsError("ServiceUnavailable", "The service is unavailable (Redis)."), rid)
        except Exception:
            log.exception("sqs request %s failed", rid)
            return error_reply(SqsError("InternalFailure", f"Internal failure (request {rid})."), rid)


async def read_body(receive: Receive) -> bytes:
    chunks, size = [], 0
    while True:
        event = await receive()
        chunk = event.get("body", b"")
        size += len(chunk)
        if size > MAX_REQUEST_BYTES:
            raise SqsError("InvalidParameterValue", f"The request body is over {MAX_REQUEST_BYTES} bytes.")
        chunks.append(chunk)
        if not event.get("more_body"):
            return b"".join(chunks)


def url_of(scope: Scope, headers: dict[str, str]) -> str:
    """The URL as the client signed it: the raw path and query as received."""
    path = (scope.get("raw_path") or scope["path"].encode()).decode("latin-1")
    query = scope.get("query_string", b"").decode("latin-1")
    return f"{scope.get('scheme', 'http')}://{headers.get('host', '')}{path}{'?' + query if query else ''}"


def create_sqs_app(
    *,
    client: Any,
    prefix: str = "kq",
    access_key_id: str,
    secret_access_key: str,
    region: str = "us-east-1",
    shards: int = 1,
) -> SqsApp:
    """The SQS wire API over the queues under ``prefix`` of ``client`` (a redis.asyncio.Redis
    or RedisCluster, which the caller owns), for requests signed with these credentials.
    ``shards``: the shard count of the queues CreateQueue makes (existing ones keep theirs)."""
    if not access_key_id or not secret_access_key:
        raise ValueError("the SQS API needs an access key id and a secret access key")
    check_shards(shards)
    return SqsApp(
        client=client,
        prefix=prefix,
        access_key_id=access_key_id,
        secret_access_key=secret_access_key,
        region=region,
        shards=shards,
    )
