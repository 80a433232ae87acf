"""Source videos on their way in: upload sessions straight to the object store, in parts
(the media plane's sessions, ``aigc_hub.blobs.multipart``); the bytes never pass through the
API.

:func:`start_upload` opens the store's multipart upload and answers a signed PUT per part,
:func:`part_urls` re-signs parts whose URL ran out, and :func:`complete_upload` joins the
parts and checks what arrived (the declared size, the sha256 when declared and the store
knows it, and a video container by its first bytes: the declared type is never trusted),
leaving the session ``uploaded`` or ``rejected`` with the reason. A video is made of an
``uploaded`` session (``services.create_video``). Each move is a guarded update, so a
repeated complete answers the same session::

    uploading ──complete──▶ uploaded
        └────────────────▶ rejected
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import StrEnum
from typing import Any, Final, cast

import pydantic
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from aigc_hub.blobs import keys, multipart
from aigc_hub.blobs.multipart import CompletedPart, UploadPlan
from aigc_hub.core import errors
from aigc_hub.core.ids import new_id
from aigc_hub.store.engine import reader

from .models import vistack_uploads
from .state import Vistack

#: Containers a source video may come in (sniffed from its first bytes).
VIDEO_KINDS: Final = frozenset({"mp4", "mov", "webm", "mkv"})
#: The key kind of sources under the tenant's prefix.
SOURCE_KIND: Final = "vistack"
UPLOAD_ID: Final = r"^upl_[0-9a-f]{32}$"
#: What sources are stored as: the declared type is not trusted.
STORED_TYPE: Final = "application/octet-stream"


class UploadStatus(StrEnum):
    UPLOADING = "uploading"
    UPLOADED = "uploaded"
    REJECTED = "rejected"


class StartUpload(pydantic.BaseModel):
    """The source video about to be uploaded."""

    model_config = pydantic.ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"size_bytes": 52428800, "part_size": 8388608}]},
    )

    size_bytes: int = pydantic.Field(ge=1, description="the whole file's exact size")
    sha256: str | None = pydantic.Field(
        None, pattern=r"^[0-9a-fA-F]{64}$", description="hex sha256 of the file, checked if given"
    )
    part_size: int | None = pydantic.Field(
        None, ge=1, description="bytes per part but the last (default 8 MiB, at least 5 MiB)"
    )


class UploadStarted(pydantic.BaseModel):
    """A new upload session and where its parts go."""

    upload_id: str
    upload: UploadPlan


class UploadView(pydantic.BaseModel):
    """An upload session: ``uploaded`` ones become videos, ``rejected`` ones say why."""

    upload_id: str
    status: UploadStatus
    size_bytes: int
    reason: str | None = None
    created_at: int


class UploadNotFound(errors.NotFound):
    """No upload of this tenant has this id."""

    def __init__(self, upload_id: str) -> None:
        super().__init__(f"upload {upload_id} not found")


class UploadNotOpen(errors.Conflict):
    """The session takes no more parts (completed or rejected)."""

    def __init__(self, upload_id: str, status: str) -> None:
        super().__init__(f"upload {upload_id} is {status}; it takes no more parts")


def source_key(tenant_id: str, upload_id: str) -> str:
    """Where an upload's source video is stored."""
    return keys.object_key(tenant_id, SOURCE_KIND, upload_id, "source")


def store_of(vs: Vistack) -> multipart.MultipartStore:
    # Both engines implement the multipart protocol; the seam's type keeps them apart.
    return cast(multipart.MultipartStore, vs.store)


def view(row: Mapping[str, Any]) -> UploadView:
    return UploadView(
        upload_id=row["id"],
        status=UploadStatus(row["status"]),
        size_bytes=row["size_bytes"],
        reason=row["reason"],
        created_at=row["created_at"],
    )


async def load(conn: AsyncConnection, tenant_id: str, upload_id: str) -> dict[str, Any]:
    """The tenant's upload row; UploadNotFound for another tenant's or none."""
    t = vistack_uploads
    row = (
        (await conn.execute(sa.select(t).where(t.c.id == upload_id, t.c.tenant_id == tenant_id)))
        .mappings()
        .first()
    )
    if row is None:
        raise UploadNotFound(upload_id)
    return dict(row)


async def start_upload(vs: Vistack, *, tenant_id: str, body: StartUpload) -> UploadStarted:
    """Open a session for ``body.size_bytes``; InvalidInput past the size limit or for a part
    size the store cannot take. The store's multipart upload is aborted when the row cannot
    be written."""
    limit = vs.settings.max_upload_bytes
    if body.size_bytes > limit:
        raise errors.InvalidInput(
            "size_bytes", f"a source video is at most {limit} bytes, not {body.size_bytes}"
        )
    store, hub = store_of(vs), vs.hub
    part_size = body.part_size or vs.settings.upload_part_size
    parts = multipart.plan(store, body.size_bytes, part_size)
    upload_id = f"upl_{new_id().hex}"
    key = source_key(tenant_id, upload_id)
    multipart_id = await store.create_multipart(key, STORED_TYPE)
    now = hub.clock.now_ms()
    try:
        async with hub.transaction() as conn:
            await conn.execute(
                vistack_uploads.insert().values(
                    id=upload_id,
                    tenant_id=tenant_id,
                    source_key=key,
                    multipart_id=multipart_id,
                    size_bytes=body.size_bytes,
                    sha256=body.sha256.lower() if body.sha256 else None,
                    part_size=part_size,
                    status=UploadStatus.UPLOADING.value,
                    created_at=now,
                    updated_at=now,
                )
            )
    except BaseException:
        await store.abort_multipart(key, multipart_id)
        raise
    expires_s = vs.settings.upload_url_ttl_s
    urls = await multipart.part_urls(store, key, multipart_id, range(1, parts + 1), expires_s)
    plan = UploadPlan(part_size=part_size, parts=urls, expires_at=now // 1000 + expires_s)
    return UploadStarted(upload_id=upload_id, upload=plan)


async def part_urls(
    vs: Vistack, *, tenant_id: str, upload_id: str, part_nos: Sequence[int]
) -> UploadPlan:
    """Fresh URLs for some parts of an open session (``part_size`` 0: the client keeps its
    own). UploadNotFound, UploadNotOpen, InvalidInput for a part number it cannot have."""
    async with reader(vs.hub.engine) as conn:
        row = await load(conn, tenant_id, upload_id)
    if row["status"] != UploadStatus.UPLOADING:
        raise UploadNotOpen(upload_id, row["status"])
    store = store_of(vs)
    highest = multipart.max_part_no(store, int(row["size_bytes"]))
    wrong = [n for n in part_nos if not 1 <= n <= highest]
    if wrong:
        raise errors.InvalidInput("part_nos", f"parts {wrong} are outside 1..{highest}")
    expires_s = vs.settings.upload_url_ttl_s
    urls = await multipart.part_urls(
        store, row["source_key"], row["multipart_id"], sorted(set(part_nos)), expires_s
    )
    expires_at = vs.hub.clock.now_ms() // 1000 + expires_s
    return UploadPlan(part_size=0, parts=urls, expires_at=expires_at)


async def complete_upload(
    vs: Vistack, *, tenant_id: str, upload_id: str, parts: Sequence[CompletedPart]
) -> UploadView:
    """Join the parts and check them: the session ``uploaded``, or ``rejected`` with the
    reason. Repeated after it ended, the same answer. UploadNotFound; PartsRejected (the
    session stays open: re-send parts, complete again)."""
    hub, store = vs.hub, store_of(vs)
    async with reader(hub.engine) as conn:
        row = await load(conn, tenant_id, upload_id)
    if row["status"] != UploadStatus.UPLOADING:
        return view(row)
    key = row["source_key"]
    try:
        info = await multipart.join(store, key, row["multipart_id"], parts)
    except multipart.SessionGone:
        raise UploadNotOpen(upload_id, "gone from the store") from None
    head = await multipart.head_bytes(store, key)
    reason, kind = multipart.rejection(
        info, size=row["size_bytes"], sha256=row["sha256"], head=head
    )
    if reason is None and kind not in VIDEO_KINDS:
        reason = f"not_a_video: the file is {kind}, not a video container"
    status = UploadStatus.UPLOADED if reason is None else UploadStatus.REJECTED
    t = vistack_uploads
    async with hub.transaction() as conn:
        await conn.execute(
            t.update()
            .where(t.c.id == upload_id, t.c.status == UploadStatus.UPLOADING.value)
            .values(
                status=status.value,
                reason=reason[:300] if reason else None,
                multipart_id=None,
                updated_at=hub.clock.now_ms(),
            )
        )
        ended = await load(conn, tenant_id, upload_id)
    if status is UploadStatus.REJECTED:
        await store.delete(key)  # nothing will be made of it
    return view(ended)
