"""Compatibility levels and the check a new schema must pass before it gets a version.

"Backward" means the new schema, as a *reader*, can read data written with an older one:
consumers upgrade first (seed 003 §9: a field added with a default is backward compatible,
since old records lack it and the reader fills the default). "Forward" is the converse:
older readers can read data the new schema writes, so producers may upgrade first. "Full"
is both. A plain level is checked against the newest live version only; a ``_TRANSITIVE``
one against every live version. The pairwise rule is Avro's schema resolution, as
:class:`avro.compatibility.ReaderWriterCompatibilityChecker` implements it.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import TypeVar

import avro.schema
from avro.compatibility import ReaderWriterCompatibilityChecker, SchemaCompatibilityType

from aigc_hub.schemas.avro_registry import errors

T = TypeVar("T")


class Compatibility(enum.StrEnum):
    """A subject's (or the registry's) compatibility level, as Confluent names them."""

    NONE = "NONE"
    BACKWARD = "BACKWARD"
    BACKWARD_TRANSITIVE = "BACKWARD_TRANSITIVE"
    FORWARD = "FORWARD"
    FORWARD_TRANSITIVE = "FORWARD_TRANSITIVE"
    FULL = "FULL"
    FULL_TRANSITIVE = "FULL_TRANSITIVE"

    @classmethod
    def parse(cls, value: object) -> Compatibility:
        """The level named by ``value`` (any case); :class:`errors.InvalidCompatibility`
        (42203) for anything else."""
        if isinstance(value, str):
            try:
                return cls(value.strip().upper())
            except ValueError:
                pass
        raise errors.InvalidCompatibility(value)

    @property
    def backward(self) -> bool:
        """True when the new schema must read what older ones wrote."""
        return self in (self.BACKWARD, self.BACKWARD_TRANSITIVE, self.FULL, self.FULL_TRANSITIVE)

    @property
    def forward(self) -> bool:
        """True when older schemas must read what the new one writes."""
        return self in (self.FORWARD, self.FORWARD_TRANSITIVE, self.FULL, self.FULL_TRANSITIVE)

    @property
    def transitive(self) -> bool:
        """True when every live version counts, not only the newest."""
        return self.value.endswith("_TRANSITIVE")

    def compared_with(self, live: Sequence[T]) -> list[T]:
        """Of a subject's live versions (oldest first), those a new schema is checked against."""
        if self is Compatibility.NONE or not live:
            return []
        return list(live) if self.transitive else [live[-1]]


#: The level of a registry nobody configured (Confluent's default too).
DEFAULT = Compatibility.BACKWARD


def problems(
    level: Compatibility,
    candidate: avro.schema.Schema,
    previous: Sequence[tuple[int, avro.schema.Schema]],
) -> list[str]:
    """Why ``candidate`` breaks ``level`` against ``previous`` (version, schema) pairs; an
    empty list when it does not. Every pair is checked in the directions the level asks."""
    found: list[str] = []
    for version, old in previous:
        if level.backward:
            found += _check(candidate, old, f"the new schema cannot read version {version}")
        if level.forward:
            found += _check(old, candidate, f"version {version} cannot read the new schema")
    return found


def _check(reader: avro.schema.Schema, writer: avro.schema.Schema, what: str) -> list[str]:
    # A fresh checker per pair: it memoizes pairs it has seen and would grow for ever.
    checker = ReaderWriterCompatibilityChecker()  # type: ignore[no-untyped-call]  # untyped __init__
    result = checker.get_compatibility(reader, writer)
    if result.compatibility is SchemaCompatibilityType.compatible:
        return []
    kinds = ", ".join(sorted({kind.value for kind in result.incompatibilities}))
    where = ", ".join(sorted(result.locations))
    detail = "; ".join(sorted(result.messages))
    return [f"{what}: {kinds} at {where} ({detail})"]
