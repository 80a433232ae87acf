"""The providers a hub can route to, their health, and the routing decision (seed 004 §3.6.3).

Routing filters providers by capability, skips those whose circuit is open (recent error
rate too high), then prefers the cheapest estimate, ties broken by configured order.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from aigc_hub.pipelines.generation.adapters.base import (
    CapabilityError,
    GenerationRequest,
    ProviderAdapter,
)


@dataclass
class CircuitBreaker:
    """Opens when the recent error rate is too high; half-opens after ``cool_down_s``.

    Per process: a breaker is a fast local reaction, and every process sees its own calls.
    """

    window: int = 20
    min_calls: int = 5
    max_error_rate: float = 0.5
    cool_down_s: float = 30.0
    clock: Callable[[], float] = time.monotonic
    _outcomes: collections.deque[bool] = field(default_factory=collections.deque)
    _opened_at: float | None = None

    def record(self, ok: bool) -> None:
        self._outcomes.append(ok)
        while len(self._outcomes) > self.window:
            self._outcomes.popleft()
        if ok and self._opened_at is not None:
            self._opened_at = None  # a trial call passed: close
            self._outcomes.clear()
        elif not ok and len(self._outcomes) >= self.min_calls:
            errors = self._outcomes.count(False)
            if errors / len(self._outcomes) > self.max_error_rate:
                self._opened_at = self.clock()

    @property
    def open(self) -> bool:
        """True while calls should go elsewhere (after the cool-down, one trial is let in)."""
        if self._opened_at is None:
            return False
        return self.clock() - self._opened_at < self.cool_down_s


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

    def route(self, request: GenerationRequest) -> Route | None:
        """The provider to use now: the best candidate whose circuit is closed, else None."""
        for route in self.candidates(request):
            if not self.breakers[route.provider].open:
                return route
        return None

    async def close(self) -> None:
        for adapter in self.adapters.values():
            await adapter.close()
