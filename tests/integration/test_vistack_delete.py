"""``delete_file`` in the seed's order, on embedded defaults: a worker process SIGKILLed
between the object deletes and the transaction leaves the rows; the record comes back to
the next worker, which finishes it. Nothing of the video remains: objects, rows, history,
danmaku, comments; another video is untouched."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from aigc_hub.blobs.local import LocalBlobStore
from aigc_hub.core.ids import new_id
from aigc_hub.pipelines.vistack import services
from aigc_hub.pipelines.vistack.handlers.delete_file import AFTER_OBJECTS
from aigc_hub.pipelines.vistack.models import (
    vistack_comments,
    vistack_danmaku,
    vistack_video_events,
    vistack_videos,
)
from aigc_hub.tenancy import create_tenant
from tests.support.hubs import make_broker, wait_until
from tests.support.vistack import vistack_stack
from tests.support.workers import ROOT, worker_process

GROUP = "vistack-consumer-group"
SECRET = "delete-test-secret"


async def _published_video(stack: Any, store: LocalBlobStore, tenant_id: str) -> str:
    """A published video with its objects (source, two runs' DASH files, cover), history,
    danmaku and comments, as the pipeline would have left them."""
    video_id = f"vid_{new_id().hex}"
    source = services.source_key(tenant_id, f"upl_{new_id().hex}")
    prefix = services.dash_prefix(tenant_id, video_id)
    keys = [source, services.cover_key(tenant_id, video_id)]
    keys += [f"{prefix}{run}/{name}" for run in (7, 9) for name in ("manifest.mpd", "init-0.m4s")]
    for key in keys:
        await store.put(key, b"bytes of " + key.encode())
    now = stack.hub.clock.now_ms()
    async with stack.hub.transaction() as conn:
        await conn.execute(
            vistack_videos.insert(),
            {
                "id": video_id,
                "tenant_id": tenant_id,
                "owner_id": "k",
                "title": "to delete",
                "source_key": source,
                "source_bytes": 10,
                "heights": [360, 720],
                "status": "published",
                "status_version": 3,
                "attempts": 1,
                "retry_epoch": 0,
                "manifest_key": f"{prefix}9/manifest.mpd",
                "cover_key": keys[1],
                "created_at": now,
                "updated_at": now,
            },
        )
        await conn.execute(
            vistack_video_events.insert(),
            [{"video_id": video_id, "to_status": "published", "cause": "t", "at": now}],
        )
        await conn.execute(
            vistack_danmaku.insert(),
            [
                {
                    "id": f"dm_{new_id().hex}",
                    "video_id": video_id,
                    "tenant_id": tenant_id,
                    "user_id": "u",
                    "offset_ms": i * 100,
                    "text": f"hi {i}",
                    "color": "#ffffff",
                    "mode": "scroll",
                    "status": "visible",
                    "posted_at": now,
                    "stored_at": now,
                }
                for i in range(5)
            ],
        )
        await conn.execute(
            vistack_comments.insert(),
            [
                {
                    "id": f"cm_{new_id().hex}",
                    "video_id": video_id,
                    "tenant_id": tenant_id,
                    "user_id": "u",
                    "text": f"comment {i}",
                    "status": "visible",
                    "posted_at": now,
                    "decided_at": now,
                }
                for i in range(3)
            ],
        )
    return video_id


async def _left_of(
    stack: Any, store: LocalBlobStore, tenant_id: str, video_id: str
) -> dict[str, int]:
    """How much of ``video_id`` remains: objects under each of its prefixes, rows per table."""
    objects = 0
    for kind in (services.DASH_KIND, services.COVER_KIND):
        prefix = f"t/{tenant_id}/{kind}/{video_id}/"
        objects += len([o async for o in store.list_objects(prefix)])
    counts = {"objects": objects}
    async with stack.hub.engine.connect() as conn:
        for table, column in (
            (vistack_videos, vistack_videos.c.id),
            (vistack_video_events, vistack_video_events.c.video_id),
            (vistack_danmaku, vistack_danmaku.c.video_id),
            (vistack_comments, vistack_comments.c.video_id),
        ):
            counts[table.name] = int(
                await conn.scalar(
                    sa.select(sa.func.count()).select_from(table).where(column == video_id)
                )
                or 0
            )
    return counts


async def test_a_delete_killed_between_the_objects_and_the_rows_finishes_on_redelivery(
    sqlite_url: str, tmp_path: Path
) -> None:
    blobs = tmp_path / "blobs"
    store = LocalBlobStore(blobs, secret=SECRET.encode())
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "src"), str(ROOT)])),
        "AIGC_HUB_DATABASE_URL": sqlite_url,
        "AIGC_HUB_DATA_DIR": str(tmp_path / "worker"),
        "AIGC_HUB_PIPELINES": "vistack",
        "AIGC_HUB_BROKER": "embedded",
        "AIGC_HUB_LOG_PATH": str(tmp_path / "log.db"),
        "AIGC_HUB_BLOB_URL": f"file://{blobs}",
        "AIGC_HUB_BLOB_SIGNING_KEY": SECRET,
    }
    log = tmp_path / "worker.log"
    # The API only: the deletes are the worker processes' to do.
    async with vistack_stack(
        sqlite_url, make_broker("embedded", tmp_path), tmp_path, blobs=store, groups=[]
    ) as stack:
        tenant, key = await create_tenant(stack.hub.engine, "site")
        tenant_id = tenant.id
        async with stack.client(key) as client:
            doomed_id = await _published_video(stack, store, tenant_id)
            kept_id = await _published_video(stack, store, tenant_id)
            answer = await client.delete(f"/v1/vistack/videos/{doomed_id}")
            assert answer.status_code == 202, answer.text
            doomed = worker_process(
                GROUP, env | {"AIGC_HUB_FAILPOINTS": f"{AFTER_OBJECTS}=kill"}, log
            )
            try:
                exited = await asyncio.to_thread(doomed.wait, 120)
                assert exited == -signal.SIGKILL, log.read_text()[-3000:]
            finally:
                if doomed.poll() is None:
                    doomed.kill()
            half = await _left_of(stack, store, tenant_id, doomed_id)
            # The objects went first; the rows are all still there.
            assert half == {
                "objects": 0,
                "vistack_videos": 1,
                "vistack_video_events": 1,
                "vistack_danmaku": 5,
                "vistack_comments": 3,
            }
            assert await store.head((await _row(stack, doomed_id))["source_key"]) is None
            survivor = worker_process(GROUP, env, log)
            try:

                async def gone() -> bool:
                    left = await _left_of(stack, store, tenant_id, doomed_id)
                    return not any(left.values())

                await wait_until(gone, timeout=120)
            finally:
                survivor.send_signal(signal.SIGTERM)
                await asyncio.to_thread(survivor.wait, 60)
            assert (await client.get(f"/v1/vistack/videos/{doomed_id}")).status_code == 404
            kept = await _left_of(stack, store, tenant_id, kept_id)
            assert kept == {
                "objects": 5,
                "vistack_videos": 1,
                "vistack_video_events": 1,
                "vistack_danmaku": 5,
                "vistack_comments": 3,
            }
            # A second delete of the gone video is 404, not a new message.
            assert (await client.delete(f"/v1/vistack/videos/{doomed_id}")).status_code == 404


async def _row(stack: Any, video_id: str) -> dict[str, Any]:
    async with stack.hub.engine.connect() as conn:
        row = (
            (await conn.execute(sa.select(vistack_videos).where(vistack_videos.c.id == video_id)))
            .mappings()
            .one()
        )
    return dict(row)
