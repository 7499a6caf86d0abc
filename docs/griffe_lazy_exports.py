"""A griffe extension for the API reference: a name a module exports in ``__all__`` but
binds only through its ``__getattr__`` (``keyqueue.aio.Worker``, imported on first use)
becomes an alias of the object Python returns for it, so the reference can name it as
users import it."""

from __future__ import annotations

import importlib
from typing import Any

import griffe


class LazyExports(griffe.Extension):
    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        todo = [pkg]
        while todo:
            module = todo.pop()
            todo.extend(module.modules.values())
            missing = [n for n in module.exports or () if isinstance(n, str) and n not in module.members]
            if missing and "__getattr__" in module.members:
                live = importlib.import_module(module.path)
                for name in missing:
                    obj = getattr(live, name)
                    module.set_member(name, griffe.Alias(name, f"{obj.__module__}.{obj.__qualname__}", parent=module))
