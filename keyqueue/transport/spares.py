"""A few connections kept between operations, beside the client's pool.

redis-py's ``get_connection``/``release`` take a lock, poll the socket for stray data and
update its metrics: about 5 us per operation, as much as two commands inside a script, on
every single enqueue. An operation that ended cleanly (every reply read, no WATCH pending)
leaves its connection ready, so the next operation of this process may take it, after the
one check of the pool's that matters: a socket with something to read (the server closed it,
restarted) is reconnected first. That check is a poll(2) on a poller kept with the spare.

Only for a plain pool of the default size or larger: a smaller pool, sized on purpose, keeps all its connections for its
other users, and Sentinel or cluster pools choose their servers per connection. A blocking
pool (what keyqueue makes from a URL) keeps a spare only while it has a connection left to
give, so no thread waits on the pool while a spare sits idle. The spares
stay counted as in use by the pool, so ``client.close()`` still disconnects them (they
reconnect on their next command, as pooled ones do), and a forked child never uses its
parent's (they are kept per process id).
"""

from __future__ import annotations

import os
import select
from typing import Any

#: At most this many spare connections per pool (one per concurrently running operation).
SPARES = 4
#: Pools with fewer allowed connections are left to manage every connection themselves.
MIN_POOL_SIZE = 100  # redis-py's default
_ATTR = "_keyqueue_spares"


def _kept(pool: Any) -> bool:
    if pool.max_connections < MIN_POOL_SIZE:
        return False
    if type(pool).__name__ == "ConnectionPool":
        return True
    return type(pool).__name__ == "BlockingPool" and bool(pool.has_idle())


def take(pool: Any) -> Any | None:
    """A spare connection of ``pool`` for this process, ready to send, or None."""
    spares = pool.__dict__.get(_ATTR)
    if spares is None or spares[0] != os.getpid():
        return None
    try:
        conn, sock, poller = spares[1].pop()
    except IndexError:
        return None
    if conn._sock is not sock or poller.poll(0):
        conn.disconnect()  # closed by the server, or by client.close(): the next send reconnects
    return conn


def keep(pool: Any, conn: Any) -> bool:
    """Keep a cleanly used connection for the next operation; False: give it back."""
    if not _kept(pool):
        return False
    pid = os.getpid()
    spares = pool.__dict__.get(_ATTR)
    if spares is None or spares[0] != pid:
        spares = (pid, [])
        setattr(pool, _ATTR, spares)
    sock = getattr(conn, "_sock", None)
    if len(spares[1]) >= SPARES or sock is None:
        return False
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    spares[1].append((conn, sock, poller))
    return True
