"""An upload left UPLOADING past twice its URLs' life is found by the orphan scanner, which
emits a command (the scanner runner audits each repair); the reconciler aborts the multipart
upload (its parts are gone) and REJECTS the asset with ``upload_abandoned``, so it stops
counting against the tenant's limits. An upload completed meanwhile is left alone. SQLite and
PostgreSQL, manual clock."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa

from aigc_hub.blobs.base import BlobNotFound
from aigc_hub.pipelines.generation import assets
from aigc_hub.pipelines.generation.models import assets as asset_rows
from aigc_hub.store import tables
from aigc_hub.store.engine import reader
from tests.support.fake_generation import TENANT, fake_generation


def declared(size: int) -> assets.StartUpload:
    return assets.StartUpload(
        filename="reference.mp4", content_type="video/mp4", size_bytes=size, sha256="0" * 64
    )


async def test_an_abandoned_upload_is_aborted_and_rejected_by_command(
    db_url: str, tmp_path: Path
) -> None:
    async with fake_generation(db_url, tmp_path) as g:
        started = await assets.start_upload(g.gen, tenant_id=TENANT, body=declared(1000))
        asset_id = started["asset_id"]
        store = assets.store_of(g.gen)
        async with reader(g.hub.engine) as conn:
            row = await assets.load(conn, asset_id)
        assert row is not None and row["upload_id"]
        key, upload_id = str(row["object_key"]), str(row["upload_id"])
        part = await store.presign_part(key, upload_id, 1, 600)
        assert part

        assert await g.scan("generation-orphans") == []  # young: still being uploaded
        await g.advance(2 * g.settings.asset_upload_url_s + 1)
        assert await g.scan("generation-orphans") == ["abandoned_upload_abort_requested"]
        await g.settle()

        async with reader(g.hub.engine) as conn:
            row = await assets.load(conn, asset_id)
            outbox = tables.outbox
            query = sa.select(outbox.c.event_type).where(outbox.c.key == asset_id)
            commands = (await conn.execute(query)).scalars().all()
        assert row is not None
        assert (row["status"], row["status_reason"], row["upload_id"]) == (
            "REJECTED",
            "upload_abandoned",
            None,
        )
        assert commands == ["generation.reconcile.upload_abandoned"]
        with pytest.raises(BlobNotFound):  # the upload and its parts are gone
            await store.complete_multipart(key, upload_id, [(1, "etag")])
        assert await g.scan("generation-orphans") == []  # nothing left to find


async def test_an_upload_completed_before_the_command_runs_is_left_alone(
    db_url: str, tmp_path: Path
) -> None:
    async with fake_generation(db_url, tmp_path) as g:
        started = await assets.start_upload(g.gen, tenant_id=TENANT, body=declared(1000))
        asset_id = started["asset_id"]
        await g.advance(2 * g.settings.asset_upload_url_s + 1)
        (scanner,) = [s for s in g.hub.scanners() if s.name == "generation-orphans"]
        findings = await scanner.find(g.clock.now_ms())
        # …the tenant completes it just now (the row leaves UPLOADING)…
        async with g.hub.transaction() as conn:
            await conn.execute(
                sa.update(asset_rows).where(asset_rows.c.id == asset_id).values(status="PROCESSING")
            )
        assert [await scanner.repair(f, g.clock.now_ms()) for f in findings] == [
            "abandoned_upload_abort_requested"
        ]
        await g.settle()
        async with reader(g.hub.engine) as conn:
            row = await assets.load(conn, asset_id)
        assert row is not None and row["status"] == "PROCESSING"
