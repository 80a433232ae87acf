"""The guarded egress fetcher (seed 004 §3.3.3-8, §3.11 SSRF row): every URL the hub
downloads and did not choose itself (provider outputs, and any other) goes through it.

- :mod:`.fetcher`: :class:`EgressFetcher` (``fetch_to_file``), :class:`Fetched`
- :mod:`.policy`: :class:`EgressPolicy` (origins, ports, trust, caps, deadlines)
- :mod:`.urls`: one parse of a URL into what is checked and what is sent
- :mod:`.addresses`: :func:`refused_address_class`, the address table
- :mod:`.resolver`: the :data:`Resolver` type and the system resolver
- :mod:`.network`: the httpcore backend that dials only checked addresses
- :mod:`.errors`: EgressRefused, EgressTimeout, EgressConnectionError, EgressHTTPError
"""

from __future__ import annotations

from aigc_hub.egress.addresses import refused_address_class
from aigc_hub.egress.errors import (
    EgressConnectionError,
    EgressHTTPError,
    EgressRefused,
    EgressTimeout,
)
from aigc_hub.egress.fetcher import HEAD_BYTES, EgressFetcher, Fetched
from aigc_hub.egress.policy import EgressPolicy
from aigc_hub.egress.resolver import Resolver, system_resolver

__all__ = [
    "HEAD_BYTES",
    "EgressConnectionError",
    "EgressFetcher",
    "EgressHTTPError",
    "EgressPolicy",
    "EgressRefused",
    "EgressTimeout",
    "Fetched",
    "Resolver",
    "refused_address_class",
    "system_resolver",
]
