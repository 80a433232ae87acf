"""The cache seam: leases with fencing tokens, timers for delayed redelivery, rate limits.

Engines: :class:`MemoryCache` (here) and ``aigc_hub.cache.redis.RedisCache`` (the ``redis``
extra; import it from its module so this package never needs redis-py).
"""

from __future__ import annotations

from aigc_hub.cache.base import (
    Cache,
    CacheFeatures,
    DueTimer,
    Lease,
    Leases,
    RateDecision,
    RateLimiter,
    Timers,
)
from aigc_hub.cache.keeper import LeaseKeeper
from aigc_hub.cache.memory import MemoryCache

__all__ = [
    "Cache",
    "CacheFeatures",
    "DueTimer",
    "Lease",
    "LeaseKeeper",
    "Leases",
    "MemoryCache",
    "RateDecision",
    "RateLimiter",
    "Timers",
]
