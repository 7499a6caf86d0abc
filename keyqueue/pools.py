"""Connection pools for the clients keyqueue makes from a URL: an operation that finds every
connection busy waits its turn for one, up to ``pool_timeout``, and then fails with
``PoolExhausted`` naming the settings, never with "Too many connections".

Turns are first come, first served. redis-py's blocking pools wake a waiter when a
connection comes back, but the thread or task that gave it back runs on and takes it again
first, so a caller that operates in a loop starves the others until their timeout. A
long-poll also hands its connection back between its waits (see the transports), so
hundreds of tasks or threads share ``max_connections`` connections fairly.
"""

from __future__ import annotations

import asyncio
import collections
import os
import threading
from typing import Any

import redis
import redis.asyncio
from redis.asyncio.sentinel import SentinelConnectionPool as AsyncSentinelConnectionPool
from redis.sentinel import SentinelConnectionPool

from .errors import PoolExhausted

#: Connections per client, as redis-py's own default pool has (``?max_connections=`` in the URL).
MAX_CONNECTIONS = 100
#: Seconds an operation waits for a free connection (``?pool_timeout=`` in the URL).
POOL_TIMEOUT = 20.0


class Turns:
    """A semaphore for threads that serves its waiters in order: a returned turn goes
    straight to the longest waiter (threading.Semaphore lets any thread take it)."""

    def __init__(self, size: int) -> None:
        self._free = size
        self._lock = threading.Lock()
        self._waiters: collections.deque[threading.Lock] = collections.deque()

    def acquire(self, timeout: float) -> bool:
        with self._lock:
            if self._free and not self._waiters:
                self._free -= 1
                return True
            waiter = threading.Lock()
            waiter.acquire()
            self._waiters.append(waiter)
        if waiter.acquire(timeout=timeout):
            return True
        with self._lock:
            try:
                self._waiters.remove(waiter)
            except ValueError:  # handed a turn just as the wait ran out: it is ours
                return True
            return False

    def release(self) -> None:
        with self._lock:
            if self._waiters:
                self._waiters.popleft().release()
            else:
                self._free += 1

    def idle(self) -> bool:
        """Whether a turn is free with nobody waiting."""
        return bool(self._free) and not self._waiters


class BlockingPool(redis.ConnectionPool):
    """redis-py's pool with turns: at most ``max_connections`` in use, the rest wait."""

    def __init__(self, *args: Any, timeout: float = POOL_TIMEOUT, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.timeout = timeout
        self._turns = (os.getpid(), Turns(self.max_connections))

    def turns(self) -> Turns:
        pid, turns = self._turns
        if pid != os.getpid():  # a forked child: the parent's connections are not its own
            self._turns = pid, turns = os.getpid(), Turns(self.max_connections)
        return turns

    def get_connection(self, *args: Any, **kwargs: Any) -> Any:
        if not self.turns().acquire(self.timeout):
            raise PoolExhausted(self.max_connections, self.timeout)
        return super().get_connection(*args, **kwargs)  # a failure gives the turn back (below)

    def make_connection(self) -> Any:
        try:
            return super().make_connection()
        except BaseException:
            self.turns().release()
            raise

    def release(self, connection: Any) -> None:
        owned = connection in self._in_use_connections
        super().release(connection)
        if owned:
            self.turns().release()

    def has_idle(self) -> bool:
        """Whether a connection is free with nobody waiting (a spare is kept only then)."""
        return self.turns().idle()


class AsyncBlockingPool(redis.asyncio.ConnectionPool):
    """The same on asyncio: asyncio.Semaphore queues a new caller behind the waiters."""

    def __init__(self, *args: Any, timeout: float = POOL_TIMEOUT, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.timeout = timeout
        self._turns = asyncio.Semaphore(self.max_connections)

    async def get_connection(self, *args: Any, **kwargs: Any) -> Any:
        try:
            await asyncio.wait_for(self._turns.acquire(), self.timeout)
        except asyncio.TimeoutError:
            raise PoolExhausted(self.max_connections, self.timeout) from None
        return await super().get_connection(*args, **kwargs)  # a failure gives the turn back (below)

    def make_connection(self) -> Any:
        try:
            return super().make_connection()
        except BaseException:
            self._turns.release()
            raise

    async def release(self, connection: Any) -> None:
        owned = connection in self._in_use_connections
        await super().release(connection)
        if owned:
            self._turns.release()


class BlockingSentinelPool(SentinelConnectionPool, BlockingPool):
    """The master's connections by Sentinel, in turns as in ``BlockingPool``."""


class AsyncBlockingSentinelPool(AsyncSentinelConnectionPool, AsyncBlockingPool):
    """The master's connections by Sentinel on asyncio, in turns as in ``AsyncBlockingPool``."""


def pool_class(cls: Any, sentinel: bool) -> Any:
    """The pool for a client class (redis.Redis or redis.asyncio.Redis)."""
    on_asyncio = cls.__module__.startswith("redis.asyncio")
    if sentinel:
        return AsyncBlockingSentinelPool if on_asyncio else BlockingSentinelPool
    return AsyncBlockingPool if on_asyncio else BlockingPool
