"""``generation-reconciler``: carries out the orphan scanner's commands on
``reconcile.command``, each after checking again that it still holds (the scanner read a
moment ago; an upload may have committed its row since).

* an object no asset row names, past the grace period → deleted;
* a READY asset whose object is gone → ``MISSING`` with the reason, so nothing hands out a
  URL to nothing; its task keeps its status (a fact the tenant saw stays what it was);
* an upload still UPLOADING past twice its URLs' life → its multipart upload aborted (the
  parts' bytes freed) and the asset REJECTED ``upload_abandoned``.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from aigc_hub.core.envelope import Envelope
from aigc_hub.pipelines.generation import assets as assets_service
from aigc_hub.pipelines.generation import events
from aigc_hub.pipelines.generation.assets import AssetStatus
from aigc_hub.pipelines.generation.media_scanners import has_owner, owned
from aigc_hub.pipelines.generation.models import assets
from aigc_hub.pipelines.generation.state import Generation
from aigc_hub.reliability.outbox import Routed
from aigc_hub.runtime.context import HandlerContext
from aigc_hub.store.engine import reader


async def on_reconcile(gen: Generation, env: Envelope, ctx: HandlerContext) -> list[Envelope]:
    """Route one ``reconcile.command`` to its check-and-act."""
    blobs = gen.hub.blobs
    if blobs is None:
        return []
    if env.event_type == events.ORPHAN_OBJECT_FOUND:
        key = ctx.payload_as(events.OrphanObjectFound).key
        if not owned(key):
            return []
        listed = await blobs.head(key)
        grace_ms = int(gen.settings.orphan_grace_s * 1000)
        if listed is None or await has_owner(gen.hub, key):
            return []
        # head() gives no write time: list the one key to read it.
        async for item in blobs.list_objects(key):
            if item.key == key and item.modified_ms <= gen.hub.clock.now_ms() - grace_ms:
                await blobs.delete(key)
        return []
    if env.event_type == events.UPLOAD_ABANDONED:
        await _abandon(gen, ctx, ctx.payload_as(events.UploadAbandoned).asset_id)
        return []
    if env.event_type == events.MISSING_OBJECT_FOUND:
        asset_id = ctx.payload_as(events.MissingObjectFound).asset_id
        async with reader(gen.hub.engine) as conn:
            row = await assets_service.load(conn, asset_id)
        if row is None or row["status"] != "READY" or await blobs.head(str(row["object_key"])):
            return []
        now = gen.hub.clock.now_ms()

        async def mark(conn: AsyncConnection) -> list[Envelope | Routed]:
            await conn.execute(
                sa.update(assets)
                .where(assets.c.id == asset_id, assets.c.status == "READY")
                .values(status="MISSING", status_reason="object_missing", updated_at=now)
            )
            return []

        ctx.write(mark)
    return []


async def _abandon(gen: Generation, ctx: HandlerContext, asset_id: str) -> None:
    """Abort the asset's multipart upload, then stage UPLOADING → REJECTED (guarded: an
    upload completed meanwhile has left UPLOADING and is left alone)."""
    async with reader(gen.hub.engine) as conn:
        row = await assets_service.load(conn, asset_id)
    older_than = gen.hub.clock.now_ms() - 2 * int(gen.settings.asset_upload_url_s * 1000)
    if row is None or row["status"] != AssetStatus.UPLOADING or row["created_at"] >= older_than:
        return
    if row["upload_id"]:
        store = assets_service.store_of(gen)
        await store.abort_multipart(str(row["object_key"]), str(row["upload_id"]))
    now = gen.hub.clock.now_ms()

    async def refuse(conn: AsyncConnection) -> list[Envelope | Routed]:
        await assets_service.move(
            conn,
            asset_id,
            AssetStatus.UPLOADING,
            AssetStatus.REJECTED,
            now_ms=now,
            values={"status_reason": "upload_abandoned", "upload_id": None},
        )
        return []

    ctx.write(refuse)
