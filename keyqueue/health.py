"""Checks of the Redis a queue runs on, made once when a worker or reaper starts."""

from __future__ import annotations

import logging

import redis


def warn_unless_noeviction(client: redis.Redis, log: logging.Logger) -> str | None:
    """Warn loudly when Redis may evict keys: eviction silently drops messages.
    Returns the policy, or None when the server does not say (CONFIG disabled)."""
    try:
        policy = client.config_get("maxmemory-policy").get("maxmemory-policy")
    except redis.ResponseError:
        log.info("cannot read maxmemory-policy (CONFIG is disabled); make sure it is noeviction")
        return None
    if isinstance(policy, bytes):
        policy = policy.decode()
    if policy != "noeviction":
        log.warning(
            "Redis maxmemory-policy is %r: under memory pressure Redis will silently DELETE "
            "queued messages. Set maxmemory-policy noeviction on queue servers.", policy)
    return policy
