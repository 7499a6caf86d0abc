"""``keyqueue serve``: the web dashboard, the JSON API and Prometheus metrics, on
``keyqueue.aio``. Needs the ``web`` extra (``pip install 'keyqueue[web]'``)."""

from __future__ import annotations

from .app import create_app

__all__ = ["create_app"]
