"""The repository of applications: load a record, move it (guarded, with history), and the
snapshot the API answers."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from aigc_hub.store.transitions import move as guarded_move

from .models import avcc_records
from .states import RECORDS, RecordStatus


async def load(conn: AsyncConnection, record_id: int) -> dict[str, Any] | None:
    """The record, or None."""
    row = (
        (await conn.execute(sa.select(avcc_records).where(avcc_records.c.id == record_id)))
        .mappings()
        .first()
    )
    return dict(row) if row is not None else None


async def move(
    conn: AsyncConnection,
    row: Mapping[str, Any],
    to: RecordStatus,
    *,
    now_ms: int,
    cause: str,
    cause_id: str | None = None,
    values: Mapping[str, object] | None = None,
) -> int:
    """Move the record as read in ``row`` to ``to`` (StaleTransition if it moved meanwhile);
    returns its new status version."""
    moved = await guarded_move(
        conn,
        RECORDS,
        row["id"],
        current=RecordStatus(row["status"]),
        to=to,
        seen_version=int(row["status_version"]),
        values={"updated_at": now_ms, **(values or {})},
        record={"record_id": row["id"], "cause": cause, "cause_id": cause_id, "at": now_ms},
    )
    assert moved.version is not None  # the records table is versioned
    return moved.version


def snapshot(row: Mapping[str, Any]) -> dict[str, Any]:
    """What the tenant sees of its application."""
    return {
        "avcc_record_id": row["id"],
        "request_id": row["request_id"],
        "status": row["status"],
        "status_reason": row["status_reason"],
        "content_url": row["content_url"],
        "content_hash": row["content_hash"],
        "content_type": row["content_type"],
        "size_bytes": row["size_bytes"],
        "ai_tool_info": {"model_name": row["model_name"], "model_version": row["model_version"]},
        "priority": row["priority"],
        "decision": row["decision"],
        "final_level": row["final_level"],
        "overall_score": row["overall_score"],
        "review_report_id": row["review_report_id"],
        "report_hash": row["report_hash"],
        "chain": None
        if row["tx_hash"] is None
        else {
            "chain_type": row["chain_type"],
            "tx_hash": row["tx_hash"],
            "block_height": row["block_height"],
            "crd_address": row["crd_address"],
        },
        "avcc_code": row["avcc_code"],
        "issued_at": row["issued_at"],
        "c2pa_embedded": row["c2pa_key"] is not None,
        "created_at": row["created_at"],
        "updated_at": row["updated_at"],
    }
