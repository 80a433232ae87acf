"""Typed values of the registry: a subject's version, a stored schema, and how names and
version ids are read from a request."""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from typing import Final

from aigc_hub.schemas.avro_registry import errors

#: ``latest`` (or -1) in a version id: the newest version the lookup may see.
LATEST: Final = "latest"
#: Longest subject name kept (the column's width).
MAX_SUBJECT_CHARS = 255
_MAX_VERSION = 2**31 - 1


@dataclass(frozen=True)
class StoredSchema:
    """A schema as registered: its id, type and the text served for it."""

    id: int
    schema_type: str
    schema: str


@dataclass(frozen=True)
class SubjectVersion:
    """One version of a subject and the schema it names."""

    subject: str
    version: int
    schema_id: int
    schema_type: str
    schema: str
    deleted: bool

    def to_wire(self) -> dict[str, object]:
        """The Confluent answer for a version: ``subject``, ``version``, ``id``, ``schema``
        (``schemaType`` only when not AVRO, as Confluent leaves it out)."""
        body: dict[str, object] = {
            "subject": self.subject,
            "version": self.version,
            "id": self.schema_id,
            "schema": self.schema,
        }
        if self.schema_type != "AVRO":
            body["schemaType"] = self.schema_type
        return body


def check_subject(subject: str) -> str:
    """``subject`` when a registry may hold it; else :class:`errors.InvalidSubject`."""
    if not subject or not subject.strip():
        raise errors.InvalidSubject(subject, "it is empty")
    if len(subject) > MAX_SUBJECT_CHARS:
        raise errors.InvalidSubject(subject, f"it is longer than {MAX_SUBJECT_CHARS} characters")
    if any(unicodedata.category(ch) == "Cc" for ch in subject):
        raise errors.InvalidSubject(subject, "it holds control characters")
    return subject


def parse_version(text: str) -> int | None:
    """A version id: a number in 1..2^31-1, or None for ``latest`` (and -1, its alias).

    Raises :class:`errors.InvalidVersion` for anything else, as Confluent does (42202).
    """
    if text.strip().lower() == LATEST:
        return None
    try:
        number = int(text)
    except ValueError:
        raise errors.InvalidVersion(text) from None
    if number == -1:
        return None
    if not 1 <= number <= _MAX_VERSION:
        raise errors.InvalidVersion(text)
    return number
