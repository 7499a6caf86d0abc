"""redis-py's blocking Redis Cluster client, made without I/O.

redis-py's blocking cluster client asks a seed for the slot map (and the command table) as
it is made, so a cluster down when a worker, a reaper or a module-level Queue starts would
fail their construction. This one waits for its first use: an attribute it lacks until
then makes it learn the map, and a cluster none of whose seeds answers is redis'
ConnectionError at that first operation, which workers and reapers wait out.
"""

from __future__ import annotations

import threading
from typing import Any

import redis.cluster
from redis.exceptions import AuthenticationError, ConnectionError, NoPermissionError, RedisClusterException


def unreachable(exc: RedisClusterException) -> Exception:
    """What redis-py says when no seed gave the slot map, as a single server would: the
    seeds' refusal of the credentials or the ACL (configuration, which no wait fixes), else
    ConnectionError (an outage, waited out)."""
    cause = exc.__cause__
    if isinstance(cause, (AuthenticationError, NoPermissionError)):
        return cause
    return ConnectionError(str(exc))


class RedisCluster(redis.cluster.RedisCluster):
    """``redis.cluster.RedisCluster`` that connects at its first use (see the module)."""

    #: (no pool of its own: keeps ``getattr(client, "connection_pool", None)`` free of I/O)
    connection_pool = None

    def __init__(self, **kwargs: Any) -> None:  # no super().__init__ here: see started()
        self.__dict__.update(_kq_kwargs=kwargs, _kq_lock=threading.RLock(), _kq_ready=False, _kq_starting=False)

    def __getattr__(self, name: str) -> Any:
        # Called only for an attribute not found: one the real constructor has not set yet.
        if name.startswith("_kq_") or name.startswith("__") or self.__dict__.get("_kq_starting", True):
            raise AttributeError(name)
        self.started()
        return object.__getattribute__(self, name)

    @property
    def kwargs(self) -> dict[str, Any]:
        """The settings it was made with (its connections', before it connects)."""
        return dict(self.__dict__["_kq_kwargs"])

    def started(self) -> None:
        """Learn the slot map now, once (redis-py's constructor, which does the I/O)."""
        with self._kq_lock:
            if self._kq_ready:
                return
            self.__dict__["_kq_starting"] = True
            try:
                super().__init__(**self._kq_kwargs)
            except RedisClusterException as exc:
                raise unreachable(exc) from None
            finally:
                self.__dict__["_kq_starting"] = False
            self.__dict__["_kq_ready"] = True

    def close(self) -> None:
        if self.__dict__.get("_kq_ready"):
            super().close()

    def __del__(self) -> None:
        if self.__dict__.get("_kq_ready"):
            super().__del__()
