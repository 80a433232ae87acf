"""Object keys: deterministic, tenant-scoped, and safe as both S3 keys and file paths.

Every object the hub stores lives under ``t/<tenant>/<kind>/<object_id>/<filename>``, so the
owning tenant can be read from the key alone and one tenant's objects can be listed, expired
or deleted by prefix. Keys are built from validated parts only: anything that could climb out
of a folder (``..``, ``/``, ``\\``), hide (a leading dot) or need escaping is refused with a
``ValueError`` naming the part, never silently rewritten. :func:`safe_filename` is the one
place that turns a user's file name into an acceptable one, on purpose and visibly.
"""

from __future__ import annotations

import re
import unicodedata
import uuid

#: The first segment of every tenant-scoped key.
TENANT_PREFIX = "t"

#: Tenant, kind and object id: letters, digits, ``_`` and ``-``, starting with a letter or digit.
_SEGMENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,127}")
#: A file name: letters, digits, ``.``, ``_``, ``-``; no leading dot; at most 200 characters.
_FILENAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,199}")
#: Any key a store accepts: safe segments joined by single slashes.
_KEY_SEGMENT = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]*")
_MAX_KEY = 1024


def _segment(name: str, value: object) -> str:
    text = str(value) if isinstance(value, uuid.UUID) else value
    if not isinstance(text, str) or not _SEGMENT.fullmatch(text):
        raise ValueError(
            f"{name} {value!r} is not a safe key segment "
            "(1-128 of A-Z a-z 0-9 _ -, starting with a letter or digit)"
        )
    return text


def _filename(value: str) -> str:
    if not isinstance(value, str) or not _FILENAME.fullmatch(value) or ".." in value:
        raise ValueError(
            f"filename {value!r} is not safe (1-200 of A-Z a-z 0-9 . _ -, no leading dot, "
            "no '..'); pass user-supplied names through safe_filename() first"
        )
    return value


def object_key(
    tenant_id: str | uuid.UUID, kind: str, object_id: str | uuid.UUID, filename: str
) -> str:
    """``t/<tenant>/<kind>/<object_id>/<filename>``: the same inputs always give the same key.

    Raises ``ValueError`` naming the first unsafe part; nothing is escaped or rewritten.
    """
    return "/".join(
        (
            TENANT_PREFIX,
            _segment("tenant_id", tenant_id),
            _segment("kind", kind),
            _segment("object_id", object_id),
            _filename(filename),
        )
    )


def tenant_of(key: str) -> str:
    """The tenant that owns ``key``; ``ValueError`` if it is not a tenant-scoped key."""
    parts = check_key(key).split("/")
    if len(parts) < 3 or parts[0] != TENANT_PREFIX or not _SEGMENT.fullmatch(parts[1]):
        raise ValueError(f"key {key!r} is not tenant-scoped ('{TENANT_PREFIX}/<tenant>/...')")
    return parts[1]


def check_key(key: str) -> str:
    """Return ``key`` if every store may use it as an S3 key and a relative file path.

    Refuses empty, absolute or over-long keys, empty, ``.`` and ``..`` segments, dot-files,
    backslashes and any character outside ``A-Z a-z 0-9 . _ - /``.
    """
    if not isinstance(key, str) or not key or len(key) > _MAX_KEY:
        raise ValueError(f"key {key!r} must be 1-{_MAX_KEY} characters")
    for segment in key.split("/"):
        if not _KEY_SEGMENT.fullmatch(segment) or ".." in segment:
            raise ValueError(
                f"key {key!r} has an unsafe segment {segment!r} "
                "(empty, '.', '..', leading dot, or a character outside A-Z a-z 0-9 . _ -)"
            )
    return key


def safe_filename(name: str, *, default: str = "file") -> str:
    """A deterministic, safe file name for a user-supplied ``name``, keeping its extension.

    Folders are dropped (only the last path part counts), accents are folded (NFKD), other
    unsafe runs become ``_``, dots and ``_`` are trimmed from the ends of the stem, and the
    result is cut to 200 characters. A stem with nothing usable left becomes ``default``
    (``"视频.mp4"`` gives ``"file.mp4"``).
    """
    base = re.split(r"[/\\]", name)[-1]
    folded = unicodedata.normalize("NFKD", base).encode("ascii", "ignore").decode("ascii")
    stem, dot, ext = folded.rpartition(".")
    if not dot:
        stem, ext = folded, ""
    ext = re.sub(r"[^A-Za-z0-9]+", "", ext)[:16]
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", stem)
    stem = re.sub(r"\.{2,}", ".", stem).strip("._")
    stem = stem[: 199 - len(ext)].rstrip("._") or default
    return _filename(f"{stem}.{ext}" if ext else stem)
