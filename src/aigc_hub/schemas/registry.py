"""The schema registry: (event type, version) -> pydantic payload model, and payload decoding.

Pipelines declare their payload models with ``@pipeline.event(name, version)``; the registry
collects them from every installed pipeline. :meth:`SchemaRegistry.decode` runs once per
message, so it is a dictionary lookup and one ``model_validate`` call.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

import pydantic

from aigc_hub.core.errors import SchemaError
from aigc_hub.pipeline import EventSpec

if TYPE_CHECKING:
    from aigc_hub.core.envelope import Envelope
    from aigc_hub.pipeline import PipelineBase


class SchemaRegistry:
    """Payload models by (event type, version); registration is idempotent, lookups are pure."""

    def __init__(self, specs: Iterable[EventSpec] = ()) -> None:
        self._specs: dict[tuple[str, int], EventSpec] = {}
        # The hot path of decode(): one lookup, no attribute access on a spec.
        self._models: dict[tuple[str, int], type[pydantic.BaseModel]] = {}
        for spec in specs:
            self.register(spec.name, spec.version, spec.model, topic=spec.topic)

    @classmethod
    def from_pipelines(cls, pipelines: Iterable[PipelineBase]) -> SchemaRegistry:
        """A registry of every event of ``pipelines``; ValueError names a conflicting pipeline."""
        registry = cls()
        for pipeline in pipelines:
            for spec in pipeline.events:
                try:
                    registry.register(spec.name, spec.version, spec.model, topic=spec.topic)
                except ValueError as exc:
                    raise ValueError(f"pipeline {pipeline.name!r}: {exc}") from None
        return registry

    def register(
        self,
        name: str,
        version: int,
        model: type[pydantic.BaseModel],
        *,
        topic: str | None = None,
    ) -> None:
        """Register ``model`` as ``name`` v``version``; the same model again is a no-op.

        Raises ValueError for a version below 1, a model that is not a pydantic model, or
        another model (or another topic) already registered under the same key.
        """
        if not isinstance(model, type) or not issubclass(model, pydantic.BaseModel):
            raise ValueError(f"event {name!r} v{version}: {model!r} is not a pydantic model")
        if isinstance(version, bool) or not isinstance(version, int) or version < 1:
            raise ValueError(f"event {name!r}: version must be an integer >= 1, not {version!r}")
        key = (name, version)
        existing = self._specs.get(key)
        if existing is None:
            self._specs[key] = EventSpec(name, version, model, topic)
            self._models[key] = model
            return
        if existing.model is not model:
            raise ValueError(
                f"event {name!r} v{version} registered twice with different models: "
                f"{_qualname(existing.model)} and {_qualname(model)}"
            )
        if topic is not None and existing.topic is not None and topic != existing.topic:
            raise ValueError(
                f"event {name!r} v{version} registered on two topics: "
                f"{existing.topic!r} and {topic!r}"
            )
        if existing.topic is None and topic is not None:
            self._specs[key] = EventSpec(name, version, model, topic)

    def get(self, name: str, version: int) -> type[pydantic.BaseModel]:
        """The model of ``name`` v``version``; SchemaError names what is missing."""
        model = self._models.get((name, version))
        if model is None:
            raise self._missing(name, version)
        return model

    def versions(self, name: str) -> list[int]:
        """The registered versions of ``name``, ascending; empty when the name is unknown."""
        return sorted(v for (n, v) in self._specs if n == name)

    def names(self) -> list[str]:
        """Every registered event type name, sorted."""
        return sorted({n for (n, _) in self._specs})

    def __iter__(self) -> Iterator[EventSpec]:
        """Every registration, ordered by name then version."""
        return iter([self._specs[key] for key in sorted(self._specs)])

    def __len__(self) -> int:
        return len(self._specs)

    def __contains__(self, key: object) -> bool:
        return key in self._specs

    def decode(self, envelope: Envelope) -> pydantic.BaseModel:
        """Validate the envelope's payload against its registered model.

        Raises SchemaError (a PermanentError) for an unknown type or version, or for a
        payload that fails validation; the message names the first bad field.
        """
        name, version = envelope.event_type, envelope.schema_version
        model = self._models.get((name, version))
        if model is None:
            raise self._missing(name, version)
        try:
            return model.model_validate(envelope.payload)
        except pydantic.ValidationError as exc:
            raise SchemaError(_invalid_payload(name, version, exc)) from None

    def _missing(self, name: str, version: int) -> SchemaError:
        known = self.versions(name)
        if not known:
            return SchemaError(f"unknown event type {name!r}: no schema is registered for it")
        listed = ", ".join(str(v) for v in known)
        return SchemaError(f"event type {name!r} has no schema v{version} (known: {listed})")


def _invalid_payload(name: str, version: int, exc: pydantic.ValidationError) -> str:
    errors = exc.errors(include_url=False)
    first = errors[0]
    path = ".".join(str(part) for part in first.get("loc", ())) or "$"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"invalid payload for {name!r} v{version}: field {path!r}: {first['msg']}{more}"


def _qualname(model: type[object]) -> str:
    return f"{model.__module__}.{model.__qualname__}"
