"""Pure decisions of the vistack pipeline: no I/O, table-tested.

The seed's retry delay (``scheduleDelay``): one minute doubling per attempt, capped at
eight hours, plus a random jitter of up to a fifth of the delay either way (±20 %) so many
failures at once do not retry at once.
"""

from __future__ import annotations

import random
from collections.abc import Callable


def retry_delay_s(
    attempt: int,
    *,
    base_s: float = 60.0,
    cap_s: float = 8 * 3600.0,
    jitter: float = 0.2,
    uniform: Callable[[float, float], float] = random.uniform,
) -> float:
    """Seconds to wait after failed attempt ``attempt`` (1-based) before the next one.

    ``base_s * 2 ** (attempt - 1)``, at most ``cap_s``, times ``1 + u`` with ``u`` drawn from
    ``uniform(-jitter, jitter)``.
    """
    if attempt < 1:
        raise ValueError(f"attempt counts from 1, got {attempt}")
    # 2 ** 40 minutes is far past any cap; bounding the exponent keeps the float finite.
    delay = min(base_s * 2.0 ** min(attempt - 1, 40), cap_s)
    return delay * (1.0 + uniform(-jitter, jitter))


def attempts_key(video_id: str, retry_epoch: int) -> str:
    """The seed's ``attempts:transcode:{id}`` counter (the cache adds ``attempts:``).

    A dead letter replayed starts a new epoch, counted afresh under ``…:r<epoch>``.
    """
    return f"transcode:{video_id}" if retry_epoch == 0 else f"transcode:{video_id}:r{retry_epoch}"


def lease_name(video_id: str) -> str:
    """The seed's ``lease:transcode:{id}`` (the cache adds ``lease:``)."""
    return f"transcode:{video_id}"


#: The seed's ZSET of transcodes waiting for their retry (the cache adds ``timers:``).
RETRY_QUEUE = "transcode:retry:zset"
