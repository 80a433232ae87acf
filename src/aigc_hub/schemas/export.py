"""JSON Schema export: one file per (event type, version), byte-for-byte reproducible."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pydantic

from aigc_hub.core.errors import SchemaError
from aigc_hub.pipeline import EventSpec
from aigc_hub.schemas.registry import SchemaRegistry

#: The dialect pydantic generates.
JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


def filename(name: str, version: int) -> str:
    """The file name of ``name`` v``version``: ``<type>.v<version>.json``."""
    return f"{name}.v{version}.json"


def schema_of(spec: EventSpec) -> dict[str, Any]:
    """The JSON Schema of one registration, with ``$id`` and ``title`` naming type and version.

    Raises SchemaError when pydantic cannot express the model as a JSON Schema.
    """
    try:
        schema = spec.model.model_json_schema(mode="validation")
    except pydantic.PydanticUserError as exc:
        raise SchemaError(f"{spec.name!r} v{spec.version}: no JSON Schema: {exc}") from None
    model_title = schema.pop("title", spec.model.__name__)
    schema.update(
        {
            "$schema": JSON_SCHEMA_DIALECT,
            "$id": f"urn:aigc-hub:event:{spec.name}:v{spec.version}",
            "title": f"{spec.name} v{spec.version}",
            "x-event-type": spec.name,
            "x-schema-version": spec.version,
            "x-model": model_title,
        }
    )
    if spec.topic is not None:
        schema["x-topic"] = spec.topic
    return schema


def render(schema: dict[str, Any]) -> str:
    """Deterministic JSON text: sorted keys, two-space indent, trailing newline."""
    return json.dumps(schema, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def export(registry: SchemaRegistry, directory: Path | str) -> list[Path]:
    """Write every registration's schema into ``directory`` (created if missing).

    Returns one path per registration in registry order; a file whose content is already
    right is not rewritten, and other files in ``directory`` are left alone.
    """
    target = Path(directory)
    target.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for spec in registry:
        path = target / filename(spec.name, spec.version)
        text = render(schema_of(spec))
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
        written.append(path)
    return written
