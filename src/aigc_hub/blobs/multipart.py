"""Upload sessions straight to the blob store, in parts: the media plane's one way in for
large files, shared by every pipeline that takes uploads.

A session is the store's multipart upload behind a pipeline's own row: :func:`plan` checks
the part size against what the store takes, :func:`part_urls` signs one PUT per part (S3's
presigned part URLs; the embedded store's are the hub's own signed ``/blobs/...`` URLs, same
protocol), the client PUTs the parts and keeps each answer's ETag, :func:`join` makes the
object of them (again after a lost commit: it answers the object already joined), and
:func:`rejection` checks what arrived: the size, the sha256 where the store knows it, and the
magic number of the first bytes (:func:`head_bytes`, a ranged read) — the declared type is
never trusted. The pipeline keeps which session belongs to whom.

Abandoned sessions cost storage until aborted: on S3, give the bucket a lifecycle rule
(``AbortIncompleteMultipartUpload``); the embedded store keeps parts in its scratch folder.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Protocol

import pydantic

from aigc_hub.core import errors
from aigc_hub.media import sniff

from .base import BlobInfo, BlobNotFound, BlobStore, MultipartUploads, UploadRejected


class MultipartStore(BlobStore, MultipartUploads, Protocol):
    """A blob store with multipart uploads (both engines are)."""


class UploadPart(pydantic.BaseModel):
    """PUT part ``part_no``'s bytes to ``url`` with ``headers``; keep the answer's ETag."""

    part_no: int
    url: str
    headers: dict[str, str] = pydantic.Field(default_factory=dict)


class UploadPlan(pydantic.BaseModel):
    """How to send the file: parts of ``part_size`` bytes (the last may be shorter)."""

    part_size: int
    parts: list[UploadPart]
    expires_at: int = pydantic.Field(description="epoch seconds; ask for fresh URLs after it")


class CompletedPart(pydantic.BaseModel):
    """A part as its upload answered it."""

    part_no: int = pydantic.Field(ge=1)
    etag: str = pydantic.Field(min_length=1, max_length=200)


class PartsRejected(errors.InvalidInput):
    """The store refused the part list (missing part, wrong ETag, a part too small)."""


class SessionGone(errors.Conflict):
    """The store has neither the multipart upload nor the object it would have made."""


def part_count(size: int, part_size: int) -> int:
    """Parts of ``part_size`` bytes a file of ``size`` bytes needs (at least one)."""
    return max(1, math.ceil(size / part_size))


def plan(store: MultipartStore, size: int, part_size: int, *, field: str = "part_size") -> int:
    """The part count of ``size`` bytes in ``part_size`` parts; InvalidInput (on ``field``)
    when the store cannot take parts that small or that many."""
    features = store.features
    if part_size < features.min_part_size and part_size < size:
        raise errors.InvalidInput(
            field, f"parts but the last must be at least {features.min_part_size} B"
        )
    parts = part_count(size, part_size)
    if parts > features.max_parts:
        raise errors.InvalidInput(
            field, f"{parts} parts; the store takes at most {features.max_parts}"
        )
    return parts


def max_part_no(store: MultipartStore, size: int) -> int:
    """The highest part number an upload of ``size`` bytes can need (smallest parts)."""
    features = store.features
    return min(features.max_parts, part_count(size, features.min_part_size))


async def part_urls(
    store: MultipartStore, key: str, upload_id: str, part_nos: Iterable[int], expires_s: int
) -> list[UploadPart]:
    """A signed PUT per part number."""
    return [
        UploadPart(part_no=n, url=await store.presign_part(key, upload_id, n, expires_s))
        for n in part_nos
    ]


async def head_bytes(store: BlobStore, key: str) -> bytes:
    """The object's first bytes, by a ranged read (never the whole object)."""
    chunks = [c async for c in store.stream(key, sniff.SNIFF_BYTES, start=0, end=sniff.SNIFF_BYTES)]
    return b"".join(chunks)


async def join(
    store: MultipartStore, key: str, upload_id: str, parts: Sequence[CompletedPart]
) -> BlobInfo:
    """Join ``parts`` into the object at ``key``. When the upload is gone because an earlier
    join made the object (and the caller's commit was lost), the object. PartsRejected for a
    part list the store refuses (the session stays open: re-send parts, join again);
    SessionGone when there is neither."""
    try:
        return await store.complete_multipart(key, upload_id, [(p.part_no, p.etag) for p in parts])
    except UploadRejected as exc:
        raise PartsRejected("parts", str(exc)) from None
    except BlobNotFound:
        info = await store.head(key)
        if info is None:
            raise SessionGone(f"no upload in progress and no object at {key}") from None
        return info


def rejection(
    info: BlobInfo, *, size: int, sha256: str | None, head: bytes
) -> tuple[str | None, str | None]:
    """(reason, sniffed kind) of what arrived: reason None when it is what was declared and
    a media format the hub accepts."""
    kind = sniff.sniff(head)
    if info.size != size:
        return f"size_mismatch: {info.size} bytes, {size} declared", kind
    if sha256 is not None and info.sha256 is not None and info.sha256 != sha256.lower():
        return "checksum_mismatch", kind
    if kind is None:
        return "unknown_format: the first bytes are no accepted media format", None
    return None, kind
