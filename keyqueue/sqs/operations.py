"""One function per SQS operation, each a thin mapping onto keyqueue.aio.Queue: SendMessage =
enqueue (with a delay, attributes in the item hash), ReceiveMessage = claim_many (the
visibility timeout, the long-poll wait), DeleteMessage = ack, ChangeMessageVisibility =
extend (0 = release), PurgeQueue = purge, DeleteQueue = destroy."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Mapping

from ..aio.message import Message
from ..core.shards import SEP
from .errors import SqsError, invalid, missing
from .handles import Handles
from .md5 import md5_of_attributes, md5_of_body
from .queues import FIFO_STORED, QUEUE_ATTRIBUTES, ZERO_VISIBILITY, Directory, Known, check_attributes, check_throughput
from .redrive import MoveTasks, Redriver
from .stored import Stored
from .validate import (
    MAX_MESSAGE_BYTES,
    MAX_TAG_KEY,
    MAX_VISIBILITY,
    MAX_WAIT,
    body,
    entries,
    entry_size,
    fifo_id,
    integer,
    message_attributes,
    queue_name,
    size_of,
    string,
    tag_key,
)
from .validate import tags as valid_tags

Params = Mapping[str, Any]
Result = dict[str, Any]


class Sqs:
    """The operations of one server: its queues, handles, redrive and move tasks."""

    def __init__(self, directory: Directory, handles: Handles, sender_id: str) -> None:
        self.directory = directory
        self.handles = handles
        self.sender_id = sender_id
        self.redriver = Redriver(directory)
        self.moves = MoveTasks(directory)

    # -- queues ---------------------------------------------------------------------------

    async def create_queue(self, p: Params, host: str) -> Result:
        raw = p.get("Attributes")
        kind = raw.get("FifoQueue") if isinstance(raw, dict) else None
        fifo = isinstance(kind, str) and kind.lower() == "true"
        if kind is not None and not (isinstance(kind, str) and kind.lower() in ("true", "false")):
            raise SqsError("InvalidAttributeValue", "Invalid value for the parameter FifoQueue.")
        name = queue_name(p.get("QueueName"), fifo)
        attributes = check_attributes(raw, self.directory.name_of_arn, fifo)
        if fifo:
            check_throughput(FIFO_STORED | attributes)
        tags = valid_tags(p.get("tags") or p.get("Tags"))
        await self.check_redrive_target(attributes, fifo)
        await self.directory.create(name, attributes, tags)
        return {"QueueUrl": self.directory.url(host, name)}

    async def check_redrive_target(self, attributes: Mapping[str, str], fifo: bool) -> None:
        policy = attributes.get("RedrivePolicy")
        if policy:
            reason = f"Value {policy} for parameter RedrivePolicy is invalid. Reason: "
            arn = json.loads(policy)["deadLetterTargetArn"]
            try:
                target = await self.directory.get(self.directory.name_of_arn(arn))
            except SqsError:
                raise invalid(reason + "Dead letter target does not exist.") from None
            if target.fifo != fifo:
                raise invalid(reason + "Dead-letter target owner queue must be of the same type (FIFO or standard).")

    async def get_queue_url(self, p: Params, host: str) -> Result:
        known = await self.directory.get(queue_name(p.get("QueueName")))
        return {"QueueUrl": self.directory.url(host, known.name)}

    async def list_queues(self, p: Params, host: str) -> Result:
        prefix = string(p, "QueueNamePrefix") or ""
        return self.page([n for n in await self.directory.names() if n.startswith(prefix)], p, host, "QueueUrls")

    def page(self, names: list[str], p: Params, host: str, key: str) -> Result:
        """One page of queue URLs (sorted names), as MaxResults and NextToken ask: all up to
        1000 without MaxResults; a NextToken only with MaxResults and more to come."""
        limit = integer(p, "MaxResults", 1, 1000)
        token = string(p, "NextToken")
        after = _untoken(token) if token else ""
        names = [n for n in names if n > after]
        page = names[: limit or 1000]
        out: Result = {key: [self.directory.url(host, n) for n in page]} if page else {}
        if limit is not None and len(names) > limit:
            out["NextToken"] = base64.urlsafe_b64encode(page[-1].encode()).decode()
        return out

    async def delete_queue(self, p: Params, host: str) -> Result:
        known = await self.directory.by_url(p)
        await known.queue.destroy()
        self.directory.forget(known.name)
        return {}

    async def get_queue_attributes(self, p: Params, host: str) -> Result:
        known = await self.directory.by_url(p)
        names = p.get("AttributeNames") or []
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise invalid("AttributeNames must be a list of attribute names.")
        attributes = await self.directory.attributes(known, names)
        for n in names:
            if n not in QUEUE_ATTRIBUTES:
                raise SqsError("InvalidAttributeName", f"Unknown Attribute {n}.")
        return {"Attributes": attributes} if attributes else {}

    async def set_queue_attributes(self, p: Params, host: str) -> Result:
        known = await self.directory.by_url(p)
        if p.get("Attributes") is None:
            raise missing("Attributes")
        attributes = check_attributes(p.get("Attributes"), self.directory.name_of_arn, known.fifo)
        if known.fifo:
            check_throughput({n: known.attribute(n) for n in FIFO_STORED} | attributes)
        if attributes.get("DeduplicationScope") == "queue" and known.fifo and known.queue.shards > 1:
            raise SqsError(
                "InvalidAttributeValue",
                "Invalid value for the parameter DeduplicationScope. Reason: a sharded FIFO queue "
                "deduplicates within a message group (DeduplicationScope messageGroup).",
            )
        await self.check_redrive_target(attributes, known.fifo)
        await self.directory.set_attributes(known, attributes)
        if attributes.get("RedrivePolicy"):
            self.redriver.poke(known.name)
        return {}

    async def purge_queue(self, p: Params, host: str) -> Result:
        known = await self.directory.by_url(p)
        await known.queue.purge(source="all")
        if known.fifo:  # (SQS's purge clears a FIFO queue's deduplication too)
            await known.queue.forget_dedup_keys()
        return {}

    async def tag_queue(self, p: Params, host: str) -> Result:
        known = await self.directory.by_url(p)
        tags = valid_tags(p.get("Tags"))
        if not tags:
            raise missing("Tags")
        if len({**known.tags, **tags}) > 50:
            raise invalid(f"Too many tags added for queue {known.name}.")
        await known.queue.set_metadata({f"tag:{k}": v for k, v in tags.items()})
        self.directory.forget(known.name)
        return {}

    async def untag_queue(self, p: Params, host: str) -> Result:
        known = await self.directory.by_url(p)
        keys = p.get("TagKeys")
        if keys is None:
            raise missing("TagKeys")
        if not isinstance(keys, list) or not keys:
            raise invalid(f"Tag keys must be between 1 and {MAX_TAG_KEY} characters in length.")
        await known.queue.set_metadata({}, remove=[f"tag:{tag_key(k)}" for k in keys])
        self.directory.forget(known.name)
        return {}

    async def list_queue_tags(self, p: Params, host: str) -> Result:
        known = await self.directory.by_url(p)
        return {"Tags": known.tags} if known.tags else {}

    async def list_dead_letter_source_queues(self, p: Params, host: str) -> Result:
        from .redrive import sources_of

        known = await self.directory.by_url(p)
        names = sorted(k.name for k in await sources_of(self.directory, known.name))
        return {"queueUrls": [], **self.page(names, p, host, "queueUrls")}  # queueUrls is required

    # -- messages -------------------------------------------------------------------------

    def prepare(self, known: Known, p: Params) -> Outgoing:
        """One message to send, checked: its body, delay, what it stores, and its reply."""
        text = body(p)
        fifo = self.fifo_ids(known, p, text)
        attributes = message_attributes(p.get("MessageAttributes"))
        system = message_attributes(p.get("MessageSystemAttributes"), system=True)
        delay = integer(p, "DelaySeconds", 0, 900, known.int_attribute("DelaySeconds"))
        if known.fifo and p.get("DelaySeconds"):
            raise invalid(
                f"Value {p['DelaySeconds']} for parameter DelaySeconds is invalid. Reason: The request "
                "include parameter that is not valid for this queue type."
            )
        limit = known.queue.settings.max_body_bytes
        if size_of(text, attributes) > limit:
            raise invalid(f"One or more parameters are invalid. Reason: Message must be shorter than {limit} bytes.")
        out: Result = {"MD5OfMessageBody": md5_of_body(text)}
        if attributes:
            out["MD5OfMessageAttributes"] = md5_of_attributes(attributes)
        if system:
            out["MD5OfMessageSystemAttributes"] = md5_of_attributes(system)
        stored = Stored(attributes, system, dedup_id=fifo[1] if fifo else None)
        return Outgoing(text, delay or 0, stored, out, *(fifo or (None, None)))

    def fifo_ids(self, known: Known, p: Params, text: str) -> tuple[str, str] | None:
        """A FIFO message's MessageGroupId and MessageDeduplicationId (given, or the SHA-256
        of its body with ContentBasedDeduplication); None on a standard queue, which takes
        neither."""
        group = fifo_id(p, "MessageGroupId")
        dedup = fifo_id(p, "MessageDeduplicationId")
        if not known.fifo:
            if dedup is not None:
                raise invalid(
                    "The request include parameter that is not valid for this queue type: MessageDeduplicationId."
                )
            return None
        if group is None:
            raise missing("MessageGroupId")
        if dedup is None:
            if known.attribute("ContentBasedDeduplication") != "true":
                raise invalid(NO_DEDUP)
            dedup = hashlib.sha256(text.encode("utf-8")).hexdigest()
        return group, dedup

    async def send_message(self, p: Params, host: str) -> Result:
        known = await self.directory.by_url(p)
        m = self.prepare(known, p)
        msg_id = await self.send_one(known, m)
        m.out["MessageId"] = known.message_id(msg_id)
        if known.fifo:
            m.out["SequenceNumber"] = sequence_number(msg_id)
        return m.out

    async def send_one(self, known: Known, m: Outgoing) -> str:
        if m.group is None or m.dedup is None:
            return await known.queue.enqueue(m.text, delay=m.delay, attributes=m.stored.dump())
        return await known.queue.enqueue(
            m.text,
            delay=m.delay,
            attributes=m.stored.dump(),
            group=m.group,
            dedup_key=known.dedup_key(m.dedup, m.group),
        )

    async def send_message_batch(self, p: Params, host: str) -> Result:
        known = await self.directory.by_url(p)
        got = entries(p, "SendMessageBatch")
        total = sum(entry_size(e) for e in got)  # bodies and attributes, as SQS counts
        if total > MAX_MESSAGE_BYTES:
            raise SqsError(
                "BatchRequestTooLong",
                f"Batch requests cannot be longer than {MAX_MESSAGE_BYTES} bytes. You have sent {total} bytes.",
            )
        if known.fifo:  # (SQS refuses the whole batch, sending none of it)
            content_based = known.attribute("ContentBasedDeduplication") == "true"
            for e in got:
                if e.get("MessageGroupId") is None:
                    raise invalid("The request must contain the parameter MessageGroupId.")
                if e.get("MessageDeduplicationId") is None and not content_based:
                    raise invalid(NO_DEDUP)
        ok: list[tuple[str, Outgoing]] = []
        failed: list[Result] = []
        for e in got:
            try:
                ok.append((e["Id"], self.prepare(known, e)))
            except SqsError as exc:
                failed.append(_failure(e["Id"], exc))
        ids: list[str] = []
        if ok and known.fifo:
            # one at a time, in order: each has its own group and deduplication id
            ids = [await self.send_one(known, m) for _, m in ok]
        elif ok:
            delays = [m.delay for _, m in ok]
            stored = [m.stored.dump() for _, m in ok]
            ids = await known.queue.enqueue_many(
                [m.text for _, m in ok],
                delay=delays[0],
                delays=None if len(set(delays)) == 1 else delays,
                attributes=None if not any(stored) else stored,
            )
        for (entry_id, m), msg_id in zip(ok, ids):
            m.out.update(Id=entry_id, MessageId=known.message_id(msg_id))
            if known.fifo:
                m.out["SequenceNumber"] = sequence_number(msg_id)
        return {"Successful": [m.out for _, m in ok], "Failed": failed}

    async def receive_message(self, p: Params, host: str) -> Result:
        known = await self.directory.by_url(p)
        count = integer(p, "MaxNumberOfMessages", 1, 10, 1) or 1
        visibility = integer(p, "VisibilityTimeout", 0, MAX_VISIBILITY)
        wait = integer(p, "WaitTimeSeconds", 0, MAX_WAIT, known.int_attribute("ReceiveMessageWaitTimeSeconds"))
        system = _names(p.get("AttributeNames")) | _names(p.get("MessageSystemAttributeNames"))
        wanted = _names(p.get("MessageAttributeNames"))
        got = await known.queue.claim_many(
            count, visibility_timeout=None if visibility is None else visibility or 1, wait=wait or 0
        )
        if known.redrive is not None:
            self.redriver.poke(known.name)
        if visibility == 0 or visibility is None and known.queue.settings.visibility_timeout <= ZERO_VISIBILITY:
            # visible again at once, as SQS's 0: given back now (its handle then acts on nothing)
            await asyncio.gather(*(known.queue.release(m) for m in got))
        messages = [self.delivered(known, m, system, wanted) for m in got]
        return {"Messages": messages} if messages else {}

    def delivered(self, known: Known, m: Message, system: set[str], wanted: set[str]) -> Result:
        stored = Stored.load(m.attributes)
        text = m.body.decode("utf-8", "replace")
        out: Result = {
            "MessageId": known.message_id(m.id, stored),
            "ReceiptHandle": self.handles.make(known.name, m.id, m.receipt or ""),
            "MD5OfBody": md5_of_body(text),
            "Body": text,
        }
        every = "All" in system
        attrs = {
            "SenderId": self.sender_id,
            "SentTimestamp": str(stored.sent_ms or round(m.enqueued_at * 1000)),
            "ApproximateReceiveCount": str(m.receives + (stored.receives or 0)),
            "ApproximateFirstReceiveTimestamp": str(
                stored.first_ms or round((m.first_claimed_at or m.enqueued_at) * 1000)
            ),
        }
        if "AWSTraceHeader" in stored.system:
            attrs["AWSTraceHeader"] = str(stored.system["AWSTraceHeader"][1])
        if stored.source:
            attrs["DeadLetterQueueSourceArn"] = self.directory.arn(stored.source)
        if known.fifo:
            attrs["SequenceNumber"] = sequence_number(m.id)
            if m.group is not None:
                attrs["MessageGroupId"] = m.group
            if stored.dedup_id is not None:
                attrs["MessageDeduplicationId"] = stored.dedup_id
        chosen = {k: v for k, v in attrs.items() if every or k in system}
        if chosen:
            out["Attributes"] = chosen
        selected = {k: v for k, v in stored.attributes.items() if _selected(k, wanted)}
        if selected:
            out["MessageAttributes"] = {k: _wire(t, v) for k, (t, v) in selected.items()}
            out["MD5OfMessageAttributes"] = md5_of_attributes(selected)
        return out

    async def delete_message(self, p: Params, host: str) -> Result:
        known = await self.directory.by_url(p)
        h = self.handles.read(p.get("ReceiptHandle"), known.name)
        # A handle of an earlier delivery deletes nothing (keyqueue's receipt fences it): no error,
        # as SQS answers a delete of a message already gone.
        await known.queue.ack(known.held(h.id, h.receipt))
        return {}

    async def delete_message_batch(self, p: Params, host: str) -> Result:
        known = await self.directory.by_url(p)
        ok, failed, held = [], [], []
        for e in entries(p, "DeleteMessageBatch"):
            try:
                h = self.handles.read(e.get("ReceiptHandle"), known.name)
            except SqsError as exc:
                failed.append(_failure(e["Id"], exc))
                continue
            held.append(known.held(h.id, h.receipt))
            ok.append({"Id": e["Id"]})
        if held:
            await known.queue.ack_many(held)
        return {"Successful": ok, "Failed": failed}

    async def change_visibility(self, known: Known, handle: object, seconds: object) -> None:
        if seconds is None:
            raise missing("VisibilityTimeout")
        timeout = integer({"VisibilityTimeout": seconds}, "VisibilityTimeout", 0, MAX_VISIBILITY) or 0
        h = self.handles.read(handle, known.name)
        m = known.held(h.id, h.receipt)
        done = await (known.queue.release(m) if timeout == 0 else known.queue.extend(m, timeout))
        if not done:
            raise invalid(
                f"Value {handle} for parameter ReceiptHandle is invalid. Reason: Message does not "
                "exist or is not available for visibility timeout change."
            )

    async def change_message_visibility(self, p: Params, host: str) -> Result:
        known = await self.directory.by_url(p)
        await self.change_visibility(known, p.get("ReceiptHandle"), p.get("VisibilityTimeout"))
        return {}

    async def change_message_visibility_batch(self, p: Params, host: str) -> Result:
        known = await self.directory.by_url(p)
        got = entries(p, "ChangeMessageVisibilityBatch")

        async def one(e: dict[str, Any]) -> Result:
            try:
                await self.change_visibility(known, e.get("ReceiptHandle"), e.get("VisibilityTimeout"))
            except SqsError as exc:
                return _failure(e["Id"], exc)
            return {"Id": e["Id"]}

        results = await asyncio.gather(*(one(e) for e in got))
        return {"Successful": [r for r in results if "Code" not in r], "Failed": [r for r in results if "Code" in r]}

    # -- dead-letter queues ------------------------------------------------------------------

    async def start_message_move_task(self, p: Params, host: str) -> Result:
        source = await self._by_arn(p.get("SourceArn"), "SourceArn")
        destination = await self._by_arn(p["DestinationArn"], "DestinationArn") if p.get("DestinationArn") else None
        per_second = integer(p, "MaxNumberOfMessagesPerSecond", 1, 500)
        if destination is not None and destination.fifo != source.fifo:
            raise invalid("The destination queue must be of the same type (FIFO or standard) as the source queue.")
        task = await self.moves.start(source, destination, per_second)
        return {"TaskHandle": task.handle}

    async def list_message_move_tasks(self, p: Params, host: str) -> Result:
        source = await self._by_arn(p.get("SourceArn"), "SourceArn")
        limit = integer(p, "MaxResults", 1, 10, 1) or 1
        return {"Results": [t.describe(self.directory) for t in self.moves.tasks.get(source.name, [])[:limit]]}

    async def cancel_message_move_task(self, p: Params, host: str) -> Result:
        handle = string(p, "TaskHandle", required=True)
        task = self.moves.find(handle or "")
        if task.status != "RUNNING" or task.task is None:
            raise invalid("Only active tasks can be cancelled.")
        task.task.cancel()
        task.status = "CANCELLED"
        return {"ApproximateNumberOfMessagesMoved": task.moved}

    async def _by_arn(self, arn: object, what: str) -> Known:
        if arn is None:
            raise missing(what)
        try:
            return await self.directory.get(self.directory.name_of_arn(arn))
        except SqsError as exc:
            if exc.shape == "QueueDoesNotExist":
                raise SqsError(
                    "ResourceNotFoundException",
                    f"The resource that you specified for the {what} parameter doesn't exist.",
                ) from None
            raise


@dataclass
class Outgoing:
    """A message checked for sending, and its reply so far."""

    text: str
    delay: int
    stored: Stored
    out: Result
    group: str | None
    dedup: str | None


#: SQS's refusal of a FIFO message without a deduplication id on a queue without
#: content-based deduplication.
NO_DEDUP = (
    "The queue should either have ContentBasedDeduplication enabled or MessageDeduplicationId provided explicitly"
)


def sequence_number(msg_id: str) -> str:
    """A FIFO message's SequenceNumber: its keyqueue id (an integer the queue's counter
    gives, so it grows within the queue), in 20 digits as SQS writes them. A sharded queue's
    ``"<shard>#<id>"`` is the id then the shard in four digits: it grows within a shard,
    where a message group lives, and no two messages of the queue share one."""
    shard, sep, inner = msg_id.partition(SEP)
    return f"{inner}{int(shard):04d}".zfill(20) if sep else msg_id.zfill(20)


def _failure(entry_id: str, exc: SqsError) -> Result:
    return {"Id": entry_id, "SenderFault": exc.fault == "Sender", "Code": exc.code, "Message": exc.message}


def _names(raw: object) -> set[str]:
    return {str(n) for n in raw} if isinstance(raw, list) else set()


def _selected(name: str, wanted: set[str]) -> bool:
    """MessageAttributeNames: All, .* or * (every one), a name, or PREFIX.*, which SQS reads as
    the names starting with PREFIX (Custom.* takes Custom1 too, not only Custom.x)."""
    if wanted & {"All", ".*", "*"} or name in wanted:
        return True
    return any(w.endswith(".*") and name.startswith(w[:-2]) for w in wanted)


def _wire(data_type: str, value: str | bytes) -> Result:
    if isinstance(value, bytes):
        return {"DataType": data_type, "BinaryValue": base64.b64encode(value).decode()}
    return {"DataType": data_type, "StringValue": value}


def _untoken(token: str) -> str:
    try:
        return base64.urlsafe_b64decode(token.encode()).decode()
    except (ValueError, UnicodeDecodeError):
        raise invalid("Invalid NextToken value.") from None


Operation = Callable[[Sqs, Params, str], Awaitable[Result]]

#: Every operation this API answers, by its SQS name.
OPERATIONS: dict[str, Operation] = {
    "CreateQueue": Sqs.create_queue,
    "GetQueueUrl": Sqs.get_queue_url,
    "ListQueues": Sqs.list_queues,
    "DeleteQueue": Sqs.delete_queue,
    "GetQueueAttributes": Sqs.get_queue_attributes,
    "SetQueueAttributes": Sqs.set_queue_attributes,
    "PurgeQueue": Sqs.purge_queue,
    "TagQueue": Sqs.tag_queue,
    "UntagQueue": Sqs.untag_queue,
    "ListQueueTags": Sqs.list_queue_tags,
    "ListDeadLetterSourceQueues": Sqs.list_dead_letter_source_queues,
    "SendMessage": Sqs.send_message,
    "SendMessageBatch": Sqs.send_message_batch,
    "ReceiveMessage": Sqs.receive_message,
    "DeleteMessage": Sqs.delete_message,
    "DeleteMessageBatch": Sqs.delete_message_batch,
    "ChangeMessageVisibility": Sqs.change_message_visibility,
    "ChangeMessageVisibilityBatch": Sqs.change_message_visibility_batch,
    "StartMessageMoveTask": Sqs.start_message_move_task,
    "ListMessageMoveTasks": Sqs.list_message_move_tasks,
    "CancelMessageMoveTask": Sqs.cancel_message_move_task,
}
