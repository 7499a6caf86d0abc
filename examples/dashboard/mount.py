"""The dashboard mounted in your own FastAPI app, read-only, behind a token. Serve it with
`uvicorn app:app`; run as it is (`python examples/dashboard/mount.py`, with KEYQUEUE_URL
and KQ_TOKEN set), it asks its JSON API in-process."""

# --8<-- [start:app]
import os
from contextlib import asynccontextmanager

import redis.asyncio
from fastapi import FastAPI

from keyqueue.web import create_app

redis_client = redis.asyncio.Redis.from_url(os.environ["KEYQUEUE_URL"])


@asynccontextmanager
async def lifespan(app: FastAPI):
    yield
    await redis_client.aclose()  # your client: yours to close


app = FastAPI(lifespan=lifespan)
app.mount("/ops/queues", create_app(client=redis_client, read_only=True, token=os.environ["KQ_TOKEN"]))
# --8<-- [end:app]


if __name__ == "__main__":
    import asyncio

    import httpx

    async def main() -> None:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://app") as http:
            print((await http.get("/ops/queues/healthz")).json())
            print((await http.get("/ops/queues/api/queues")).status_code)  # no token: 401
            auth = {"Authorization": f"Bearer {os.environ['KQ_TOKEN']}"}
            print((await http.get("/ops/queues/api/queues", headers=auth)).json())
        await redis_client.aclose()

    asyncio.run(main())
