"""The asyncio Queue behind the sync test suite: ``SyncFace`` runs every coroutine of a
``keyqueue.aio.Queue`` (and of its messages) on one event loop in a thread, so the
contract tests written for ``keyqueue.Queue`` check ``keyqueue.aio.Queue`` too, unchanged."""

from __future__ import annotations

import asyncio
import inspect
import threading
from typing import Any

from keyqueue import Message
from keyqueue.aio import Message as AioMessage
from keyqueue.aio import Queue as AioQueue


class LoopThread:
    """One event loop running in a daemon thread for the whole session."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True, name="aio-face")
        self.thread.start()

    def run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


def _unwrap(v: Any) -> Any:
    if isinstance(v, SyncMessage):
        return v._m
    if isinstance(v, (list, tuple)):
        return type(v)(_unwrap(x) for x in v)
    return v


class _Proxy:
    """Calls coroutine methods of the wrapped object on the loop; the rest passes through."""

    def __init__(self, target: Any, loop: LoopThread) -> None:
        object.__setattr__(self, "_t", target)
        object.__setattr__(self, "_loop", loop)

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._t, name)
        if not inspect.iscoroutinefunction(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            args = tuple(_unwrap(a) for a in args)
            kwargs = {k: _unwrap(v) for k, v in kwargs.items()}
            return self._wrap(self._loop.run(attr(*args, **kwargs)))

        return call

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._t, name, value)

    def _wrap(self, v: Any) -> Any:
        if isinstance(v, AioMessage):
            m = SyncMessage(v, self._loop)
            object.__setattr__(m, "_face", self)  # m.queue is the face the test holds
            return m
        if isinstance(v, list):
            return [self._wrap(x) for x in v]
        return v


class SyncMessage(_Proxy):
    @property
    def _m(self) -> AioMessage:
        return self._t  # type: ignore[no-any-return]

    @property
    def queue(self) -> Any:
        return self._face  # type: ignore[attr-defined]

    @property  # type: ignore[misc]
    def __class__(self) -> type:  # it settles as a keyqueue.Message does: isinstance holds
        return Message

    def __repr__(self) -> str:
        return repr(self._t)


class SyncFace(_Proxy):
    """A keyqueue.aio.Queue used like a keyqueue.Queue."""

    @property
    def settings(self) -> Any:
        if self._t._core.settings is None:
            self._loop.run(self._t.load())
        return self._t.settings

    def __len__(self) -> int:
        return int(self._loop.run(self._t.length()))

    def __repr__(self) -> str:
        return repr(self._t)

    @property
    def aio(self) -> AioQueue:
        return self._t  # type: ignore[no-any-return]
