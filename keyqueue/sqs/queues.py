"""SQS queues as keyqueue queues: names, URLs and ARNs, queue attributes (VisibilityTimeout,
MaximumMessageSize and MessageRetentionPeriod are the keyqueue settings visibility_timeout,
max_body_bytes and retention, maxReceiveCount is max_receives, the rest
lives in the queue's metadata hash ``P:{NAME}:meta``), and a short-lived cache of the
queues a server has seen, so a request costs no lookups beyond its own operation."""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from dataclasses import dataclass
from typing import Any, Mapping
from urllib.parse import urlsplit

from ..aio import Queue
from ..aio.message import Message
from ..aio.queue import list_queues
from .errors import SqsError, invalid, missing, no_queue
from .stored import Stored
from .validate import MAX_DELAY, MAX_MESSAGE_BYTES, MAX_VISIBILITY, MAX_WAIT, QUEUE_NAME, is_fifo, is_text, queue_name

ACCOUNT = "000000000000"
#: Seconds a server trusts what it read about a queue (that it exists, its settings and
#: attributes) before reading them again: changes made elsewhere show within this.
FRESH_SECONDS = 1.0
#: keyqueue's smallest visibility timeout, which VisibilityTimeout 0 is stored as (receives
#: then release the message at once, so it is visible again at once, as SQS's 0 is).
ZERO_VISIBILITY = 0.001
#: MessageIds of messages the SQS API did not send are derived from this namespace.
MESSAGE_IDS = uuid.UUID("6f1d3c2a-6b1e-4f57-9d0a-4b9e1c6a5e21")
_NAMESPACE = MESSAGE_IDS.bytes

#: Attributes kept in the metadata hash (field ``attr:<Name>``), with their defaults.
STORED = {
    "DelaySeconds": "0",
    "ReceiveMessageWaitTimeSeconds": "0",
    "RedrivePolicy": None,
    "RedriveAllowPolicy": None,
    "Policy": None,
    "KmsMasterKeyId": None,
    "KmsDataKeyReusePeriodSeconds": None,
    "SqsManagedSseEnabled": "false",
}
#: Attributes that are keyqueue settings.
SETTINGS = ("VisibilityTimeout", "MaximumMessageSize", "MessageRetentionPeriod")
#: SQS FIFO's deduplication interval: a FIFO queue's dedup_window.
DEDUPLICATION_SECONDS = 300.0
#: SQS's default MessageRetentionPeriod (4 days): a queue CreateQueue makes without one gets it.
DEFAULT_RETENTION = 345_600
READ_ONLY = (
    "ApproximateNumberOfMessages",
    "ApproximateNumberOfMessagesNotVisible",
    "ApproximateNumberOfMessagesDelayed",
    "CreatedTimestamp",
    "LastModifiedTimestamp",
    "QueueArn",
)
#: A FIFO queue's attributes (its own, in the metadata hash like STORED), with their defaults
#: and values. FifoQueue is the queue's kind: given at creation, never stored (the name says it).
FIFO_STORED = {"ContentBasedDeduplication": "false", "DeduplicationScope": "queue", "FifoThroughputLimit": "perQueue"}
FIFO_VALUES = {
    "FifoQueue": ("true", "false"),
    "ContentBasedDeduplication": ("true", "false"),
    "DeduplicationScope": ("queue", "messageGroup"),
    "FifoThroughputLimit": ("perQueue", "perMessageGroupId"),
}
FIFO = ("FifoQueue", *FIFO_STORED)
#: Every name GetQueueAttributes accepts (SQS's QueueAttributeName); those a queue lacks (the
#: FIFO ones, unset policies) are left out of the reply, not refused.
QUEUE_ATTRIBUTES = frozenset({"All", *STORED, *SETTINGS, *READ_ONLY, *FIFO})
RANGES = {
    "VisibilityTimeout": (0, MAX_VISIBILITY),
    "MaximumMessageSize": (1024, MAX_MESSAGE_BYTES),
    "DelaySeconds": (0, MAX_DELAY),
    "MessageRetentionPeriod": (60, 1_209_600),
    "ReceiveMessageWaitTimeSeconds": (0, MAX_WAIT),
    "KmsDataKeyReusePeriodSeconds": (60, 86_400),
}


def uuid5(name: str) -> str:
    """``str(uuid.uuid5(MESSAGE_IDS, name))`` at a third of its cost (ten per batch add up)."""
    h = bytearray(hashlib.sha1(_NAMESPACE + name.encode()).digest()[:16])
    h[6], h[8] = (h[6] & 0x0F) | 0x50, (h[8] & 0x3F) | 0x80
    x = h.hex()
    return f"{x[:8]}-{x[8:12]}-{x[12:16]}-{x[16:20]}-{x[20:]}"


def check_throughput(attributes: Mapping[str, str | None]) -> None:
    """A FIFO queue's attributes as they would be: FifoThroughputLimit perMessageGroupId is
    allowed only with DeduplicationScope messageGroup, as SQS allows it."""
    if (
        attributes.get("FifoThroughputLimit") == "perMessageGroupId"
        and attributes.get("DeduplicationScope") != "messageGroup"
    ):
        raise SqsError(
            "InvalidAttributeValue",
            "Invalid value for the parameter FifoThroughputLimit. Reason: The perMessageGroupId value "
            "is allowed only when the value for DeduplicationScope is messageGroup.",
        )


def check_attributes(attributes: object, arn_to_name: Any, fifo: bool) -> dict[str, str]:
    """CreateQueue's or SetQueueAttributes' Attributes, checked as SQS checks them: the FIFO
    ones on a FIFO queue only (FifoQueue true, a no-op, and left out of what is returned)."""
    if attributes is None:
        return {}
    if not isinstance(attributes, dict):
        raise invalid("Attributes must be a map of attribute names to values.")
    out: dict[str, str] = {}
    for name, value in attributes.items():
        if name in FIFO and fifo:
            known = {v.lower(): v for v in FIFO_VALUES[name]}
            if not isinstance(value, str) or value.lower() not in known:
                raise SqsError("InvalidAttributeValue", f"Invalid value for the parameter {name}.")
            if name != "FifoQueue":
                out[name] = known[value.lower()]
            elif known[value.lower()] != "true":  # (true: what the queue is, a no-op)
                raise SqsError(
                    "InvalidAttributeValue",
                    f"Invalid value for the parameter {name}. Reason: Modifying queue type is not supported.",
                )
            continue
        if name in ("DeduplicationScope", "FifoThroughputLimit"):  # on a standard queue
            raise SqsError("InvalidAttributeName", f"You can specify the {name} only when FifoQueue is set to true.")
        if name not in STORED and name not in SETTINGS:
            raise SqsError("InvalidAttributeName", f"Unknown Attribute {name}.")
        if not is_text(value):
            raise SqsError("InvalidAttributeValue", f"Invalid value for the parameter {name}.")
        if name in RANGES:
            low, high = RANGES[name]
            if not value.isdigit() or not low <= int(value) <= high:
                raise SqsError("InvalidAttributeValue", f"Invalid value for the parameter {name}.")
            value = str(int(value))
        elif name == "SqsManagedSseEnabled" and value.lower() not in ("true", "false"):
            raise SqsError("InvalidAttributeValue", f"Invalid value for the parameter {name}.")
        elif name == "RedrivePolicy" and value:
            value = json.dumps(redrive_policy(value, arn_to_name), separators=(",", ":"))
        elif name in ("RedriveAllowPolicy", "Policy") and value:
            try:
                json.loads(value)
            except ValueError:
                raise SqsError("InvalidAttributeValue", f"Invalid value for the parameter {name}.") from None
        out[name] = value
    return out


def redrive_policy(value: str, arn_to_name: Any) -> dict[str, Any]:
    """``{"deadLetterTargetArn": arn, "maxReceiveCount": 1-1000}`` (the count may be a string)."""
    reason = "Value {} for parameter RedrivePolicy is invalid. Reason: {}"
    try:
        policy = json.loads(value)
    except ValueError:
        policy = None
    if not isinstance(policy, dict) or "deadLetterTargetArn" not in policy or "maxReceiveCount" not in policy:
        raise invalid(
            reason.format(value, "Redrive policy is not a dict or is missing deadLetterTargetArn or maxReceiveCount.")
        )
    count = policy["maxReceiveCount"]
    if isinstance(count, bool) or not str(count).isdigit() or not 1 <= int(count) <= 1000:
        raise invalid(reason.format(value, "Invalid value for maxReceiveCount: must be 1 to 1000."))
    arn_to_name(policy["deadLetterTargetArn"])
    return {"deadLetterTargetArn": policy["deadLetterTargetArn"], "maxReceiveCount": int(count)}


def dead_letter_queue(policy: str | None) -> str | None:
    """The name of the queue a stored RedrivePolicy moves dead letters to (None: no policy)."""
    return str(json.loads(policy)["deadLetterTargetArn"]).split(":")[-1] if policy else None


def settings_for(attributes: Mapping[str, str]) -> dict[str, Any]:
    """The keyqueue settings these attributes set (for the Queue constructor)."""
    out: dict[str, Any] = {}
    if "VisibilityTimeout" in attributes:
        out["visibility_timeout"] = int(attributes["VisibilityTimeout"]) or ZERO_VISIBILITY
    if "MaximumMessageSize" in attributes:
        out["max_body_bytes"] = int(attributes["MaximumMessageSize"])
    if "MessageRetentionPeriod" in attributes:
        out["retention"] = int(attributes["MessageRetentionPeriod"])
    if "RedrivePolicy" in attributes:
        policy = attributes["RedrivePolicy"]
        out["max_receives"] = json.loads(policy)["maxReceiveCount"] if policy else None
    return out


def seconds_text(seconds: float) -> str:
    """A setting in seconds as an attribute value: whole seconds as SQS writes them."""
    return str(int(seconds)) if float(seconds).is_integer() else str(seconds)


def meta_for(attributes: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
    """The metadata fields these attributes write, and those they remove (an empty value)."""
    values = {f"attr:{k}": v for k, v in attributes.items() if (k in STORED or k in FIFO_STORED) and v}
    gone = [f"attr:{k}" for k, v in attributes.items() if k in STORED and not v]
    return values, gone


@dataclass
class Known:
    """A queue as this server last read it."""

    name: str
    queue: Queue
    meta: dict[str, str]
    checked: float

    def attribute(self, name: str) -> str | None:
        if name == "DeduplicationScope" and self.fifo and self.queue.shards > 1:
            return "messageGroup"  # (a group's messages share a shard, its dedup keys; the queue's do not)
        return self.meta.get(f"attr:{name}", STORED.get(name, FIFO_STORED.get(name)))

    @property
    def fifo(self) -> bool:
        return is_fifo(self.name)

    def dedup_key(self, dedup_id: str, group: str) -> str:
        """The keyqueue dedup_key of a FIFO message: its MessageDeduplicationId, within its
        group when DeduplicationScope is messageGroup (neither id holds a space)."""
        return f"{group} {dedup_id}" if self.attribute("DeduplicationScope") == "messageGroup" else dedup_id

    def int_attribute(self, name: str) -> int:
        return int(self.attribute(name) or 0)

    @property
    def redrive(self) -> dict[str, Any] | None:
        raw = self.attribute("RedrivePolicy")
        return json.loads(raw) if raw else None

    @property
    def dead_letter_queue(self) -> str | None:
        """The name of the queue the redrive policy moves dead letters to."""
        return dead_letter_queue(self.attribute("RedrivePolicy"))

    @property
    def tags(self) -> dict[str, str]:
        return {k[4:]: v for k, v in self.meta.items() if k.startswith("tag:")}

    def message_id(self, msg_id: str, stored: Stored | None = None) -> str:
        """A message's SQS MessageId: the one it kept through moves, else derived from the
        queue (and when it was made, so a queue made again gets new ones) and the id."""
        if stored is not None and stored.message_id:
            return stored.message_id
        return uuid5(f"{self.name}/{self.meta.get('created', '')}/{msg_id}")

    def held(self, msg_id: str, receipt: str) -> Message:
        """A delivery to settle, from a receipt handle's parts."""
        return Message(
            id=msg_id, body=b"", receipt=receipt, receives=0, enqueued_at=0.0, deadline=None, last_error=None
        )


class Directory:
    """The queues of one key prefix as SQS sees them."""

    def __init__(self, client: Any, prefix: str, region: str, shards: int = 1) -> None:
        self.client, self.prefix, self.region = client, prefix, region
        #: The shard count of the queues CreateQueue makes (a FIFO queue's only with
        #: DeduplicationScope messageGroup, which is what a sharded FIFO queue can keep).
        self.shards = shards
        self.known: dict[str, Known] = {}
        #: Bumped by every forget(): a read of a queue that began before one (it awaited
        #: Redis meanwhile) answers its request but does not fill the cache with what it read.
        self.forgotten = 0

    def arn(self, name: str) -> str:
        return f"arn:aws:sqs:{self.region}:{ACCOUNT}:{name}"

    def url(self, host: str, name: str) -> str:
        return f"{host}/{ACCOUNT}/{name}"

    def name_of_arn(self, arn: object) -> str:
        parts = arn.split(":") if isinstance(arn, str) else []
        if len(parts) != 6 or parts[:3] != ["arn", "aws", "sqs"] or not QUEUE_NAME.fullmatch(parts[5]):
            raise invalid(f"Value {arn} for parameter is invalid. Reason: not an SQS queue ARN.")
        return parts[5]

    def name_of_url(self, url: object) -> str:
        """The queue a QueueUrl names (``http://HOST/ACCOUNT/NAME``, or the bare NAME, which SQS
        takes too: ``sqs.Queue("emails")``). One that names none, a wrong path included, is
        QueueDoesNotExist (400), as SQS answers and clients catch."""
        if url is None:
            raise missing("QueueUrl")
        if isinstance(url, str) and QUEUE_NAME.fullmatch(url):
            return url
        try:
            path = urlsplit(url).path if isinstance(url, str) else ""
        except ValueError:  # e.g. an unclosed '[' in the host
            path = ""
        parts = path.strip("/").split("/")
        if len(parts) != 2 or parts[0] != ACCOUNT or not QUEUE_NAME.fullmatch(parts[1]):
            raise no_queue()
        return parts[1]

    def queue(self, name: str, **settings: Any) -> Queue:
        return Queue(name, client=self.client, prefix=self.prefix, **settings)

    async def get(self, name: str) -> Known:
        """The queue, read again when the last read is FRESH_SECONDS old; QueueDoesNotExist
        when it is not registered (never made, or deleted, here or elsewhere)."""
        known = self.known.get(name)
        now = time.monotonic()
        if known is not None and now - known.checked < FRESH_SECONDS:
            return known
        q = known.queue if known is not None else self.queue(name)
        began = self.forgotten
        if not await q.exists():
            self.forget(name)
            raise no_queue()
        meta = await q.metadata()
        await q.refresh_settings()
        known = Known(name, q, meta, now)
        if began == self.forgotten:
            self.known[name] = known
        return known

    async def by_url(self, params: Mapping[str, Any]) -> Known:
        return await self.get(self.name_of_url(params.get("QueueUrl")))

    async def names(self) -> list[str]:
        """Every queue under the prefix that SQS can name (a name with '.' cannot be)."""
        return [n for n in await list_queues(self.client, self.prefix) if QUEUE_NAME.fullmatch(n)]

    async def create(self, name: str, attributes: dict[str, str], tags: dict[str, str]) -> Known:
        """CreateQueue: a new queue with these attributes, or the existing one when they match
        its own (QueueAlreadyExists when one differs)."""
        queue_name(name)
        existing = self.queue(name)
        if await existing.exists():
            known = await self.get(name)
            current = await self.attributes(known, list(attributes))
            for k, v in attributes.items():
                if k == "RedrivePolicy" and v:
                    same = json.loads(v) == json.loads(current.get(k) or "{}")
                else:
                    same = current.get(k, STORED.get(k) or "") == v
                if not same:
                    raise SqsError(
                        "QueueNameExists",
                        f"A queue already exists with the same name and a different value for attribute {k}",
                    )
            return known
        settings = {
            **({"group_concurrency": 1, "dedup_window": DEDUPLICATION_SECONDS} if is_fifo(name) else {}),
            "visibility_timeout": 30.0,
            "max_body_bytes": MAX_MESSAGE_BYTES,
            "retention": DEFAULT_RETENTION,
            **settings_for(attributes),
        }
        spread = not is_fifo(name) or attributes.get("DeduplicationScope") == "messageGroup"
        q = self.queue(name, **settings, shards=self.shards if spread and self.shards > 1 else None)
        await q.load()  # writes the settings and registers the name, as SQS's CreateQueue makes it
        now = str(int(time.time()))
        values, _ = meta_for(attributes)
        await q.set_metadata({"created": now, "modified": now, **values, **{f"tag:{k}": v for k, v in tags.items()}})
        self.forget(name)
        return await self.get(name)

    async def set_attributes(self, known: Known, attributes: dict[str, str]) -> None:
        settings = settings_for(attributes)
        if settings:
            await self.queue(known.name, **settings).load()  # last writer wins, as SQS
        values, gone = meta_for(attributes)
        await known.queue.set_metadata({**values, "modified": str(int(time.time()))}, remove=gone)
        self.forget(known.name)

    async def attributes(self, known: Known, names: list[str]) -> dict[str, str]:
        """GetQueueAttributes: the named attributes ("All": every one it has)."""
        every = "All" in names
        wanted = set(names)
        out: dict[str, str] = {}
        if every or wanted & {
            "ApproximateNumberOfMessages",
            "ApproximateNumberOfMessagesNotVisible",
            "ApproximateNumberOfMessagesDelayed",
        }:
            await known.queue.reap_if_due()  # expired deliveries count as visible, as in SQS, without a Reaper
            stats = await known.queue.stats()
            out.update(
                ApproximateNumberOfMessages=str(stats.waiting),
                ApproximateNumberOfMessagesNotVisible=str(stats.processing),
                ApproximateNumberOfMessagesDelayed=str(stats.delayed),
            )
        s = known.queue.settings
        out.update(
            VisibilityTimeout=str(int(s.visibility_timeout)),
            MaximumMessageSize=str(s.max_body_bytes),
            QueueArn=self.arn(known.name),
            CreatedTimestamp=known.meta.get("created", "0"),
            LastModifiedTimestamp=known.meta.get("modified", known.meta.get("created", "0")),
        )
        if s.retention is not None:  # (a queue the library made without one keeps messages for ever)
            out["MessageRetentionPeriod"] = seconds_text(s.retention)
        for name in (*STORED, *FIFO_STORED) if known.fifo else STORED:
            value = known.attribute(name)
            if value is not None:
                out[name] = value
        if known.fifo:
            out["FifoQueue"] = "true"
        policy = known.redrive
        if policy is not None:
            if s.max_receives is not None:  # the setting in force, should a library user change it
                policy["maxReceiveCount"] = s.max_receives
            out["RedrivePolicy"] = json.dumps(policy, separators=(",", ":"))
        return out if every else {k: v for k, v in out.items() if k in wanted}

    def forget(self, name: str) -> None:
        """What was read of ``name`` is stale (this server changed or deleted it)."""
        self.known.pop(name, None)
        self.forgotten += 1
