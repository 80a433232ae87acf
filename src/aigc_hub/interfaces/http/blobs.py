"""``/blobs/...``: the local blob engine's signed URLs, served by the API (a store whose
``features.urls_served_by_hub`` says so; S3's URLs go to S3 and this is not mounted).

* ``PUT`` an object or one multipart part: the body is streamed into the store (never held
  whole), answered with its ``ETag``;
* ``GET`` with ``Range`` (one range; a ``<video>`` element seeks with them) and ``HEAD``.

The URL's signature, expiry and operation are the authorization: no API key. A refused
signature is a 403 problem (``signature-refused`` / ``signature-expired``), a body breaking
the signed size or part rules a 400, an absent object a 404. The app's body limit does not
apply here (a part is megabytes); :data:`MAX_BODY_BYTES` does, counted as bytes arrive.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Mapping
from typing import Protocol, runtime_checkable

from fastapi import APIRouter, Request, Response
from fastapi.responses import StreamingResponse
from starlette.requests import ClientDisconnect

from aigc_hub.blobs.base import (
    CHUNK_SIZE,
    BlobInfo,
    BlobNotFound,
    Data,
    SignatureExpired,
    SignatureInvalid,
    UploadRejected,
)
from aigc_hub.blobs.local import Grant
from aigc_hub.interfaces.http.problems import Problem

#: Where the routes live (the local engine's default ``base_url``).
PREFIX = "/blobs"
#: Largest body one PUT may carry: S3's largest part.
MAX_BODY_BYTES = 5 << 30
_RANGE = re.compile(r"bytes=(\d*)-(\d*)")


@runtime_checkable
class HubServedBlobs(Protocol):
    """What these routes need of a store whose signed URLs point at the hub."""

    def check_url(self, url: str, *ops: str) -> Grant:
        """The grant of a signed URL for one of ``ops``; SignatureError otherwise."""
        ...

    async def apply_signed_put(
        self, url: str, body: Data, headers: Mapping[str, str] | None = None
    ) -> str:
        """Verify and store a signed PUT's body; its ETag."""
        ...

    async def head(self, key: str) -> BlobInfo | None:
        """The object's facts, or None."""
        ...

    def stream(
        self, key: str, chunk_size: int = CHUNK_SIZE, *, start: int = 0, end: int | None = None
    ) -> AsyncIterator[bytes]:
        """The object's bytes ``start`` to ``end`` in chunks."""
        ...


def _refused(exc: Exception) -> Problem:
    if isinstance(exc, SignatureExpired):
        return Problem(403, "the signed URL has expired", slug="signature-expired")
    if isinstance(exc, SignatureInvalid):
        return Problem(403, str(exc) or "the signed URL is refused", slug="signature-refused")
    if isinstance(exc, UploadRejected):
        return Problem(400, str(exc), slug="upload-rejected")
    if isinstance(exc, BlobNotFound):
        return Problem(404, "no such object")
    return Problem(400, str(exc), slug="bad-blob-request")


_REFUSALS = (SignatureExpired, SignatureInvalid, UploadRejected, BlobNotFound, ValueError)


def _range(header: str | None, size: int) -> tuple[int, int] | None:
    """(start, end exclusive) of a single ``bytes=`` range, None for the whole object (no
    header, several ranges, or another unit: ignoring Range is allowed); a 416 problem when
    it cannot be satisfied."""
    if not header:
        return None
    match = _RANGE.fullmatch(header.strip())
    if match is None:
        return None
    first, last = match.groups()
    if not first and not last:
        return None
    if not first:  # the last N bytes
        start, end = max(0, size - int(last)), size
    else:
        start = int(first)
        end = size if not last else min(size, int(last) + 1)
    if start >= size or end <= start:
        raise Problem(
            416,
            f"range {header!r} is outside the {size} bytes",
            slug="range-not-satisfiable",
            headers={"Content-Range": f"bytes */{size}"},
        )
    return start, end


def router(store: HubServedBlobs) -> APIRouter:
    """The routes serving ``store``'s signed URLs (mount without a prefix)."""
    routes = APIRouter(prefix=PREFIX, include_in_schema=False)

    @routes.put("/{key:path}")
    async def put(key: str, request: Request) -> Response:
        url = str(request.url)
        try:
            store.check_url(url, "put", "part")  # refuse before reading a byte
        except _REFUSALS as exc:
            raise _refused(exc) from None

        async def body() -> AsyncIterator[bytes]:
            received = 0
            async for chunk in request.stream():
                received += len(chunk)
                if received > MAX_BODY_BYTES:
                    raise UploadRejected(f"body larger than {MAX_BODY_BYTES} bytes")
                yield chunk

        try:
            etag = await store.apply_signed_put(url, body(), request.headers)
        except _REFUSALS as exc:
            raise _refused(exc) from None
        except ClientDisconnect:
            # nothing was stored (the store discards a partial body); nobody is listening
            return Response(status_code=400)
        return Response(status_code=200, headers={"ETag": f'"{etag}"'})

    async def _object(key: str, request: Request) -> tuple[Grant, BlobInfo]:
        try:
            grant = store.check_url(str(request.url), "get")
        except _REFUSALS as exc:
            raise _refused(exc) from None
        info = await store.head(grant.key)
        if info is None:
            raise _refused(BlobNotFound(grant.key))
        return grant, info

    def _headers(info: BlobInfo, span: tuple[int, int] | None) -> dict[str, str]:
        start, end = span or (0, info.size)
        headers = {
            "Accept-Ranges": "bytes",
            "Content-Length": str(end - start),
            "ETag": f'"{info.etag}"',
            "Cache-Control": "private, max-age=60",
        }
        if span is not None:
            headers["Content-Range"] = f"bytes {start}-{end - 1}/{info.size}"
        return headers

    @routes.get("/{key:path}")
    async def get(key: str, request: Request) -> Response:
        grant, info = await _object(key, request)
        span = _range(request.headers.get("range"), info.size)
        start, end = span or (0, info.size)
        return StreamingResponse(
            store.stream(grant.key, start=start, end=end),
            status_code=200 if span is None else 206,
            media_type=info.content_type,
            headers=_headers(info, span),
        )

    @routes.head("/{key:path}")
    async def head(key: str, request: Request) -> Response:
        _grant, info = await _object(key, request)
        span = _range(request.headers.get("range"), info.size)
        return Response(
            status_code=200 if span is None else 206,
            media_type=info.content_type,
            headers=_headers(info, span),
        )

    return routes
