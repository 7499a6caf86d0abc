"""An async producer: a FastAPI endpoint that enqueues. Serve it with `uvicorn app:app`;
run as it is (`python examples/quickstart/async_app.py`), it makes two requests in-process."""

# --8<-- [start:app]
import json
from contextlib import asynccontextmanager

from fastapi import FastAPI

from keyqueue.aio import Queue

emails = Queue("emails", max_receives=5)  # no I/O yet: a module-level queue is fine


@asynccontextmanager
async def lifespan(app: FastAPI):
    yield
    await emails.aclose()  # closes the client the queue made from its URL


app = FastAPI(lifespan=lifespan)


@app.post("/signup")
async def signup(address: str) -> dict:
    message_id = await emails.enqueue(json.dumps({"to": address}),
                                      dedup_key=f"welcome:{address}")  # a retried request enqueues once
    return {"queued": message_id}
# --8<-- [end:app]


if __name__ == "__main__":
    import asyncio

    import httpx

    async def main() -> None:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://app") as http:
            for _ in range(2):
                print((await http.post("/signup", params={"address": "ada@example.com"})).json())
        await emails.aclose()

    asyncio.run(main())
