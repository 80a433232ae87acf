"""Avro schema texts made into values the registry can compare, store and check.

A schema is read twice, on purpose: fastavro refuses what Java's Avro parser refuses and the
``avro`` package lets pass (a default that does not match its field's type, such as
``"default": "yes"`` on a boolean: readers would fill a value their own type rejects), and
the ``avro`` package's object is what :mod:`avro.compatibility` checks.

**Identity.** Two texts are the same schema when their *canonical form* is equal: the
``avro`` package's JSON of the parsed schema (full names resolved, ``{"type": "string"}``
folded to ``"string"``), with object keys sorted and no whitespace. Avro's own Parsing
Canonical Form is *not* used: it drops ``default``, ``doc`` and ``aliases``, so a schema
whose only change is a field's default (seed 003's ``aiAnalysisRequired``, default true)
would get the id of the schema without it, and readers would fill the wrong value.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

import avro.errors
import avro.schema
import fastavro

from aigc_hub.schemas.avro_registry import errors

#: The only schema type this registry keeps (Confluent's default when none is named).
AVRO = "AVRO"
#: What ``GET /schemas/types`` lists.
SCHEMA_TYPES = (AVRO,)


@dataclass(frozen=True)
class ParsedSchema:
    """A valid Avro schema: the text to store, its identity, and the parsed form."""

    #: Compact JSON, keys in the order given (the normalized form with ``normalize``).
    text: str
    #: sha256 of the type and the canonical form: equal for the same schema, whatever spacing.
    fingerprint: str
    parsed: avro.schema.Schema


def parse(
    text: object,
    *,
    schema_type: object = AVRO,
    references: object = (),
    normalize: bool = False,
) -> ParsedSchema:
    """Parse a registration's ``schema`` (with its ``schemaType`` and ``references``).

    ``normalize`` stores the canonical form's key order instead of the text's own. Raises
    :class:`errors.InvalidSchema` (42201) for a type other than AVRO, references (not kept
    yet), text that is not JSON, and a schema either parser refuses.
    """
    if schema_type is None:
        schema_type = AVRO
    if not isinstance(schema_type, str) or schema_type.upper() != AVRO:
        raise errors.InvalidSchema(
            f"schema type {schema_type!r} is not supported: this registry keeps AVRO only"
        )
    if references not in (None, [], ()):
        raise errors.InvalidSchema("schema references are not supported: send an empty list")
    if not isinstance(text, str) or not text.strip():
        raise errors.InvalidSchema("the schema must be a non-empty string of Avro JSON")
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise errors.InvalidSchema(f"not JSON: {exc}") from None
    try:
        fastavro.parse_schema(document)
    except Exception as exc:  # fastavro raises several unrelated classes (and KeyError)
        raise errors.InvalidSchema(_reason(exc)) from None
    try:
        parsed = avro.schema.parse(text)
    except (avro.errors.AvroException, ValueError, TypeError) as exc:
        raise errors.InvalidSchema(_reason(exc)) from None
    normal = parsed.to_json()
    canonical = json.dumps(normal, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    fingerprint = hashlib.sha256(f"{AVRO}\n{canonical}".encode()).hexdigest()
    stored = normal if normalize else document
    return ParsedSchema(
        text=json.dumps(stored, separators=(",", ":"), ensure_ascii=False),
        fingerprint=fingerprint,
        parsed=parsed,
    )


def _reason(exc: BaseException) -> str:
    """A parser's complaint in words (fastavro says ``KeyError('size')`` for a missing one)."""
    if isinstance(exc, KeyError) and exc.args:
        return f"missing attribute {exc.args[0]!r}"
    return str(exc) or type(exc).__name__
