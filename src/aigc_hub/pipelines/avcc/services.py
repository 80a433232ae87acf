"""Commands and queries of avcc, shared by HTTP, the CLI and the handlers; each one unit of
work. ``apply`` is code-svc's precheck and creating transaction (seed 000 §9.2.1)."""

from __future__ import annotations

import hashlib
import re
import time
from typing import TYPE_CHECKING, Any

import pydantic
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from aigc_hub.blobs.base import BlobNotFound, BlobStore
from aigc_hub.blobs.keys import TENANT_PREFIX
from aigc_hub.core import errors, ids
from aigc_hub.core.envelope import Envelope
from aigc_hub.media.sniff import CONTENT_TYPES, SNIFF_BYTES, sniff
from aigc_hub.store.engine import reader

from . import events
from .codes import parse_code
from .events import AiToolInfo
from .models import avcc_record_events, avcc_records
from .records import snapshot
from .states import RecordStatus

if TYPE_CHECKING:
    from .state import Avcc

#: The works avcc codes, by the content type sniffed from their first bytes.
WORK_TYPES = frozenset({"image/jpeg", "image/png", "image/webp", "video/mp4", "text/plain"})
_REQUEST_ID = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


class Apply(pydantic.BaseModel):
    """An application for a code (§9.2.1's fields, as the tenant gives them)."""

    model_config = pydantic.ConfigDict(extra="forbid")

    content_url: str = pydantic.Field(
        min_length=1,
        max_length=1100,
        description="the work in the hub's store: `s3://<bucket>/<key>` or `blob:<key>`, a key "
        "under your tenant's prefix (`t/<tenant>/…`, e.g. what `POST /v1/avcc/works` returns)",
    )
    content_hash: str = pydantic.Field(
        pattern=r"^sha256:[0-9a-f]{64}$", description="sha256 of the work's bytes"
    )
    ai_tool_info: AiToolInfo
    priority: int = pydantic.Field(5, ge=1, le=9, description="1 (lowest) to 9; seed default 5")
    request_id: str | None = pydantic.Field(
        None, description="your id for the application (default: `req_<date>_<id>`)"
    )


class RecordNotFound(errors.NotFound):
    """No such application (or another tenant's)."""


class ContentRefused(errors.InvalidInput):
    """The precheck refused the work (the field and the reason say why)."""


class AlreadyApplied(errors.Conflict):
    """This tenant already has a live application for the same content."""

    def __init__(self, record_id: int) -> None:
        super().__init__(f"this content already has application {record_id}")
        self.record_id = record_id


def new_request_id(now_ms: int) -> str:
    """``req_<yyyymmdd>_<12 hex>``: the seed's form, unique without a counter."""
    day = time.strftime("%Y%m%d", time.gmtime(now_ms / 1000))
    return f"req_{day}_{ids.new_id().hex[-12:]}"


def object_key_of(content_url: str, tenant_id: str, store: BlobStore) -> str:
    """The store key ``content_url`` names, if it is this tenant's; ContentRefused if not.

    Another tenant's key is refused with the same words as a missing one (nothing leaks)."""
    if content_url.startswith("blob:"):
        key = content_url.removeprefix("blob:")
    elif content_url.startswith("s3://"):
        bucket, _, key = content_url.removeprefix("s3://").partition("/")
        ours = getattr(store, "bucket", None)  # only the S3 engine has one
        if ours is None or bucket != ours:
            raise ContentRefused("content_url", "not an object of this hub's store")
    else:
        raise ContentRefused("content_url", "expected s3://<bucket>/<key> or blob:<key>")
    if not key.startswith(f"{TENANT_PREFIX}/{tenant_id}/") or ".." in key:
        raise ContentRefused("content_url", "no such object of yours in the hub's store")
    return key


async def _stored_facts(store: BlobStore, key: str, max_bytes: int) -> tuple[str, int, str]:
    """sha256, size and sniffed content type of the stored object, read once as a stream."""
    digest, size, head = hashlib.sha256(), 0, b""
    try:
        async for chunk in store.stream(key):
            if len(head) < SNIFF_BYTES:
                head += chunk[: SNIFF_BYTES - len(head)]
            size += len(chunk)
            if size > max_bytes:
                raise ContentRefused("content_url", f"the work is larger than {max_bytes} bytes")
            digest.update(chunk)
    except BlobNotFound:
        raise ContentRefused("content_url", "no such object of yours in the hub's store") from None
    kind = sniff(head)
    content_type = CONTENT_TYPES.get(kind, "") if kind else _text_type(head)
    if content_type not in WORK_TYPES:
        raise ContentRefused(
            "content_url", "not a work avcc codes: JPEG, PNG, WebP, MP4 or UTF-8 text"
        )
    return f"sha256:{digest.hexdigest()}", size, content_type


def _text_type(head: bytes) -> str:
    """``text/plain`` for bytes that start as UTF-8 text without control characters."""
    try:
        text = head.decode("utf-8", errors="strict")
    except UnicodeDecodeError:
        # The sniffed head may end inside a multi-byte character: retry without the tail.
        try:
            text = head[:-3].decode("utf-8", errors="strict")
        except UnicodeDecodeError:
            return ""
    if not text or any(ord(c) < 32 and c not in "\t\r\n" for c in text):
        return ""
    return "text/plain"


async def apply(avcc: Avcc, *, tenant_id: str, body: Apply, idempotency_key: str) -> dict[str, Any]:
    """Precheck, then the record and ``topic.avcc.apply.created`` in one transaction.

    The precheck: the object is the tenant's and exists, its bytes hash to ``content_hash``,
    the declaration is complete, and no live application of the tenant has the same content
    (AlreadyApplied, 409). The same ``(tenant, idempotency_key)`` answers the existing record.
    """
    hub = avcc.hub
    existing = await _by_idempotency_key(avcc, tenant_id, idempotency_key)
    if existing is not None:
        return existing
    if body.request_id is not None and not _REQUEST_ID.fullmatch(body.request_id):
        raise ContentRefused("request_id", "1-64 of A-Z a-z 0-9 _ . -")
    if not body.ai_tool_info.model_name.strip() or not body.ai_tool_info.model_version.strip():
        raise ContentRefused("ai_tool_info", "the declaration names the model and its version")
    store = avcc.store
    key = object_key_of(body.content_url, tenant_id, store)
    stored_hash, size, content_type = await _stored_facts(
        store, key, avcc.settings.max_content_bytes
    )
    if stored_hash != body.content_hash:
        raise ContentRefused("content_hash", "does not match the stored bytes")
    now = hub.clock.now_ms()
    row: dict[str, Any] = {
        "request_id": body.request_id or new_request_id(now),
        "tenant_id": tenant_id,
        "idempotency_key": idempotency_key,
        "content_url": body.content_url,
        "object_key": key,
        "content_hash": body.content_hash,
        "live_content_hash": body.content_hash,
        "content_type": content_type,
        "size_bytes": size,
        "model_name": body.ai_tool_info.model_name.strip(),
        "model_version": body.ai_tool_info.model_version.strip(),
        "priority": body.priority,
        "status": RecordStatus.APPLIED.value,
        "status_version": 0,
        "created_at": now,
        "updated_at": now,
    }
    # Written as NULL, listed so the row is the whole snapshot (no read-back below).
    empty = ["status_reason", "decision", "final_level", "overall_score", "review_report_id"]
    empty += ["reviewed_at"]
    empty += ["report_hash", "chain_type", "tx_hash", "block_height", "crd_address"]
    row |= dict.fromkeys([*empty, "chain_proof", "avcc_code", "issued_at", "c2pa_key"])

    async def write(conn: AsyncConnection) -> dict[str, Any]:
        live = await _live_application(conn, tenant_id, body.content_hash)
        if live is not None:
            raise AlreadyApplied(live)
        record_id = int(
            (
                await conn.execute(avcc_records.insert().returning(avcc_records.c.id), row)
            ).scalar_one()
        )
        created = Envelope.new(
            events.APPLY_CREATED,
            events.ApplyCreated(
                request_id=row["request_id"],
                avcc_record_id=record_id,
                content_url=body.content_url,
                content_hash=body.content_hash,
                ai_tool_info=body.ai_tool_info,
                priority=body.priority,
            ).model_dump(),
            key=str(record_id),
            source=events.CODE_SVC,
            tenant_id=tenant_id,
            correlation_id=row["request_id"],
        )
        await conn.execute(
            avcc_record_events.insert(),
            {
                "record_id": record_id,
                "from_status": None,
                "to_status": RecordStatus.APPLIED.value,
                "status_version": 0,
                "cause": "api.apply",
                "cause_id": created.event_id,
                "at": now,
            },
        )
        await hub.outbox.add(conn, [created])
        return snapshot({**row, "id": record_id})

    try:
        return await hub.service_call(write)
    except sa.exc.IntegrityError:
        # Lost a race: the same Idempotency-Key, or the same content, committed first.
        again = await _by_idempotency_key(avcc, tenant_id, idempotency_key)
        if again is not None:
            return again
        async with reader(hub.engine) as conn:
            live = await _live_application(conn, tenant_id, body.content_hash)
        if live is None:
            raise
        raise AlreadyApplied(live) from None


async def _live_application(conn: AsyncConnection, tenant_id: str, content_hash: str) -> int | None:
    found = (
        await conn.execute(
            sa.select(avcc_records.c.id).where(
                avcc_records.c.tenant_id == tenant_id,
                avcc_records.c.live_content_hash == content_hash,
            )
        )
    ).scalar_one_or_none()
    return int(found) if found is not None else None


async def _by_idempotency_key(avcc: Avcc, tenant_id: str, key: str) -> dict[str, Any] | None:
    async with reader(avcc.hub.engine) as conn:
        row = (
            (
                await conn.execute(
                    sa.select(avcc_records).where(
                        avcc_records.c.tenant_id == tenant_id,
                        avcc_records.c.idempotency_key == key,
                    )
                )
            )
            .mappings()
            .first()
        )
    return snapshot(dict(row)) if row is not None else None


async def get_record(avcc: Avcc, *, tenant_id: str, record_id: int) -> dict[str, Any]:
    """The tenant's application; RecordNotFound for an unknown id or another tenant's."""
    async with reader(avcc.hub.engine) as conn:
        row = (
            (
                await conn.execute(
                    sa.select(avcc_records).where(
                        avcc_records.c.id == record_id, avcc_records.c.tenant_id == tenant_id
                    )
                )
            )
            .mappings()
            .first()
        )
    if row is None:
        raise RecordNotFound(f"no application {record_id}")
    return snapshot(dict(row))


async def list_records(
    avcc: Avcc, *, tenant_id: str, status: str | None, limit: int, after_id: int | None
) -> list[dict[str, Any]]:
    """The tenant's applications, newest first, ``limit`` after ``after_id`` (a cursor)."""
    query = sa.select(avcc_records).where(avcc_records.c.tenant_id == tenant_id)
    if status is not None:
        query = query.where(avcc_records.c.status == status)
    if after_id is not None:
        query = query.where(avcc_records.c.id < after_id)
    query = query.order_by(avcc_records.c.id.desc()).limit(limit)
    async with reader(avcc.hub.engine) as conn:
        rows = (await conn.execute(query)).mappings().all()
    return [snapshot(dict(r)) for r in rows]


async def signed_copy_key(avcc: Avcc, *, tenant_id: str, record_id: int) -> str | None:
    """The store key of the tenant's coded work with its C2PA manifest, once embedded."""
    async with reader(avcc.hub.engine) as conn:
        key = (
            await conn.execute(
                sa.select(avcc_records.c.c2pa_key).where(
                    avcc_records.c.id == record_id, avcc_records.c.tenant_id == tenant_id
                )
            )
        ).scalar_one_or_none()
    return str(key) if key is not None else None


class CodeNotFound(errors.NotFound):
    """No work holds this code."""


async def verify_code(avcc: Avcc, code: str) -> dict[str, Any]:
    """The public answer for ``code``: the work's level, issue time and chain proof, and
    nothing private (no tenant, no object key, no URL). InvalidCode on a mistyped code."""
    parts = parse_code(code)
    async with reader(avcc.hub.engine) as conn:
        row = (
            (
                await conn.execute(
                    sa.select(avcc_records).where(avcc_records.c.id == parts.record_id)
                )
            )
            .mappings()
            .first()
        )
    if row is None or row["avcc_code"] != code.strip().upper():
        raise CodeNotFound(f"no work holds {code}")
    return {
        "avcc_code": row["avcc_code"],
        "status": "valid",
        "final_level": row["final_level"],
        "overall_score": row["overall_score"],
        "issued_at": row["issued_at"],
        "content_hash": row["content_hash"],
        "content_type": row["content_type"],
        "report_hash": row["report_hash"],
        "ai_tool_info": {"model_name": row["model_name"], "model_version": row["model_version"]},
        "chain": {
            "chain_type": row["chain_type"],
            "tx_hash": row["tx_hash"],
            "block_height": row["block_height"],
            "crd_address": row["crd_address"],
        },
        "proof": row["chain_proof"],
    }
