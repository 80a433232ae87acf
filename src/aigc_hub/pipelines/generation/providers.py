"""The providers a hub can route to, their health, and the routing decision (seed 004 §3.6.3).

Routing filters providers by capability, skips those whose circuit is open (recent error
rate too high), then prefers the cheapest estimate, ties broken by configured order.
"""

from __future__ import annotations

import collections
import enum
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from aigc_hub.pipelines.generation.adapters.base import (
    CapabilityError,
    GenerationRequest,
    ProviderAdapter,
)


class BreakerState(enum.StrEnum):
    """Where a :class:`CircuitBreaker` is: routing to it, not routing to it, or trying it."""

    CLOSED = "closed"  # calls flow; outcomes fill the window
    OPEN = "open"  # calls go elsewhere until the cool-down passes
    HALF_OPEN = "half_open"  # one trial call is out; everyone else still sees it open


@dataclass
class CircuitBreaker:
    """Closed → open → half-open → closed (or open again): the provider's routing gate.

    Closed: every submit outcome fills a sliding window; past ``min_calls`` and an error rate
    above ``max_error_rate`` it opens. Open: :meth:`admit` refuses until ``cool_down_s`` has
    passed; then the first caller becomes the one trial (half-open) and every other caller is
    refused until that trial's outcome: success closes (with an empty window), failure
    re-opens for a fresh cool-down. A trial that never reports (its task canceled, a crash)
    is given up after another ``cool_down_s`` and the next caller becomes the trial.

    Only submit outcomes count, recorded under the attempt's key: the breaker decides where
    new work goes, and a provider failing its submits is not healthy because it still answers
    polls for old jobs. While open or half-open, outcomes of any call but the trial (submits
    that were already in flight) change nothing. Per process: a fast local reaction, and
    every process sees its own calls. Not thread-safe; one event loop calls it.
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


@dataclass(frozen=True)
class Route:
    """A provider chosen for a request, with its estimate."""

    provider: str
    model: str
    estimated_cost: int


class Providers:
    """Adapters by name, in preference order, each with a circuit breaker."""

    def __init__(self, adapters: Iterable[ProviderAdapter]) -> None:
        self.adapters: dict[str, ProviderAdapter] = {a.name: a for a in adapters}
        self.breakers = {name: CircuitBreaker() for name in self.adapters}

    def get(self, name: str) -> ProviderAdapter:
        return self.adapters[name]

    def models(self) -> set[str]:
        return {c.model for a in self.adapters.values() for c in a.capabilities()}

    def candidates(self, request: GenerationRequest) -> list[Route]:
        """Providers able to serve ``request``, cheapest first; CapabilityError if none.

        The error is the first provider's (it names the field a user should change).
        """
        found: list[tuple[int, int, Route]] = []
        first_error: CapabilityError | None = None
        for order, (name, adapter) in enumerate(self.adapters.items()):
            try:
                adapter.validate_capability(request)
            except CapabilityError as exc:
                first_error = first_error or exc
                continue
            cost = adapter.estimate_cost(request)
            found.append((cost, order, Route(name, request.model, cost)))
        if not found:
            if request.model not in self.models():
                raise CapabilityError("model", f"no provider serves model {request.model!r}")
            raise first_error or CapabilityError("model", "no provider can serve this request")
        return [route for _, _, route in sorted(found, key=lambda t: (t[0], t[1]))]

    def route(self, request: GenerationRequest, key: str) -> Route | None:
        """The provider for the call ``key`` now: the best candidate whose breaker admits it
        (which may make ``key`` that provider's half-open trial), else None."""
        for route in self.candidates(request):
            if self.breakers[route.provider].admit(key):
                return route
        return None

    async def close(self) -> None:
        for adapter in self.adapters.values():
            await adapter.close()
