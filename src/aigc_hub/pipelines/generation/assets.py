"""Assets a tenant uploads straight to the blob store (seed 004 §3.3.3-3, §3.4 steps 1–6,
§3.6.1): start, re-sign parts, complete, read; and the reference check task creation uses.

The bytes never pass through the API on S3: :func:`start_upload` answers presigned multipart
part URLs (the local engine's are the hub's own signed ``/blobs/...`` URLs, same protocol),
the client PUTs the parts, and :func:`complete_upload` joins them, checks the size, the
sha256 where the store knows it, and the magic number of the first bytes (a ranged read of
64 bytes; the declared Content-Type is never trusted), then moves the asset to
``PROCESSING`` and stages ``asset.uploaded`` in the same transaction. The probe handler
(``handlers/asset_probe.py``) makes it ``READY`` or ``REJECTED``.

Statuses move only forward, each move a guarded update (``WHERE status = :from``)::

    UPLOADING ──complete──▶ PROCESSING ──probe──▶ READY
        │                       │
        └──────────────▶ REJECTED ◀┘          (any of them ──▶ DELETED)

Per-tenant limits count the tenant's uploads that are not REJECTED or DELETED: the size of
one asset (413), how many (409) and their total bytes (429). They are checked again in the
creating transaction, with the tenant's row locked on PostgreSQL (SQLite's write lock does
the same), so two uploads at once cannot both pass the last free slot.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import StrEnum
from typing import Any, Final, Literal, cast

import pydantic
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from aigc_hub.blobs import keys, multipart
from aigc_hub.blobs.base import BlobInfo
from aigc_hub.blobs.multipart import CompletedPart, PartsRejected, UploadPart, UploadPlan
from aigc_hub.core import errors, ids
from aigc_hub.core.envelope import Envelope
from aigc_hub.media import sniff
from aigc_hub.pipelines.generation import events
from aigc_hub.pipelines.generation.models import assets
from aigc_hub.pipelines.generation.state import Generation
from aigc_hub.store import tables
from aigc_hub.store.engine import reader

#: The bucket column of every asset row (the store itself knows its real bucket).
BUCKET: Final = "hub"
#: The kind segment of uploaded objects' keys (``t/<tenant>/asset/<asset_id>/<file>``).
KEY_KIND: Final = "asset"
#: What uploaded objects are stored as: the declared type is not trusted, the sniffed one is
#: recorded in the row.
STORED_TYPE: Final = "application/octet-stream"
FIELD_REFERENCES: Final = "reference_asset_ids"


class AssetStatus(StrEnum):
    """Where an asset is in its life (see the module's diagram)."""

    UPLOADING = "UPLOADING"
    PROCESSING = "PROCESSING"
    READY = "READY"
    REJECTED = "REJECTED"
    DELETED = "DELETED"


class AssetKind(StrEnum):
    """Where an asset came from."""

    UPLOAD = "upload"
    GENERATED_VIDEO = "generated_video"
    VARIANT = "variant"


#: Statuses whose assets count against the tenant's limits.
HELD: Final = (AssetStatus.UPLOADING, AssetStatus.PROCESSING, AssetStatus.READY)


Store = multipart.MultipartStore
__all__ = ["CompletedPart", "PartsRejected", "UploadPart", "UploadPlan"]  # the API's models


# -- requests and answers --------------------------------------------------------------------


class StartUpload(pydantic.BaseModel):
    """What a client declares before uploading; only the sha256 and the size are binding."""

    model_config = pydantic.ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "filename": "reference.mp4",
                    "content_type": "video/mp4",
                    "size_bytes": 52428800,
                    "sha256": "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
                    "part_size": 8388608,
                }
            ]
        },
    )

    filename: str = pydantic.Field(min_length=1, max_length=255)
    content_type: str = pydantic.Field(
        min_length=1, max_length=255, description="declared, never trusted: the bytes decide"
    )
    size_bytes: int = pydantic.Field(ge=1, description="the whole file's size")
    sha256: str = pydantic.Field(
        pattern=r"^[0-9a-fA-F]{64}$", description="hex sha256 of the whole file"
    )
    part_size: int | None = pydantic.Field(
        None, ge=1, description="bytes per part but the last (default 8 MiB, at least 5 MiB)"
    )


class UploadStarted(pydantic.BaseModel):
    """A new ``UPLOADING`` asset and where its parts go."""

    asset_id: str
    upload: UploadPlan


class PartsRequest(pydantic.BaseModel):
    """Parts that need a (fresh) URL, e.g. one that failed after its URL expired."""

    model_config = pydantic.ConfigDict(
        extra="forbid", json_schema_extra={"examples": [{"part_nos": [3]}]}
    )
    part_nos: list[int] = pydantic.Field(min_length=1, max_length=1000)


class CompleteUpload(pydantic.BaseModel):
    """Every part, with the ETag each PUT answered."""

    model_config = pydantic.ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [{"parts": [{"part_no": 1, "etag": "9b2cf535f27731c974343645a3985328"}]}]
        },
    )
    parts: list[CompletedPart] = pydantic.Field(min_length=1, max_length=10_000)


class AssetView(pydantic.BaseModel):
    """An asset as its tenant sees it: facts and object-free ids, never a URL."""

    asset_id: str
    kind: str
    status: str
    status_reason: str | None = None
    content_type: str | None = None
    size_bytes: int | None = None
    sha256: str | None = None
    width: int | None = None
    height: int | None = None
    duration_ms: int | None = None
    frame_rate_num: int | None = None
    frame_rate_den: int | None = None
    codec: str | None = None
    audio_codec: str | None = None
    source_asset_id: str | None = None
    variant_profile: str | None = None
    task_id: str | None = None
    created_at_ms: int
    updated_at_ms: int | None = None


class AssetList(pydantic.BaseModel):
    """Assets, oldest first."""

    items: list[AssetView]


# -- errors ----------------------------------------------------------------------------------


class AssetNotFound(errors.NotFound):
    """No asset with this id for this tenant (another tenant's ids look the same)."""


class AssetLimitExceeded(errors.Conflict):
    """The upload would pass one of the tenant's asset limits."""

    def __init__(self, limit: Literal["size", "count", "total_bytes"], allowed: int, asked: int):
        self.limit = limit
        self.allowed = allowed
        self.asked = asked
        what = {"size": "asset size", "count": "asset count", "total_bytes": "total asset bytes"}
        super().__init__(f"{what[limit]} would be {asked}, above the tenant's limit of {allowed}")


class UploadNotOpen(errors.Conflict):
    """The asset is not taking parts any more (completed, rejected or deleted)."""

    def __init__(self, status: str) -> None:
        self.status = status
        super().__init__(f"the asset is {status}; its upload is closed")


class NoBlobStore(errors.ConfigurationError):
    """The hub was built without a blob store: nothing can be uploaded or played."""


# -- rows ------------------------------------------------------------------------------------


def view(row: Mapping[str, Any]) -> dict[str, Any]:
    """The public view of an asset row (:class:`AssetView`'s fields)."""
    return {
        "asset_id": row["id"],
        "kind": row["kind"],
        "status": row["status"],
        "status_reason": row["status_reason"],
        "content_type": row["content_type"],
        "size_bytes": row["size_bytes"],
        "sha256": row["checksum_value"] if row["checksum_algo"] == "sha256" else None,
        "width": row["width"],
        "height": row["height"],
        "duration_ms": row["duration_ms"],
        "frame_rate_num": row["frame_rate_num"],
        "frame_rate_den": row["frame_rate_den"],
        "codec": row["codec"],
        "audio_codec": row["audio_codec"],
        "source_asset_id": row["source_asset_id"],
        "variant_profile": row["variant_profile"],
        "task_id": row["task_id"],
        "created_at_ms": row["created_at"],
        "updated_at_ms": row["updated_at"],
    }


async def load(conn: AsyncConnection, asset_id: str) -> dict[str, Any] | None:
    """The asset row, whoever owns it (handlers and playback tokens); None when unknown."""
    row = (await conn.execute(sa.select(assets).where(assets.c.id == asset_id))).first()
    return None if row is None else dict(row._mapping)


async def asset_for_tenant(
    conn: AsyncConnection, tenant_id: str, asset_id: str
) -> Mapping[str, Any] | None:
    """The tenant's asset row; None when unknown, another tenant's, or deleted."""
    row = await load(conn, asset_id)
    if row is None or row["tenant_id"] != tenant_id or row["status"] == AssetStatus.DELETED:
        return None
    return row


async def check_reference_assets(
    conn: AsyncConnection, tenant_id: str, asset_ids: Sequence[str]
) -> None:
    """Raise InvalidInput naming the first id that is unknown, another tenant's, not READY, or
    rejected by moderation; nothing otherwise. One query; meant for a creating transaction."""
    if not asset_ids:
        return
    rows = (
        await conn.execute(
            sa.select(
                assets.c.id, assets.c.tenant_id, assets.c.status, assets.c.moderation_verdict
            ).where(assets.c.id.in_(list(set(asset_ids))))
        )
    ).all()
    found = {r.id: r for r in rows}
    for asset_id in asset_ids:
        row = found.get(asset_id)
        if row is None or row.tenant_id != tenant_id or row.status == AssetStatus.DELETED:
            # another tenant's id reads exactly like an unknown one
            raise errors.InvalidInput(FIELD_REFERENCES, f"unknown asset id {asset_id!r}")
        if row.status != AssetStatus.READY:
            raise errors.InvalidInput(
                FIELD_REFERENCES, f"asset {asset_id!r} is {row.status}, not READY"
            )
        if row.moderation_verdict == "reject":
            raise errors.InvalidInput(
                FIELD_REFERENCES, f"asset {asset_id!r} was rejected by moderation"
            )


async def move(
    conn: AsyncConnection,
    asset_id: str,
    source: AssetStatus,
    to: AssetStatus,
    *,
    now_ms: int,
    values: Mapping[str, Any] | None = None,
) -> bool:
    """Move the asset from ``source`` to ``to`` (guarded); False when it was not in ``source``
    any more (a duplicate or a lost race: re-read, never overwrite)."""
    moved = await conn.execute(
        assets.update()
        .where(assets.c.id == asset_id, assets.c.status == source.value)
        .values(status=to.value, updated_at=now_ms, **(values or {}))
        .returning(assets.c.id)
    )
    return moved.scalar_one_or_none() is not None


def store_of(gen: Generation) -> Store:
    """The hub's blob store; NoBlobStore when the hub has none."""
    if gen.hub.blobs is None:
        raise NoBlobStore("the hub has no blob store: assets cannot be kept")
    # Both engines implement the multipart protocol; the seam's type keeps them apart.
    return cast(Store, gen.hub.blobs)


# -- commands --------------------------------------------------------------------------------


async def _usage(conn: AsyncConnection, tenant_id: str) -> tuple[int, int]:
    """(count, bytes) of the tenant's held uploads."""
    row = (
        await conn.execute(
            sa.select(sa.func.count(), sa.func.coalesce(sa.func.sum(assets.c.size_bytes), 0)).where(
                assets.c.tenant_id == tenant_id,
                assets.c.kind == AssetKind.UPLOAD.value,
                assets.c.status.in_([s.value for s in HELD]),
            )
        )
    ).one()
    return int(row[0]), int(row[1])


def _check_usage(gen: Generation, count: int, total: int, size: int) -> None:
    settings = gen.settings
    if count + 1 > settings.asset_max_count:
        raise AssetLimitExceeded("count", settings.asset_max_count, count + 1)
    if total + size > settings.asset_max_total_bytes:
        raise AssetLimitExceeded("total_bytes", settings.asset_max_total_bytes, total + size)


async def start_upload(gen: Generation, *, tenant_id: str, body: StartUpload) -> dict[str, Any]:
    """Create an ``UPLOADING`` asset and its multipart upload; :class:`UploadStarted` fields.

    Raises AssetLimitExceeded (nothing kept) and InvalidInput for a part size the store
    cannot take. The multipart upload is aborted when the row cannot be written.
    """
    settings, store, hub = gen.settings, store_of(gen), gen.hub
    if body.size_bytes > settings.asset_max_bytes:
        raise AssetLimitExceeded("size", settings.asset_max_bytes, body.size_bytes)
    part_size = body.part_size or settings.asset_part_size
    parts = multipart.plan(store, body.size_bytes, part_size)
    async with reader(hub.engine) as conn:  # refuse early, before the store is asked
        _check_usage(gen, *await _usage(conn, tenant_id), body.size_bytes)
    asset_id = ids.new_id_str()
    key = keys.object_key(tenant_id, KEY_KIND, asset_id, keys.safe_filename(body.filename))
    upload_id = await store.create_multipart(key, STORED_TYPE)
    now = hub.clock.now_ms()
    try:
        async with hub.transaction() as conn:
            # Serializes a tenant's concurrent uploads on PostgreSQL (a no-op clause on
            # SQLite, whose write lock is already held by BEGIN IMMEDIATE).
            await conn.execute(
                sa.select(tables.tenants.c.id)
                .where(tables.tenants.c.id == tenant_id)
                .with_for_update()
            )
            _check_usage(gen, *await _usage(conn, tenant_id), body.size_bytes)
            await conn.execute(
                assets.insert().values(
                    id=asset_id,
                    tenant_id=tenant_id,
                    kind=AssetKind.UPLOAD.value,
                    object_bucket=BUCKET,
                    object_key=key,
                    size_bytes=body.size_bytes,
                    checksum_algo="sha256",
                    checksum_value=body.sha256.lower(),
                    status=AssetStatus.UPLOADING.value,
                    upload_id=upload_id,
                    created_at=now,
                    updated_at=now,
                )
            )
    except BaseException:
        await store.abort_multipart(key, upload_id)
        raise
    expires_s = settings.asset_upload_url_s
    urls = await multipart.part_urls(store, key, upload_id, range(1, parts + 1), expires_s)
    plan = {
        "part_size": part_size,
        "parts": [u.model_dump() for u in urls],
        "expires_at": now // 1000 + expires_s,
    }
    return {"asset_id": asset_id, "upload": plan}


async def _open_upload(gen: Generation, tenant_id: str, asset_id: str) -> dict[str, Any]:
    async with reader(gen.hub.engine) as conn:
        row = await asset_for_tenant(conn, tenant_id, asset_id)
    if row is None:
        raise AssetNotFound(asset_id)
    return dict(row)


async def part_urls(
    gen: Generation, *, tenant_id: str, asset_id: str, part_nos: Sequence[int]
) -> dict[str, Any]:
    """Fresh URLs for some parts of an upload in progress (:class:`UploadPlan` fields, with
    ``part_size`` 0: the client keeps its own). Raises AssetNotFound, UploadNotOpen, and
    InvalidInput for a part number the upload cannot have."""
    row = await _open_upload(gen, tenant_id, asset_id)
    if row["status"] != AssetStatus.UPLOADING:
        raise UploadNotOpen(row["status"])
    store = store_of(gen)
    highest = multipart.max_part_no(store, int(row["size_bytes"]))
    wrong = [n for n in part_nos if not 1 <= n <= highest]
    if wrong:
        raise errors.InvalidInput("part_nos", f"parts {wrong} are outside 1..{highest}")
    expires_s = gen.settings.asset_upload_url_s
    urls = await multipart.part_urls(
        store, row["object_key"], row["upload_id"], sorted(set(part_nos)), expires_s
    )
    now_s = gen.hub.clock.now_ms() // 1000
    return {
        "part_size": 0,
        "parts": [u.model_dump() for u in urls],
        "expires_at": now_s + expires_s,
    }


def rejection(row: Mapping[str, Any], info: BlobInfo, head: bytes) -> tuple[str | None, str]:
    """(reason, sniffed content type): reason is None when the upload may be probed."""
    reason, kind = multipart.rejection(
        info, size=row["size_bytes"], sha256=row["checksum_value"], head=head
    )
    if reason is not None or kind is None:
        return reason, STORED_TYPE
    return None, sniff.CONTENT_TYPES[kind]


async def complete_upload(
    gen: Generation, *, tenant_id: str, asset_id: str, parts: Sequence[CompletedPart]
) -> dict[str, Any]:
    """Join the parts and check them; the asset's view, now ``PROCESSING`` (probe pending,
    ``asset.uploaded`` staged in the same transaction) or ``REJECTED`` with a reason.

    Repeating it after it succeeded answers the current view. Raises AssetNotFound,
    PartsRejected (the asset stays ``UPLOADING``: re-send parts, complete again) and
    UploadNotOpen.
    """
    hub, store = gen.hub, store_of(gen)
    row = await _open_upload(gen, tenant_id, asset_id)
    if row["status"] != AssetStatus.UPLOADING:
        return view(row)  # completed before: the same answer
    try:
        info = await multipart.join(store, row["object_key"], row["upload_id"], parts)
    except multipart.SessionGone:
        raise UploadNotOpen("UPLOADING without its multipart upload") from None
    head = await multipart.head_bytes(store, row["object_key"])
    reason, content_type = rejection(row, info, head)
    now = hub.clock.now_ms()
    values: dict[str, Any] = {"upload_id": None, "content_type": content_type}
    async with hub.transaction() as conn:
        to = AssetStatus.PROCESSING if reason is None else AssetStatus.REJECTED
        if reason is not None:
            values["status_reason"] = reason[:300]
        moved = await move(conn, asset_id, AssetStatus.UPLOADING, to, now_ms=now, values=values)
        if moved and to is AssetStatus.PROCESSING:
            uploaded = Envelope.new(
                events.ASSET_UPLOADED,
                events.AssetUploaded(asset_id=asset_id, tenant_id=tenant_id).model_dump(),
                key=asset_id,
                source="generation.assets",
                tenant_id=tenant_id,
                correlation_id=asset_id,
            )
            await hub.outbox.add(conn, [uploaded])
        current = await load(conn, asset_id)
    assert current is not None
    return view(current)


# -- queries ---------------------------------------------------------------------------------


async def get_asset(gen: Generation, *, tenant_id: str, asset_id: str) -> dict[str, Any]:
    """The asset's view; AssetNotFound for unknown ids and other tenants' alike."""
    return view(await _open_upload(gen, tenant_id, asset_id))


async def list_variants(gen: Generation, *, tenant_id: str, asset_id: str) -> list[dict[str, Any]]:
    """The asset's variants (rows whose source is it), oldest first; AssetNotFound as above."""
    async with reader(gen.hub.engine) as conn:
        if await asset_for_tenant(conn, tenant_id, asset_id) is None:
            raise AssetNotFound(asset_id)
        rows = (
            await conn.execute(
                sa.select(assets)
                .where(
                    assets.c.source_asset_id == asset_id,
                    assets.c.tenant_id == tenant_id,
                    assets.c.status != AssetStatus.DELETED.value,
                )
                .order_by(assets.c.created_at, assets.c.id)
            )
        ).all()
    return [view(dict(r._mapping)) for r in rows]
