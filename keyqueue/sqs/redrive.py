"""Dead-letter queues as SQS has them, on keyqueue's dead letters.

A queue with a RedrivePolicy has ``max_receives`` = maxReceiveCount, so keyqueue moves a
message received too often to the queue's own dead letters; the Redriver then moves those
to the named dead-letter queue as ordinary messages there. A move between queues cannot be
atomic on a cluster (two slots), so it is at-least-once: enqueue into the target (with a
dedup key, so two servers moving the same letter within the target's dedup window make one
message), then delete the letter from the source. It runs every second for every queue
with a redrive policy (found again every 10 s, whoever set the policy), and right after a
receive on such a queue. StartMessageMoveTask moves a dead-letter queue's messages back to
where they came from (or to a given queue) the same way: claim, enqueue, ack."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from .errors import SqsError, invalid
from .queues import Directory, Known, dead_letter_queue
from .stored import Stored

log = logging.getLogger("keyqueue.sqs")

SWEEP_SECONDS = 1.0
MIN_PASS_SECONDS = 0.2
DISCOVER_SECONDS = 10.0
#: Dead letters moved per step (a peek, an enqueue and a delete each).
STEP = 100


class Redriver:
    """Moves the dead letters of queues with a redrive policy to their dead-letter queues."""

    def __init__(self, directory: Directory) -> None:
        self.directory = directory
        self.sources: set[str] = set()
        self.discovered = -DISCOVER_SECONDS
        self.wake = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        self.warned: set[str] = set()  # sources whose dead-letter queue is missing, logged once

    def start(self) -> None:
        """Run in the background on the running loop (once)."""
        if self.task is None or self.task.done():
            self.task = asyncio.get_running_loop().create_task(self.run(), name="keyqueue-sqs-redrive")

    def poke(self, name: str) -> None:
        """A receive on ``name`` may have made dead letters: move them now."""
        self.sources.add(name)
        self.wake.set()

    async def run(self) -> None:
        while True:
            try:
                await self.pass_()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # Redis down, a corrupt key: log, go on at the next pass
                log.warning("sqs redrive pass failed: %s", exc)
            await asyncio.sleep(MIN_PASS_SECONDS)  # receives poke often: a pass at most this often
            try:
                await asyncio.wait_for(self.wake.wait(), SWEEP_SECONDS)
            except asyncio.TimeoutError:
                pass
            self.wake.clear()

    async def pass_(self) -> int:
        if time.monotonic() - self.discovered >= DISCOVER_SECONDS:
            self.discovered = time.monotonic()
            self.sources |= {k.name for k in await sources_of(self.directory, None)}
        moved = 0
        for name in sorted(self.sources):
            try:
                known = await self.directory.get(name)
            except SqsError:
                self.sources.discard(name)
                continue
            if known.redrive is None:
                self.sources.discard(name)
                continue
            moved += await self.sweep(known)
        return moved

    async def sweep(self, source: Known) -> int:
        """Move every dead letter of ``source`` to its dead-letter queue."""
        target_name = source.dead_letter_queue
        if target_name is None:
            return 0
        moved = 0
        while True:
            letters = await source.queue.peek(STEP, source="dead")
            if not letters:
                return moved
            try:
                target = await self.directory.get(target_name)
            except SqsError:
                if source.name not in self.warned:
                    self.warned.add(source.name)
                    log.warning(
                        "sqs queue %s: dead-letter queue %s does not exist; its dead letters stay "
                        "in the queue's own dead letters",
                        source.name,
                        target_name,
                    )
                return moved
            self.warned.discard(source.name)
            attributes, first = [], []
            for m in letters:
                stored = Stored.load(m.attributes)
                stored.message_id = source.message_id(m.id, stored)
                stored.source = source.name
                stored.sent_ms = stored.sent_ms or round(m.enqueued_at * 1000)
                stored.receives = m.receives  # the dead-letter queue's receives count on from these
                stored.first_ms = round(m.first_claimed_at * 1000) if m.first_claimed_at else None
                attributes.append(stored.dump())
                first.append(stored.sent_ms / 1000)
            keys = [f"sqs-redrive:{source.name}:{m.id}:{round(m.enqueued_at * 1000)}" for m in letters]
            if target.fifo:
                # each in its group, in the order they died (a grouped message starts its
                # retention afresh: the library takes no first enqueue time with a group)
                for m, key, a in zip(letters, keys, attributes):
                    await target.queue.enqueue(m.body, group=m.group, dedup_key=key, attributes=a)
            else:
                # (the first enqueue time goes along: the dead-letter queue's retention counts from it, as SQS's)
                await target.queue.enqueue_many(
                    [m.body for m in letters], dedup_keys=keys, attributes=attributes, enqueued_at=first
                )
            moved += await source.queue.purge(source="dead", ids=[m.id for m in letters])


async def sources_of(directory: Directory, target: str | None) -> list[Known]:
    """The queues whose redrive policy names ``target`` (None: any queue). One metadata read
    per queue (100 at a time), the full look only for those with a policy."""
    names = await directory.names()
    found = []
    for i in range(0, len(names), 100):
        chunk = names[i : i + 100]
        metas = await asyncio.gather(*(directory.queue(n).metadata() for n in chunk))
        for name, meta in zip(chunk, metas):
            policy = meta.get("attr:RedrivePolicy")
            if policy and (target is None or dead_letter_queue(policy) == target):
                found.append(name)
    out = []
    for name in found:
        try:
            out.append(await directory.get(name))
        except SqsError:
            continue
    return out


@dataclass
class MoveTask:
    handle: str
    source: str
    destination: str | None
    per_second: int | None
    to_move: int
    started_ms: int = field(default_factory=lambda: int(time.time() * 1000))
    status: str = "RUNNING"
    moved: int = 0
    failure: str | None = None
    task: asyncio.Task[None] | None = None

    def describe(self, directory: Directory) -> dict[str, Any]:
        out: dict[str, Any] = {
            "Status": self.status,
            "SourceArn": directory.arn(self.source),
            "ApproximateNumberOfMessagesMoved": self.moved,
            "ApproximateNumberOfMessagesToMove": self.to_move,
            "StartedTimestamp": self.started_ms,
        }
        if self.status == "RUNNING":
            out["TaskHandle"] = self.handle
        if self.destination:
            out["DestinationArn"] = directory.arn(self.destination)
        if self.per_second:
            out["MaxNumberOfMessagesPerSecond"] = self.per_second
        if self.failure:
            out["FailureReason"] = self.failure
        return out


#: Seconds a move task waits when its source's limits hold its claims back.
LIMITED_PAUSE = 0.1


class MoveTasks:
    """StartMessageMoveTask, ListMessageMoveTasks, CancelMessageMoveTask: tasks run by this
    server (a restart forgets them; the messages they had not moved stay in the source)."""

    def __init__(self, directory: Directory) -> None:
        self.directory = directory
        self.tasks: dict[str, list[MoveTask]] = {}

    async def start(self, source: Known, destination: Known | None, per_second: int | None) -> MoveTask:
        if not await sources_of(self.directory, source.name):
            raise invalid("Source queue must be configured as a Dead Letter Queue.")
        history = self.tasks.setdefault(source.name, [])
        if any(t.status == "RUNNING" for t in history):
            raise invalid(
                "There is already a task running. Only one active task is allowed for a source "
                "queue arn at a given time."
            )
        handle = base64.b64encode(
            json.dumps({"taskId": str(uuid.uuid4()), "sourceArn": self.directory.arn(source.name)}).encode()
        ).decode()
        stats = await source.queue.stats()
        task = MoveTask(handle, source.name, destination.name if destination else None, per_second, stats.waiting)
        history.insert(0, task)
        del history[10:]
        task.task = asyncio.get_running_loop().create_task(self.run(task), name="keyqueue-sqs-move")
        return task

    def find(self, handle: str) -> MoveTask:
        for history in self.tasks.values():
            for t in history:
                if t.handle == handle:
                    return t
        raise SqsError("ResourceNotFoundException", "The specified task handle does not exist.")

    async def run(self, task: MoveTask) -> None:
        try:
            source = await self.directory.get(task.source)
            began = time.monotonic()
            while task.status == "RUNNING":
                batch = 10 if task.per_second is None else max(1, min(10, task.per_second))
                got = await source.queue.claim_many(batch, visibility_timeout=60)
                if not got:
                    # Nothing claimed while messages wait: the source's limits (a keyqueue
                    # rate limit, an in-flight cap) hold claims back for now.
                    if (await source.queue.stats()).waiting == 0:
                        task.status = "COMPLETED"
                        return
                    await asyncio.sleep(LIMITED_PAUSE)
                    continue
                by_destination: dict[str, list[Any]] = {}
                for m in got:
                    stored = Stored.load(m.attributes)
                    where = task.destination or stored.source
                    if where is None:
                        await source.queue.release(m)
                        task.status = "FAILED"
                        task.failure = (
                            f"message {source.message_id(m.id, stored)} has no source queue: give a DestinationArn"
                        )
                        continue
                    by_destination.setdefault(where, []).append((m, stored))
                for where, pairs in by_destination.items():
                    target = await self.directory.get(where)
                    for _, stored in pairs:  # a fresh start where they go
                        stored.source = stored.receives = stored.first_ms = None
                    if target.fifo:  # each in its group, in order
                        for m, stored in pairs:
                            await target.queue.enqueue(m.body, group=m.group, attributes=stored.dump())
                    else:
                        await target.queue.enqueue_many(
                            [m.body for m, _ in pairs], attributes=[s.dump() for _, s in pairs]
                        )
                    task.moved += await source.queue.ack_many([m for m, _ in pairs])
                if task.per_second:
                    await asyncio.sleep(max(0.0, began + task.moved / task.per_second - time.monotonic()))
        except asyncio.CancelledError:
            task.status = "CANCELLED"
        except Exception as exc:
            task.status, task.failure = "FAILED", str(exc)
            log.warning("sqs move task from %s failed: %s", task.source, exc)
