"""keyqueue: a reliable, SQS-like work queue on plain Redis."""

from __future__ import annotations

from .core.results import GroupInfo, QueueStats, RateState, ReapResult
from .core.schedules import Schedule, next_fires
from .errors import (
    ConfigurationError,
    CorruptQueue,
    HandlerTimeout,
    InvalidArgument,
    InvalidQueueName,
    InvalidSchedule,
    KeyQueueError,
    MessageNotJSON,
    MessageTooLarge,
    MissingDependency,
    NotReplicated,
    PoolExhausted,
    Throttle,
    UnknownSchedule,
)
from .message import Message
from .queue import Queue
from .reaper import Reaper
from .worker.threads import Worker

__version__ = "0.1.0"

__all__ = [
    # the queue
    "Queue",
    "Message",
    "GroupInfo",
    "QueueStats",
    "ReapResult",
    "RateState",
    "Schedule",
    "next_fires",
    # running it
    "Worker",
    "Reaper",
    # errors
    "KeyQueueError",
    "InvalidQueueName",
    "MessageTooLarge",
    "MessageNotJSON",
    "InvalidArgument",
    "InvalidSchedule",
    "ConfigurationError",
    "CorruptQueue",
    "HandlerTimeout",
    "Throttle",
    "MissingDependency",
    "NotReplicated",
    "PoolExhausted",
    "UnknownSchedule",
    "__version__",
]
