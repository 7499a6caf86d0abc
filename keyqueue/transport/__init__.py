"""Transports: run the core's operations on a redis-py client, blocking (``sync``) or on
asyncio (``aio``). They only send round trips and hand back replies; no queue logic here."""
