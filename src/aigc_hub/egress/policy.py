"""The egress policy: what one fetch may reach, how much it may read, for how long."""

from __future__ import annotations

from dataclasses import dataclass

from aigc_hub.egress import urls
from aigc_hub.egress.errors import EgressRefused


@dataclass(frozen=True)
class EgressPolicy:
    """Limits of one fetch, checked again on every redirect hop.

    A port is allowed when it is in ``allowed_ports`` or is the port of an exact origin named
    in ``allowed_origins`` or ``trusted_origins`` (naming ``https://cdn:8443`` allows 8443
    for that origin only). ``trusted_origins`` lifts only the address check, and only for
    those exact origins (the hub's own local provider on loopback): a trusted origin must
    still pass ``allowed_origins`` when there is one.
    """

    max_bytes: int
    deadline_s: float  # total, connect to last byte
    allowed_origins: frozenset[str] | None = None  # "https://host[:port]", "https://*.host"
    allowed_ports: frozenset[int] = frozenset({80, 443})
    trusted_origins: frozenset[str] = frozenset()
    max_redirects: int = 3
    connect_timeout_s: float = 10.0
    #: longest silence between two reads; a slow drip is stopped by ``deadline_s``
    idle_timeout_s: float = 30.0

    def __post_init__(self) -> None:
        if self.max_bytes < 0 or self.deadline_s <= 0 or self.max_redirects < 0:
            raise ValueError("max_bytes >= 0, deadline_s > 0 and max_redirects >= 0")
        for entry in (*(self.allowed_origins or ()), *self.trusted_origins):
            urls.pattern(entry)  # ValueError naming a malformed entry, at configuration time
        if any(urls.pattern(e).subdomains for e in self.trusted_origins):
            raise ValueError("trusted_origins are exact origins; no *. patterns")

    def check(self, target: urls.Target, *, hop: int) -> None:
        """Raise EgressRefused ``origin`` or ``port`` unless ``target`` may be requested."""
        allowed = self.allowed_origins
        if allowed is not None and not any(urls.pattern(e).matches(target) for e in allowed):
            raise EgressRefused("origin", f"{target.origin} is not allowed", hop=hop)
        if target.port not in self.allowed_ports and not self._names_port(target):
            raise EgressRefused("port", f"port {target.port} is not allowed", hop=hop)

    def trusts(self, target: urls.Target) -> bool:
        """True when ``target``'s exact origin may resolve to a non-public address."""
        return any(urls.pattern(e).matches(target) for e in self.trusted_origins)

    def _names_port(self, target: urls.Target) -> bool:
        named = (*(self.allowed_origins or ()), *self.trusted_origins)
        exact = (urls.pattern(e) for e in named)
        return any(not p.subdomains and p.matches(target) for p in exact)
