"""The two faces mirror each other: every public method of ``keyqueue.Queue`` (and of its
Message, and each module-level function) exists on the asyncio face with the same
parameters, as a coroutine. The logic is the core's, written once; this holds the surface."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

import keyqueue
import keyqueue.aio
import keyqueue.aio.queue
import keyqueue.queue
from keyqueue.message import BaseMessage

#: Plain (not awaited) on both faces: a decorator, and what reads no Redis.
NOT_AWAITED = {"worker", "name", "prefix", "keys", "min_replicas", "replica_timeout", "settings"}
#: What only the asyncio face has: closing the client it made, and loading settings on demand
#: (the blocking Queue loads them when made).
ASYNC_ONLY = {"aclose", "load"}


def public(cls: type) -> dict[str, Any]:
    return {name: inspect.getattr_static(cls, name) for name in dir(cls) if not name.startswith("_")}


def parameters(fn: Any) -> list[tuple[str, Any, Any]]:
    return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]


@pytest.mark.parametrize(
    "sync_cls, async_cls",
    [(keyqueue.Queue, keyqueue.aio.Queue), (keyqueue.Message, keyqueue.aio.Message)],
    ids=["Queue", "Message"],
)
def test_every_method_has_an_awaited_twin(sync_cls: type, async_cls: type) -> None:
    sync, aio = public(sync_cls), public(async_cls)
    assert set(aio) - set(sync) <= ASYNC_ONLY
    assert set(sync) <= set(aio), f"missing on the asyncio face: {sorted(set(sync) - set(aio))}"
    for name, attr in sync.items():
        twin = aio[name]
        if twin is attr or isinstance(attr, type):  # shared (the base's), or the face's own classes
            continue
        assert type(attr) is type(twin), name  # property for property, method for method
        if not callable(attr):
            continue
        assert parameters(attr) == parameters(twin), name
        assert inspect.iscoroutinefunction(twin) == (name not in NOT_AWAITED), name
        assert not inspect.iscoroutinefunction(attr), name


@pytest.mark.parametrize("name", ["list_queues", "claim_any"])
def test_module_functions_have_an_awaited_twin(name: str) -> None:
    sync, aio = getattr(keyqueue.queue, name), getattr(keyqueue.aio.queue, name)
    assert parameters(sync) == parameters(aio)
    assert inspect.iscoroutinefunction(aio) and not inspect.iscoroutinefunction(sync)


def test_messages_are_siblings() -> None:
    """Neither face's message is the other's subclass: an awaited ack cannot pass for a
    blocking one (nor the reverse); both are BaseMessages, with the same fields."""
    assert not issubclass(keyqueue.aio.Message, keyqueue.Message)
    assert not issubclass(keyqueue.Message, keyqueue.aio.Message)
    assert issubclass(keyqueue.Message, BaseMessage) and issubclass(keyqueue.aio.Message, BaseMessage)
