"""The compatibility rule between versions of one event type.

Versions of a type are numbered 1, 2, 3… without gaps. Each version may only *add* fields to
the one before it, and every added field needs a default, so a newer model still reads an
older payload. No field may be removed or renamed (a rename is a removal plus an addition),
become required, or change its JSON type. Fields are compared through the models' JSON
schemas (validation mode, so aliases count as names): ``type``, ``format``, ``$ref``,
``anyOf`` and the like. Widening ``T`` to ``T | None`` is allowed. A ``$ref`` to a nested
model is followed and that model is held to the same rule.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import pydantic

from aigc_hub.schemas.registry import SchemaRegistry

#: The keys of a field's JSON schema that make up its type.
_SHAPE_KEYS = (
    "type",
    "format",
    "$ref",
    "anyOf",
    "oneOf",
    "allOf",
    "items",
    "prefixItems",
    "additionalProperties",
)
_NULL = {"type": "null"}


@dataclass(frozen=True)
class CompatibilityProblem:
    """One rule broken by ``event_type`` going from ``old_version`` to ``new_version``."""

    event_type: str
    old_version: int | None
    new_version: int
    field: str | None
    problem: str

    def __str__(self) -> str:
        old = f"v{self.old_version}" if self.old_version is not None else "start"
        where = f" field {self.field!r}" if self.field else ""
        return f"{self.event_type} {old} -> v{self.new_version}{where}: {self.problem}"


def check(registry: SchemaRegistry) -> list[CompatibilityProblem]:
    """Every compatibility problem of ``registry``, ordered by type, version and field."""
    problems: list[CompatibilityProblem] = []
    for name in registry.names():
        versions = registry.versions(name)
        if versions[0] != 1:
            problems.append(
                CompatibilityProblem(
                    name, None, versions[0], None, f"versions start at {versions[0]}, not at 1"
                )
            )
        for old, new in pairwise(versions):
            if new != old + 1:
                missing = ", ".join(f"v{v}" for v in range(old + 1, new))
                problems.append(CompatibilityProblem(name, old, new, None, f"missing {missing}"))
            for field, problem in compare(registry.get(name, old), registry.get(name, new)):
                problems.append(CompatibilityProblem(name, old, new, field, problem))
    return problems


def compare(
    old: type[pydantic.BaseModel], new: type[pydantic.BaseModel]
) -> list[tuple[str | None, str]]:
    """The (field path, problem) pairs that stop ``new`` from being a compatible ``old``."""
    try:
        old_schema = old.model_json_schema(mode="validation")
        new_schema = new.model_json_schema(mode="validation")
    except pydantic.PydanticUserError as exc:
        return [(None, f"cannot build a JSON schema: {exc}")]
    walk = _Walk(old_schema.get("$defs", {}), new_schema.get("$defs", {}))
    return sorted(walk.objects("", old_schema, new_schema), key=lambda p: (p[0] or "", p[1]))


class _Walk:
    """One comparison of two JSON schemas, with both ``$defs`` and a guard against cycles."""

    def __init__(self, old_defs: Mapping[str, Any], new_defs: Mapping[str, Any]) -> None:
        self.old_defs = old_defs
        self.new_defs = new_defs
        self.seen: set[tuple[str, str]] = set()

    def objects(
        self, prefix: str, old: Mapping[str, Any], new: Mapping[str, Any]
    ) -> Iterator[tuple[str | None, str]]:
        old_props: Mapping[str, Any] = old.get("properties", {})
        new_props: Mapping[str, Any] = new.get("properties", {})
        old_required = set(old.get("required", ()))
        new_required = set(new.get("required", ()))
        for name, old_field in old_props.items():
            path = prefix + name
            if name not in new_props:
                yield path, "removed (or renamed)"
                continue
            if name in new_required and name not in old_required:
                yield path, "became required (older payloads may lack it)"
            yield from self.field(path, old_field, new_props[name])
        for name in new_props:
            if name not in old_props and name in new_required:
                yield prefix + name, "added without a default (older payloads lack it)"

    def field(
        self, path: str, old: Mapping[str, Any], new: Mapping[str, Any]
    ) -> Iterator[tuple[str | None, str]]:
        old_inner, new_inner = _unwrap_optional(old), _unwrap_optional(new)
        if old_inner is not None and new_inner is None:
            yield path, "no longer accepts null"
        old, new = old_inner or old, new_inner or new
        old_ref, new_ref = old.get("$ref"), new.get("$ref")
        if isinstance(old_ref, str) and isinstance(new_ref, str):
            old_def, new_def = _resolve(old_ref, self.old_defs), _resolve(new_ref, self.new_defs)
            if _is_object(old_def) and _is_object(new_def):
                if (old_ref, new_ref) not in self.seen:
                    self.seen.add((old_ref, new_ref))
                    yield from self.objects(path + ".", old_def, new_def)
                return
        old_shape, new_shape = _shape(old), _shape(new)
        if old_shape == new_shape or _is_nullable_of(new_shape, old_shape):
            return
        yield path, f"type changed from {_describe(old_shape)} to {_describe(new_shape)}"


def _unwrap_optional(schema: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """``T`` when ``schema`` is exactly ``T | None``, else None."""
    options = schema.get("anyOf")
    if not isinstance(options, list) or len(options) != 2 or _NULL not in options:
        return None
    inner = options[0] if options[1] == _NULL else options[1]
    return inner if isinstance(inner, Mapping) and inner != _NULL else None


def _shape(schema: Any) -> Any:
    """The type-bearing part of a JSON schema, recursively; titles and defaults dropped."""
    if isinstance(schema, list):
        return [_shape(item) for item in schema]
    if not isinstance(schema, Mapping):
        return schema
    return {key: _shape(schema[key]) for key in _SHAPE_KEYS if key in schema}


def _is_nullable_of(new: Any, old: Any) -> bool:
    """Whether ``new`` is ``old | None`` (a widening that every older payload still meets)."""
    if not isinstance(new, dict) or set(new) != {"anyOf"}:
        return False
    options = new["anyOf"]
    if _NULL not in options:
        return False
    rest = [option for option in options if option != _NULL]
    if old in rest and len(rest) == 1:
        return True
    old_options = old.get("anyOf") if isinstance(old, dict) and set(old) == {"anyOf"} else None
    return old_options == rest


def _describe(shape: Any) -> str:
    if not isinstance(shape, dict) or not shape:
        return "any"
    if "$ref" in shape:
        return str(shape["$ref"]).rsplit("/", 1)[-1]
    for key in ("anyOf", "oneOf"):
        if key in shape:
            return " | ".join(_describe(option) for option in shape[key])
    kind = str(shape.get("type", "any"))
    if "format" in shape:
        kind += f" ({shape['format']})"
    if "items" in shape:
        kind += f" of {_describe(shape['items'])}"
    return kind


def _resolve(ref: str, defs: Mapping[str, Any]) -> Mapping[str, Any]:
    found = defs.get(ref.rsplit("/", 1)[-1]) if ref.startswith("#/$defs/") else None
    return found if isinstance(found, Mapping) else {}


def _is_object(schema: Mapping[str, Any]) -> bool:
    return schema.get("type") == "object" and "properties" in schema
