"""Checks of the Redis a queue runs on, made once when a worker or reaper starts."""

from __future__ import annotations

import logging
from typing import Any

import redis


def warn_unless_noeviction(client: redis.Redis, log: logging.Logger) -> str | None:
    """Warn loudly when Redis may evict keys: eviction silently drops messages.
    Returns the policy, or None when the server does not say (CONFIG disabled)."""
    try:
        reply: dict[Any, Any] | redis.ResponseError = client.config_get("maxmemory-policy")
    except redis.ResponseError as exc:
        reply = exc
    return judge_eviction(reply, log)


def judge_eviction(reply: dict[Any, Any] | redis.ResponseError, log: logging.Logger) -> str | None:
    """The warning for a CONFIG GET maxmemory-policy reply (or its error), read by a blocking
    or an asyncio caller alike. Returns the policy, or None when the server does not say."""
    if isinstance(reply, redis.ResponseError):
        log.info("cannot read maxmemory-policy (CONFIG is disabled); make sure it is noeviction")
        return None
    policy = reply.get("maxmemory-policy")
    if isinstance(policy, bytes):
        policy = policy.decode()
    if policy != "noeviction":
        log.warning(
            "Redis maxmemory-policy is %r: under memory pressure Redis will silently DELETE "
            "queued messages. Set maxmemory-policy noeviction on queue servers.",
            policy,
        )
    return policy
