"""Make ``confluent_kafka.schema_registry`` importable where Authlib is not installed.

confluent-kafka's registry package imports Authlib at import time, for its OAuth bearer
token flows (``bearer.auth.credentials.source=OAUTHBEARER``); the plain ``confluent-kafka``
the hub's ``kafka`` extra names does not bring it (``confluent-kafka[schemaregistry]``
would). Basic auth and ``STATIC_TOKEN`` bearer auth, all the hub's tests use, never touch
it. So when Authlib is missing, :func:`ensure_importable` stands a placeholder in whose
OAuth clients refuse to be built: the real client, serializer and deserializer then run,
and a test that strayed onto an OAuth flow would fail loudly instead of passing. With
Authlib installed it does nothing.
"""

from __future__ import annotations

import importlib.util
import sys
import types

_MODULES = ("authlib", "authlib.integrations", "authlib.integrations.httpx_client")


class _NoOAuth:
    """An OAuth client that cannot exist here (Authlib is not installed)."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        raise RuntimeError("Authlib is not installed: OAuth bearer flows are unavailable")


def ensure_importable() -> None:
    """Register the placeholder modules unless Authlib itself is importable."""
    if importlib.util.find_spec("authlib") is not None:
        return
    for name in _MODULES:
        sys.modules.setdefault(name, types.ModuleType(name))
    client = sys.modules["authlib.integrations.httpx_client"]
    client.OAuth2Client = _NoOAuth  # type: ignore[attr-defined]
    client.AsyncOAuth2Client = _NoOAuth  # type: ignore[attr-defined]


ensure_importable()

# The real classes, for tests to import from here (after the placeholder, when needed).
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient  # noqa: E402
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer  # noqa: E402
from confluent_kafka.schema_registry.error import SchemaRegistryError  # noqa: E402

__all__ = [
    "AvroDeserializer",
    "AvroSerializer",
    "Schema",
    "SchemaRegistryClient",
    "SchemaRegistryError",
    "ensure_importable",
]
