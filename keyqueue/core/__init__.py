"""The I/O-free core: every queue operation as a generator of round trips (sans-IO).

An operation yields a list of Redis commands (one round trip) and receives their replies,
errors in place; it returns its result. It never touches a socket, so the sync and the
async transports (``keyqueue.transport``) run the same code, and a test can run it on
anything that answers commands.
"""
