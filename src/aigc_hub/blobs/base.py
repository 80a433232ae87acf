"""The blob seam: objects under tenant-scoped keys, and signed URLs that let clients move bytes.

Asset bytes never pass through a handler's memory on their way in: the API hands the client a
short-lived presigned PUT (or one URL per multipart part), the client uploads straight to the
store, and the asset service checks the result with :meth:`BlobStore.head` (size, sha256)
before it marks the asset ready. Rows keep the object key, never a URL (seed 004 §3.2.9).

Errors (all :class:`~aigc_hub.core.errors.PermanentError`, retrying cannot help)::

    PermanentError
    ├── BlobNotFound           no object, or no multipart upload, under this key
    ├── SignatureError         a signed URL the store refuses
    │   ├── SignatureInvalid   tampered, signed for another key or operation, or not ours
    │   └── SignatureExpired   correctly signed, but past its expiry
    └── UploadRejected         a body or part list that breaks the signed size, checksum or
                               part rules

What an engine can do is stated in its :class:`Features`, read by callers and the contract
suite instead of checking classes.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
from collections.abc import AsyncIterable, AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, TypeAlias

from aigc_hub.core.errors import PermanentError

MiB = 1 << 20
#: Longest validity of a signed URL: SigV4's limit of seven days, enforced on every engine.
MAX_EXPIRES_S = 7 * 24 * 3600
#: Content type of objects stored without one.
DEFAULT_CONTENT_TYPE = "application/octet-stream"
#: Chunk size :meth:`BlobStore.stream` yields by default.
CHUNK_SIZE = MiB

#: The body of a put: all bytes at once, or chunks as they arrive.
Data: TypeAlias = bytes | AsyncIterable[bytes]
#: Completed parts of a multipart upload: ``(part_no, etag)`` as the part upload returned them.
Parts: TypeAlias = Sequence[tuple[int, str]]

_SHA256_HEX = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class Features:
    """What a blob engine guarantees, declared as data."""

    #: Signed URLs point at the hub's own API (``/blobs/...``), which must serve them.
    urls_served_by_hub: bool
    #: ``head()`` reports a sha256 for objects assembled from multipart parts.
    sha256_after_multipart: bool
    #: Smallest size of every part except the last (S3: 5 MiB).
    min_part_size: int = 5 * MiB
    #: Most parts one upload may have (S3: 10 000).
    max_parts: int = 10_000


@dataclass(frozen=True)
class BlobInfo:
    """What a store knows about one object; ``sha256`` is lowercase hex, or None if unknown."""

    key: str
    size: int
    etag: str
    content_type: str
    sha256: str | None = None


@dataclass(frozen=True)
class Listed:
    """One object :meth:`BlobStore.list_objects` found: key, size, last write (epoch ms)."""

    key: str
    size: int
    modified_ms: int


@dataclass(frozen=True)
class PresignedPut:
    """A signed upload: PUT the body to ``url`` sending exactly ``headers`` (they are signed).

    When the URL is signed for a size, the ``Content-Length`` every HTTP client sends must
    equal it; it is not repeated in ``headers``.
    """

    url: str
    headers: Mapping[str, str] = field(default_factory=dict)
    #: Epoch seconds after which the store refuses the URL.
    expires_at: int = 0


class BlobNotFound(PermanentError):
    """No object is stored under this key."""


class SignatureError(PermanentError):
    """The signed URL is refused."""


class SignatureInvalid(SignatureError):
    """The signed URL was tampered with, is for another key or operation, or is not ours."""


class SignatureExpired(SignatureError):
    """The signed URL has expired."""


class UploadRejected(PermanentError):
    """The upload breaks its signed size, checksum, content type or part rules."""


class BlobStore(Protocol):
    """Objects under keys (see :mod:`aigc_hub.blobs.keys`); every method is async-safe."""

    features: Features

    async def put(self, key: str, data: Data, content_type: str = DEFAULT_CONTENT_TYPE) -> BlobInfo:
        """Store ``data`` under ``key`` atomically (readers see the old or the new object,
        never a part) and record its sha256. Replaces an existing object."""
        ...

    async def get(self, key: str) -> bytes:
        """The whole object; raises :class:`BlobNotFound`. Use :meth:`stream` for large ones."""
        ...

    def stream(
        self, key: str, chunk_size: int = CHUNK_SIZE, *, start: int = 0, end: int | None = None
    ) -> AsyncIterator[bytes]:
        """The object's bytes ``start`` to ``end`` (exclusive; None: the last byte) in chunks of
        at most ``chunk_size``, fetching no more than that range; :class:`BlobNotFound` on
        first read. A range past the end yields what exists (possibly nothing)."""
        ...

    async def head(self, key: str) -> BlobInfo | None:
        """Size, etag, content type and (where recorded) sha256, or None when absent."""
        ...

    async def delete(self, key: str) -> None:
        """Remove the object; deleting an absent key is not an error (at-least-once callers)."""
        ...

    def list_objects(self, prefix: str) -> AsyncIterator[Listed]:
        """Every object whose key starts with ``prefix``, in key order (reconciliation:
        the orphan scanner compares them with the asset rows)."""
        ...

    async def close(self) -> None:
        """Release clients and files; the store is unusable afterwards."""
        ...

    async def presign_get(self, key: str, expires_s: int) -> str:
        """A URL anyone holding it may GET for ``expires_s`` seconds (a bearer capability)."""
        ...

    async def presign_put(
        self,
        key: str,
        expires_s: int,
        content_type: str = DEFAULT_CONTENT_TYPE,
        *,
        size: int | None = None,
        sha256: str | None = None,
    ) -> PresignedPut:
        """A signed upload of one object to ``key``, refused after ``expires_s`` seconds, with
        another content type, or, when given, another exact ``size`` or ``sha256`` (hex)."""
        ...


class MultipartUploads(Protocol):
    """Large objects uploaded by clients in parts, each part retried on its own."""

    async def create_multipart(self, key: str, content_type: str = DEFAULT_CONTENT_TYPE) -> str:
        """Start an upload to ``key``; returns its upload id."""
        ...

    async def presign_part(self, key: str, upload_id: str, part_no: int, expires_s: int) -> str:
        """A URL to PUT part ``part_no`` (1-10 000); the response's ETag goes to completion."""
        ...

    async def complete_multipart(self, key: str, upload_id: str, parts: Parts) -> BlobInfo:
        """Join ``parts`` in part order into the object; :class:`UploadRejected` if a part is
        missing, its etag differs, or a part but the last is below ``min_part_size``."""
        ...

    async def abort_multipart(self, key: str, upload_id: str) -> None:
        """Drop the upload and its parts; aborting an unknown upload is not an error."""
        ...


async def file_chunks(path: Path, chunk_size: int = CHUNK_SIZE) -> AsyncIterator[bytes]:
    """A local file as :data:`Data` for :meth:`BlobStore.put`: read in chunks in a worker
    thread, so a large file is never whole in memory and never stalls the event loop."""
    handle = await asyncio.to_thread(path.open, "rb")
    try:
        while chunk := await asyncio.to_thread(handle.read, chunk_size):
            yield chunk
    finally:
        await asyncio.to_thread(handle.close)


class ObjectTooLarge(PermanentError):
    """An object read by :func:`download` ran past the size its caller allows."""


@dataclass(frozen=True)
class Downloaded:
    """What :func:`download` wrote: the byte count and the sha256 (lowercase hex)."""

    size: int
    sha256: str


async def download(
    store: BlobStore, key: str, dest: Path, *, max_bytes: int | None = None
) -> Downloaded:
    """Stream the object at ``key`` into a new file ``dest``, never whole in memory and
    never writing on the event loop, hashing it on the way. Raises BlobNotFound, and
    ObjectTooLarge as soon as more than ``max_bytes`` arrived (the rest is not read)."""
    digest, size = hashlib.sha256(), 0
    handle = await asyncio.to_thread(dest.open, "xb")
    try:
        async for chunk in store.stream(key):
            size += len(chunk)
            if max_bytes is not None and size > max_bytes:
                raise ObjectTooLarge(f"{key}: more than {max_bytes} bytes")
            digest.update(chunk)
            await asyncio.to_thread(handle.write, chunk)
    finally:
        await asyncio.to_thread(handle.close)
    return Downloaded(size, digest.hexdigest())


def check_expires(expires_s: int) -> int:
    """``expires_s`` if it is 1 to :data:`MAX_EXPIRES_S` seconds, else ``ValueError``."""
    if isinstance(expires_s, bool) or not isinstance(expires_s, int):
        raise ValueError(f"expires_s must be an int, got {expires_s!r}")
    if not 1 <= expires_s <= MAX_EXPIRES_S:
        raise ValueError(f"expires_s must be 1..{MAX_EXPIRES_S}, got {expires_s}")
    return expires_s


def check_content_type(value: str) -> str:
    """``value`` if it is 1-255 printable ASCII characters (a header value), else ``ValueError``."""
    if not isinstance(value, str) or not 0 < len(value) <= 255:
        raise ValueError(f"content type {value!r} must be 1-255 characters")
    if not value.isascii() or not value.isprintable():
        raise ValueError(f"content type {value!r} must be printable ASCII")
    return value


def check_size(size: int) -> int:
    """``size`` if it is a non-negative int, else ``ValueError``."""
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise ValueError(f"size must be a non-negative int, got {size!r}")
    return size


def check_sha256(value: str) -> str:
    """``value`` if it is a sha256 digest in lowercase hex, else ``ValueError``."""
    if not isinstance(value, str) or not _SHA256_HEX.fullmatch(value):
        raise ValueError(f"sha256 must be 64 lowercase hex digits, got {value!r}")
    return value


def check_part_no(part_no: int, features: Features) -> int:
    """``part_no`` if it is 1 to ``features.max_parts``, else ``ValueError``."""
    if isinstance(part_no, bool) or not isinstance(part_no, int):
        raise ValueError(f"part_no must be an int, got {part_no!r}")
    if not 1 <= part_no <= features.max_parts:
        raise ValueError(f"part_no must be 1..{features.max_parts}, got {part_no}")
    return part_no


def check_parts(parts: Parts, features: Features) -> list[tuple[int, str]]:
    """Parts sorted by number, etags unquoted; ``UploadRejected`` if empty or repeated."""
    if not parts:
        raise UploadRejected("a multipart upload needs at least one part")
    ordered = sorted((check_part_no(n, features), plain_etag(e)) for n, e in parts)
    numbers = [n for n, _ in ordered]
    if len(set(numbers)) != len(numbers):
        raise UploadRejected(f"part numbers repeat: {numbers}")
    return ordered


def check_range(start: int, end: int | None) -> None:
    """``ValueError`` unless ``0 <= start`` and, when given, ``start <= end``."""
    if isinstance(start, bool) or not isinstance(start, int) or start < 0:
        raise ValueError(f"start must be a non-negative int, got {start!r}")
    if end is not None and (isinstance(end, bool) or not isinstance(end, int) or end < start):
        raise ValueError(f"end must be an int >= start ({start}), got {end!r}")


def plain_etag(etag: str) -> str:
    """An etag without the quotes HTTP puts around it."""
    return etag.strip().strip('"')
