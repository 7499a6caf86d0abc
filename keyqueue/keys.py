"""Every Redis key name of a queue, built in one place.

All keys of queue NAME share the hash tag ``{NAME}``, so a queue lives in one
Redis Cluster slot and every script may touch all of them. Lua only appends
the two dynamic suffixes ``item:<id>`` and ``timer:<bucket>`` to ``base``.
"""

from __future__ import annotations

import difflib
import functools
import re
from dataclasses import dataclass

from .errors import InvalidQueueName

NAME_RE = re.compile(r"[A-Za-z0-9._-]{1,200}")
PREFIX_RE = re.compile(r"[A-Za-z0-9._:-]{1,100}")


def validate_name(name: object) -> str:
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise InvalidQueueName(f"invalid queue name {name!r}: use 1 to 200 characters from A-Z a-z 0-9 . _ -")
    return name


def validate_prefix(prefix: object) -> str:
    if not isinstance(prefix, str) or not PREFIX_RE.fullmatch(prefix):
        raise InvalidQueueName(f"invalid key prefix {prefix!r}: use 1 to 100 characters from A-Z a-z 0-9 . _ - :")
    return prefix


def unknown_queue(name: str, prefix: str, url: str, names: list[str]) -> str:
    """Why ``name`` is refused when it is not among the registered ``names`` (a typo must not
    read as an empty queue)."""
    return f"no queue {name!r} under prefix {prefix!r} at {url}{closest(name, names)}"


def closest(name: str, names: list[str]) -> str:
    """What to say about the registered names closest to a name that is not among them."""
    if not names:
        return " (no queue is registered under that prefix)"
    close = difflib.get_close_matches(name, names, n=3, cutoff=0.6)
    if close:
        return f"; did you mean {', '.join(repr(c) for c in close)}?"
    return f"; no registered name is close ('keyqueue ls' lists all {len(names)})"


#: The Redis type of each fixed key of a queue, by its name after the key base, and of each
#: family of keys (the fixed layout and its helper keys). The fsck and the script-free
#: mode's type checks read this one table.
FIXED_TYPES = {
    "seq": "string",
    "queue": "list",
    "items": "set",
    "processing": "set",
    "timers": "zset",
    "dead": "list",
    "signal": "list",
    "config": "hash",
    "counters": "hash",
    "meta": "hash",
    "schedules": "zset",
    "schedule_state": "hash",
    "schedule_defs": "hash",
    "schedule_bodies": "hash",
    "throttle": "string",
    "shards": "string",
    "groups": "hash",
    "held": "string",
}
FAMILY_TYPES = {
    "item:": "hash",
    "timer:": "set",
    "dedup:": "string",
    "routed:": "string",
    "stream:": "hash",
    "rate:": "string",
    "group:": "list",
}


def registry_key(prefix: str) -> str:
    """The set of queue names under a prefix (``keyqueue ls``, ``Reaper(queues=None)``)."""
    return f"{prefix}:queues"


@dataclass(frozen=True)
class QueueKeys:
    prefix: str
    name: str

    @classmethod
    def checked(cls, prefix: object, name: object) -> QueueKeys:
        """The keys of a queue, once its name and prefix are known to be valid."""
        return cls(validate_prefix(prefix), validate_name(name))

    @functools.cached_property
    def base(self) -> str:
        """Every key's start (made once: item keys are built per message)."""
        return f"{self.prefix}:{{{self.name}}}:"

    @property
    def seq(self) -> str:
        return self.base + "seq"

    @property
    def queue(self) -> str:
        return self.base + "queue"

    @property
    def items(self) -> str:
        return self.base + "items"

    @property
    def processing(self) -> str:
        return self.base + "processing"

    @property
    def dead(self) -> str:
        return self.base + "dead"

    @property
    def config(self) -> str:
        return self.base + "config"

    @property
    def timers(self) -> str:
        """Index of live timer buckets: a sorted set scored by the earliest timer a bucket may hold."""
        return self.base + "timers"

    @property
    def signal(self) -> str:
        """Wake-up list for long-poll claims: holds at most one token."""
        return self.base + "signal"

    @property
    def counters(self) -> str:
        """Exact totals kept by the operations themselves (enqueued, acked, redelivered,
        dead_lettered), for /metrics and rates across every producer and worker."""
        return self.base + "counters"

    @property
    def meta(self) -> str:
        """A surface's own data about the queue (the SQS API's attributes and tags)."""
        return self.base + "meta"

    @property
    def schedules(self) -> str:
        """Index of the queue's schedules: each id scored by its next fire (ms; inf when
        paused or ended), so a firer reads the due ones from its head."""
        return self.base + "schedules"

    @property
    def schedule_state(self) -> str:
        """Each schedule's state, a field per id packed as ``v:f:l:m:a:p:n`` (version, fired,
        last fire, missed, anchor, paused, next fire) as of its last write: a schedule exists
        while it has one. The scripted look's fires of an ``every`` schedule move only its
        index score, and readers count them in (schedules.fired_since)."""
        return self.base + "schedule_state"

    @property
    def schedule_defs(self) -> str:
        """Each schedule's definition (JSON), a field per id."""
        return self.base + "schedule_defs"

    @property
    def schedule_bodies(self) -> str:
        """Each schedule's message body, a field per id."""
        return self.base + "schedule_bodies"

    @property
    def throttle(self) -> str:
        """Until when (epoch ms) no claim succeeds, set by ``throttle``; expires then."""
        return self.base + "throttle"

    def rate(self, window: int) -> str:
        """Claims made in one rate-limit window (``floor(now_ms / window_ms)``); expires at its end."""
        return f"{self.base}rate:{window}"

    @property
    def groups(self) -> str:
        """Each message group with released messages (waiting or in flight): their count."""
        return self.base + "groups"

    def group(self, group_id: str) -> str:
        """A message group's held messages, in order, waiting for the group to have room."""
        return f"{self.base}group:{group_id}"

    @property
    def held(self) -> str:
        """How many messages every ``group:`` list holds together (absent: none)."""
        return self.base + "held"

    @property
    def shards(self) -> str:
        """A sharded queue's shard count, fixed when it is first made (absent: unsharded)."""
        return self.base + "shards"

    def shard(self, index: int) -> QueueKeys:
        """The keys of one shard of a sharded queue: its hash tag is ``{NAME#index}``."""
        return QueueKeys(self.prefix, f"{self.name}#{index}")

    @property
    def registry(self) -> str:
        return registry_key(self.prefix)

    def item(self, msg_id: str | int) -> str:
        return f"{self.base}item:{msg_id}"

    def timer(self, bucket: int | str) -> str:
        return f"{self.base}timer:{bucket}"

    def dedup(self, dedup_key: str) -> str:
        return f"{self.base}dedup:{dedup_key}"

    def routed(self, dedup_key: str) -> str:
        """A sharded queue's record, on the shard a dedup key hashes to, of the shard the first
        message with that key went to (for the dedup window)."""
        return f"{self.base}routed:{dedup_key}"

    def stream(self, source: str) -> str:
        """A Spark stream source's manifest of claimed, uncommitted batches."""
        return f"{self.base}stream:{source}"

    def kind(self, key: str) -> str:
        """The Redis type ``key`` (one of this queue's, or of the sharded queue it is a shard
        of: their shared rate-limit counters) must have ('' for a name keyqueue does not use)."""
        name = key[len(self.base) :] if key.startswith(self.base) else key.partition("}:")[2]
        for prefix, kind in FAMILY_TYPES.items():
            if name.startswith(prefix):
                return kind
        return FIXED_TYPES.get(name, "")

    @property
    def pattern(self) -> str:
        """SCAN pattern matching every key of this queue (names cannot hold glob characters)."""
        return self.base + "*"


def bucket_of(t_ms: int, bucket_ms: int) -> int:
    return t_ms // bucket_ms
