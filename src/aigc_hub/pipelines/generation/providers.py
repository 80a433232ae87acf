"""The providers a hub can route to, their health, and the routing decision (seed 004 §3.6.3).

Routing filters providers by capability, skips those whose circuit is open (recent error
rate too high), then prefers the cheapest estimate, ties broken by configured order.
"""

from __future__ import annotations

from collections.abc import Iterable

from aigc_hub.pipelines.generation.adapters.base import (
    CapabilityError,
    GenerationRequest,
    ProviderAdapter,
)
from aigc_hub.pipelines.generation.rules import Route, cheapest_first
from aigc_hub.reliability.breaker import CircuitBreaker


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
        found: list[Route] = []
        first_error: CapabilityError | None = None
        for name, adapter in self.adapters.items():
            try:
                adapter.validate_capability(request)
            except CapabilityError as exc:
                first_error = first_error or exc
                continue
            cost = adapter.estimate_cost(request)
            found.append(Route(name, request.model, cost))
        if not found:
            if request.model not in self.models():
                raise CapabilityError("model", f"no provider serves model {request.model!r}")
            raise first_error or CapabilityError("model", "no provider can serve this request")
        return cheapest_first(found)

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
