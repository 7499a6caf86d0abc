"""redis-py's Sentinel managers with a master discovery that many callers can run at once.

redis-py moves the sentinel that answered to the front of its list by index, across the
await (or the other threads) of the query: two discoveries at once, as after a failover when
every connection reconnects, can write one sentinel into two places and drop another, whose
client and connections are then lost (never closed, never asked again). Here each discovery
reads a snapshot of the list and moves the sentinel that answered by identity, in one step.
"""

from __future__ import annotations

import threading
from typing import Any

from redis.asyncio.sentinel import Sentinel as AsyncSentinel
from redis.exceptions import ConnectionError, TimeoutError
from redis.sentinel import MasterNotFoundError, Sentinel


def _to_front(sentinels: list[Any], answered: Any) -> None:
    """Move ``answered`` to the front of ``sentinels`` (no I/O, so no other task runs meanwhile)."""
    for i, s in enumerate(sentinels):
        if s is answered:
            sentinels.insert(0, sentinels.pop(i))
            return


def _address(manager: Any, state: dict[str, Any]) -> tuple[str, int]:
    forced: str | None = manager._force_master_ip
    return (forced if forced is not None else str(state["ip"])), state["port"]


def _failed(sentinel: Any, exc: Exception) -> str:
    """One sentinel's failure, short: its address and the error (not the client's repr, which
    spells out its whole connection pool)."""
    kw = sentinel.connection_pool.connection_kwargs
    return f"{kw.get('host', '?')}:{kw.get('port', '?')}: {exc}"


def _not_found(service_name: str, errors: list[str]) -> MasterNotFoundError:
    detail = f" : {', '.join(errors)}" if errors else ""
    return MasterNotFoundError(f"No master found for {service_name!r}{detail}")


class SafeSentinel(Sentinel):
    """redis.sentinel.Sentinel, its list changed under a lock."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._order_lock = threading.Lock()

    def discover_master(self, service_name: str) -> tuple[str, int]:
        errors: list[str] = []
        for sentinel in list(self.sentinels):
            try:
                masters: Any = sentinel.sentinel_masters()
            except (ConnectionError, TimeoutError) as exc:
                errors.append(_failed(sentinel, exc))
                continue
            state = masters.get(service_name)
            if state and self.check_master_state(state, service_name):
                with self._order_lock:
                    _to_front(self.sentinels, sentinel)
                return _address(self, state)
        raise _not_found(service_name, errors)


class SafeAsyncSentinel(AsyncSentinel):
    """redis.asyncio.sentinel.Sentinel, its list changed in one step of the event loop."""

    async def discover_master(self, service_name: str) -> tuple[str, int]:
        errors: list[str] = []
        for sentinel in list(self.sentinels):
            try:
                masters: Any = await sentinel.sentinel_masters()
            except (ConnectionError, TimeoutError) as exc:
                errors.append(_failed(sentinel, exc))
                continue
            state = masters.get(service_name)
            if state and self.check_master_state(state, service_name):
                _to_front(self.sentinels, sentinel)
                return _address(self, state)
        raise _not_found(service_name, errors)
