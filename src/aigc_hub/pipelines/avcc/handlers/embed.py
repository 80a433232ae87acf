"""``avcc-embed``: an issued code travels inside the work — ``avcc.code.issued`` → the
original image or MP4 with a signed C2PA manifest (the code, level, chain and proof) →
the signed copy in the store, ``c2pa_key`` on the record.

Text works carry no manifest (C2PA has no binding for plain text here): their code and
proof are served by ``GET /v1/avcc/codes/{code}``. The signing runs in a worker thread;
one short guarded update records the copy, so a redelivery re-signs into the same key at
worst and never changes a recorded copy.
"""

from __future__ import annotations

import asyncio

import sqlalchemy as sa

from aigc_hub.blobs.base import download, file_chunks
from aigc_hub.blobs.keys import object_key
from aigc_hub.core.envelope import Envelope
from aigc_hub.media import sandbox
from aigc_hub.runtime.context import HandlerContext

from .. import events, provenance, records
from ..models import avcc_records
from ..state import Avcc
from ..states import RecordStatus

_EXTENSIONS = {"image/jpeg": "jpg", "image/png": "png", "video/mp4": "mp4"}


async def on_issued(avcc: Avcc, env: Envelope, ctx: HandlerContext) -> list[Envelope]:
    """Sign the work with its code (see the module docstring)."""
    issued = ctx.payload_as(events.CodeIssued)
    async with ctx.read() as conn:
        row = await records.load(conn, issued.avcc_record_id)
    if row is None or row["status"] != RecordStatus.CODED or row["c2pa_key"] is not None:
        return []
    mime = row["content_type"]
    if mime not in provenance.SUPPORTED_MIME_TYPES:
        return []
    claim = provenance.CodeClaim(
        avcc_code=row["avcc_code"],
        final_level=row["final_level"],
        avcc_record_id=row["id"],
        content_hash=row["content_hash"],
        issued_at_ms=row["issued_at"],
        ai_tool=provenance.AiTool(model_name=row["model_name"], model_version=row["model_version"]),
        chain=provenance.ChainRef(
            chain_type=row["chain_type"],
            tx_hash=row["tx_hash"],
            block_height=row["block_height"],
            crd_address=row["crd_address"],
        ),
        proof=row["chain_proof"],
    )
    key = object_key(row["tenant_id"], "avcc-signed", str(row["id"]), f"work.{_EXTENSIONS[mime]}")
    signer = await avcc.c2pa_signer()
    async with sandbox.scratch_dir() as scratch:
        source, signed = scratch / "work", scratch / f"signed.{_EXTENSIONS[mime]}"
        await download(avcc.store, row["object_key"], source, max_bytes=row["size_bytes"])
        await asyncio.to_thread(provenance.embed, source, signed, mime, claim, signer)
        await avcc.store.put(key, file_chunks(signed), mime)
    ctx.write(
        sa.update(avcc_records)
        .where(avcc_records.c.id == row["id"], avcc_records.c.c2pa_key.is_(None))
        .values(c2pa_key=key, updated_at=ctx.clock.now_ms())
    )
    return []
