"""Retry policies as pure values: which failure is retried, after how long, how often."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from aigc_hub.core import errors


@dataclass(frozen=True)
class RetryDecision:
    """Try again after ``delay`` seconds; ``attempt`` is the number of the next try."""

    delay: float
    attempt: int


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential back-off with a cap and proportional jitter.

    ``attempt`` counts tries already made (1 after the first failure). A policy allows
    ``max_retries`` retries after the first try; the n-th retry waits
    ``min(cap, base * factor**(n-1))`` seconds, spread by ``±jitter`` of itself.
    ``PermanentError`` is never retried; other exceptions are retried unless
    ``retry_unknown`` is False.
    """

    base: float = 1.0
    factor: float = 2.0
    cap: float = 8.0
    max_retries: int = 3
    jitter: float = 0.0
    retry_unknown: bool = True
    rng: random.Random = field(default_factory=random.Random, compare=False, repr=False)

    def delay_for(self, retry_no: int) -> float:
        """Delay before retry number ``retry_no`` (1-based), jitter not applied."""
        try:
            return float(min(self.cap, self.base * self.factor ** (retry_no - 1)))
        except OverflowError:  # so many tries that the growth left float range: the cap
            return float(self.cap)

    def jittered(self, retry_no: int, *, spread: float | None = None) -> float:
        """``delay_for(retry_no)`` spread by ``±jitter`` of itself, for schedules that are not
        failures (polling, redelivery loops): no give-up, no error to classify. ``spread`` in
        [-1, 1] fixes where in the band the delay falls (tests); by default it is drawn."""
        delay = self.delay_for(retry_no)
        if self.jitter:
            drawn = self.rng.uniform(-1.0, 1.0) if spread is None else spread
            delay *= 1.0 + self.jitter * drawn
        return max(0.0, delay)

    def decide(self, error: BaseException, attempt: int) -> RetryDecision | None:
        """Return when to try again after ``attempt`` failed tries, or None to give up."""
        if isinstance(error, errors.PermanentError):
            return None
        if not isinstance(error, errors.RetryableError) and not self.retry_unknown:
            return None
        if attempt > self.max_retries:
            return None
        return RetryDecision(delay=self.jittered(attempt), attempt=attempt + 1)


#: Seed 000 §9.3.3: in-process retries 1 s, 2 s, 4 s (8 s cap), at most 3.
IN_PROCESS = RetryPolicy(base=1.0, factor=2.0, cap=8.0, max_retries=3, jitter=0.1)

#: Seed 002: delayed redelivery 1 min doubling, 8 h cap, ±20 % jitter, at most 7.
DELAYED = RetryPolicy(base=60.0, factor=2.0, cap=8 * 3600.0, max_retries=7, jitter=0.2)
