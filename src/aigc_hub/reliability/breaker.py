"""A circuit breaker: stop routing new calls to a dependency whose recent calls mostly failed.

Generic over what a "call" is: callers name each call with a key (generation uses its attempt
ids) and report outcomes under it. Closed → open → half-open → closed (or open again).
"""

from __future__ import annotations

import collections
import enum
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from aigc_hub.core.errors import ConfigurationError


class BreakerState(enum.StrEnum):
    """Where a :class:`CircuitBreaker` is: routing to it, not routing to it, or trying it."""

    CLOSED = "closed"  # calls flow; outcomes fill the window
    OPEN = "open"  # calls go elsewhere until the cool-down passes
    HALF_OPEN = "half_open"  # one trial call is out; everyone else still sees it open


@dataclass
class CircuitBreaker:
    """Closed → open → half-open → closed (or open again): the routing gate of one dependency.

    Closed: every recorded outcome fills a sliding window of ``window`` calls; past
    ``min_calls`` and an error rate above ``max_error_rate`` it opens. Open: :meth:`admit`
    refuses until ``cool_down_s`` has passed; then the first caller becomes the one trial
    (half-open) and every other caller is refused until that trial's outcome: success closes
    (with an empty window), failure re-opens for a fresh cool-down. A trial that never reports
    (its work canceled, a crash) is given up after another ``cool_down_s`` and the next caller
    becomes the trial.

    The caller decides which calls count (generation records submits only, under the
    attempt id: a provider failing its submits is not healthy because it still answers polls
    for old jobs). While open or half-open, outcomes of any call but the trial (calls that
    were already in flight) change nothing. Per process: a fast local reaction, and every
    process sees its own calls. Not thread-safe; one event loop calls it. Bad parameters
    raise :class:`~aigc_hub.core.errors.ConfigurationError` at construction.
    """

    window: int = 20
    min_calls: int = 5
    max_error_rate: float = 0.5
    cool_down_s: float = 30.0
    clock: Callable[[], float] = time.monotonic
    _outcomes: collections.deque[bool] = field(default_factory=collections.deque)
    _state: BreakerState = BreakerState.CLOSED
    _since: float = 0.0  # when the current OPEN or HALF_OPEN began
    _trial: str | None = None

    def __post_init__(self) -> None:
        if self.window < 1 or not 1 <= self.min_calls <= self.window:
            raise ConfigurationError(
                f"circuit breaker: need 1 <= min_calls <= window, got {self.min_calls}, "
                f"{self.window}"
            )
        if not 0.0 <= self.max_error_rate < 1.0:
            raise ConfigurationError(
                f"circuit breaker: max_error_rate must be in [0, 1), got {self.max_error_rate}"
            )
        if self.cool_down_s <= 0:
            raise ConfigurationError(
                f"circuit breaker: cool_down_s must be positive, got {self.cool_down_s}"
            )

    @property
    def state(self) -> BreakerState:
        """The state now (an open breaker past its cool-down still reads OPEN until admitted)."""
        return self._state

    @property
    def open(self) -> bool:
        """True while a new call would be refused by :meth:`admit` (nothing is changed)."""
        if self._state is BreakerState.CLOSED:
            return False
        return self.clock() - self._since < self.cool_down_s

    def admit(self, key: str) -> bool:
        """May the call ``key`` go to this provider? After the cool-down, the first caller is
        the one trial and is admitted; everyone else is refused until its outcome."""
        if self._state is BreakerState.CLOSED:
            return True
        if self.open:
            return False
        self._state, self._since, self._trial = BreakerState.HALF_OPEN, self.clock(), key
        return True

    def record(self, key: str, ok: bool) -> None:
        """The outcome of the submit ``key``: counted when closed, decisive when it is the trial."""
        if self._state is BreakerState.CLOSED:
            self._outcomes.append(ok)
            while len(self._outcomes) > self.window:
                self._outcomes.popleft()
            if not ok and self._too_many_errors():
                self._open()
        elif self._state is BreakerState.HALF_OPEN and key == self._trial:
            if ok:
                self._state, self._trial = BreakerState.CLOSED, None
                self._outcomes.clear()
            else:
                self._open()

    def forfeit(self, key: str) -> None:
        """The admitted call ``key`` will not be made: if it was the trial, let the next one in."""
        if self._state is BreakerState.HALF_OPEN and key == self._trial:
            self._state, self._trial = BreakerState.OPEN, None
            self._since = self.clock() - self.cool_down_s  # cool-down already served

    def _too_many_errors(self) -> bool:
        calls = len(self._outcomes)
        return calls >= self.min_calls and self._outcomes.count(False) / calls > self.max_error_rate

    def _open(self) -> None:
        self._state, self._since, self._trial = BreakerState.OPEN, self.clock(), None
