"""``generation-render``: the render worker's consumer group on ``render.execute`` (seed 004
§3.3.3 item 10), its own pool (``render_concurrency``) and FFmpeg threads
(``render_threads``), apart from the media worker and the API.

One export: compile its revision's graph, run it node by node (:mod:`..render_run`) with
the node cache in the blob store, commit each node's progress as it ends (and announce it on
the tenant's event stream), then store the file as a new READY ``export`` asset of the
project and hand it to the media worker (``generation.export.rendered`` on
``media.process``), whose playback variants end the export ``succeeded``
(:mod:`.export_variants`). A node failing every attempt ends it ``failed`` with the node
named. A cancel is seen between nodes and, while a node runs, by a watcher that stops the
node's FFmpeg (its process group is killed). A redelivery of an export that ended does
nothing; one of an export that was running starts again, and its finished nodes come from
the cache.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from aigc_hub.blobs.base import BlobNotFound, download, file_chunks
from aigc_hub.core import errors, ids
from aigc_hub.core.envelope import Envelope
from aigc_hub.media import probe
from aigc_hub.media.sandbox import MediaRefused, scratch_dir
from aigc_hub.pipelines.generation import events, exports, render_graph, render_run
from aigc_hub.pipelines.generation.assets import BUCKET
from aigc_hub.pipelines.generation.exports import OPEN, ExportStatus
from aigc_hub.pipelines.generation.models import (
    assets,
    project_revisions,
    render_cache,
    render_jobs,
)
from aigc_hub.pipelines.generation.render_graph import RenderGraph, RenderNode
from aigc_hub.pipelines.generation.state import Generation
from aigc_hub.pipelines.generation.timeline import TimelineV1
from aigc_hub.reliability.outbox import Routed
from aigc_hub.runtime.context import HandlerContext
from aigc_hub.store.dialects import dialect_of
from aigc_hub.store.engine import reader

#: ``current_node`` of an export rendered and waiting for its playback variants.
VARIANTS: Final = "variants"
#: How often a running node looks whether its export was cancelled.
CANCEL_POLL_S: Final = 0.5


class Cancelled(errors.HubError):
    """The export was cancelled: stop, record nothing more (never leaves the handler)."""


class BlobNodeCache:
    """The render node cache: files in the hub's blob store under ``render-cache/``, a
    ``render_cache`` row each (size, last use). Keys are scoped by tenant (a node of one
    tenant is never another's), and past ``bound`` bytes (the whole cache, every tenant's)
    the least recently used go when an export ends (:meth:`evict`)."""

    def __init__(self, gen: Generation, tenant_id: str, ctx: HandlerContext, local: Path) -> None:
        self.gen, self.tenant_id, self.ctx = gen, tenant_id, ctx
        self.bound = gen.settings.render_cache_bytes
        #: Nodes this export made or fetched, kept in its scratch folder: the next node reads
        #: them from there instead of downloading from the store what was just uploaded.
        self.local = local

    def _scoped(self, key: str) -> str:
        return hashlib.sha256(f"{self.tenant_id}:{key}".encode()).hexdigest()

    async def _row(self, key: str) -> Mapping[str, Any] | None:
        async with reader(self.gen.hub.engine) as conn:
            found = await conn.execute(
                sa.select(render_cache).where(render_cache.c.cache_key == self._scoped(key))
            )
            row = found.mappings().first()
        return None if row is None else dict(row)

    async def has(self, key: str) -> bool:
        """True when the node is cached; marks it used (the eviction's order)."""
        now = self.gen.hub.clock.now_ms()

        async def touch(conn: AsyncConnection) -> bool:
            used = await conn.execute(
                render_cache.update()
                .where(render_cache.c.cache_key == self._scoped(key))
                .values(last_used_at=now)
            )
            return bool(used.rowcount == 1)

        # cache bookkeeping, not a fact of the export: other exports' eviction reads it
        return await self.ctx.checkpoint("render cache: a node was used", touch)

    async def cached(self, keys: list[str]) -> set[str]:
        """Which of ``keys`` are cached (one read; marks nothing used)."""
        scoped = {self._scoped(k): k for k in keys}
        async with reader(self.gen.hub.engine) as conn:
            found = await conn.execute(
                sa.select(render_cache.c.cache_key).where(
                    render_cache.c.cache_key.in_(list(scoped))
                )
            )
            return {scoped[k] for k in found.scalars()}

    async def fetch(self, key: str, dest: Path) -> None:
        here = self.local / self._scoped(key)
        if await asyncio.to_thread(here.is_file):
            await asyncio.to_thread(render_run.link_or_copy, here, dest)
            return
        row = await self._row(key)
        blobs = self.gen.hub.blobs
        assert blobs is not None  # checked by the handler
        try:
            if row is None:
                raise BlobNotFound(key)
            await download(blobs, str(row["object_key"]), dest)
        except BlobNotFound:
            # evicted since it was found: forget it, and let the export run again (a
            # redelivery makes it anew, the rest still comes from the cache)
            await self._forget(self._scoped(key))
            raise errors.RetryableError(f"render node {key} left the cache") from None

    async def keep(self, key: str, path: Path) -> None:
        blobs = self.gen.hub.blobs
        assert blobs is not None
        scoped = self._scoped(key)
        object_key = f"render-cache/{self.tenant_id}/{scoped}"
        stored = await blobs.put(object_key, file_chunks(path), "application/octet-stream")
        await asyncio.to_thread(render_run.link_or_copy, path, self.local / scoped)
        now = self.gen.hub.clock.now_ms()

        async def record(conn: AsyncConnection) -> None:
            await conn.execute(
                dialect_of(conn)
                .insert(render_cache)
                .values(
                    cache_key=scoped,
                    tenant_id=self.tenant_id,
                    object_key=object_key,
                    size_bytes=stored.size,
                    created_at=now,
                    last_used_at=now,
                )
                .on_conflict_do_nothing()
            )

        # now, not at the export's commit: the next node of this export reads it
        await self.ctx.checkpoint("render cache: a node's output was stored", record)

    async def evict(self) -> None:
        """Forget the least recently used nodes until the cache is within its bound. Called
        once an export has its file, not after each node: a bound smaller than one export's
        nodes must not take a node from under the node that reads it next."""
        async with reader(self.gen.hub.engine) as conn:
            total = int(await conn.scalar(sa.select(sa.func.sum(render_cache.c.size_bytes))) or 0)
            if total <= self.bound:
                return
            oldest = (
                await conn.execute(
                    sa.select(render_cache.c.cache_key, render_cache.c.size_bytes).order_by(
                        render_cache.c.last_used_at, render_cache.c.cache_key
                    )
                )
            ).all()
        for row in oldest:
            if total <= self.bound:
                break
            await self._forget(row.cache_key)
            total -= int(row.size_bytes)

    async def _forget(self, scoped: str) -> None:
        async def drop(conn: AsyncConnection) -> object:
            return await conn.scalar(
                sa.delete(render_cache)
                .where(render_cache.c.cache_key == scoped)
                .returning(render_cache.c.object_key)
            )

        # the row goes before the object: a crash between leaves an object nothing names
        # (space, not a wrong read), never a row naming a missing object
        object_key = await self.ctx.checkpoint("render cache: a node is evicted", drop)
        if object_key is not None and self.gen.hub.blobs is not None:
            await self.gen.hub.blobs.delete(str(object_key))


async def on_render(gen: Generation, env: Envelope, ctx: HandlerContext) -> list[Envelope]:
    """``render.execute``: render one export (see the module)."""
    if env.event_type != events.RENDER_REQUESTED:
        return []
    job_id = ctx.payload_as(events.RenderRequested).job_id
    hub = gen.hub
    async with ctx.read() as conn:
        job = await exports.load_job(conn, job_id)
        revision = None
        if job is not None:
            revision = (
                (
                    await conn.execute(
                        sa.select(project_revisions).where(
                            project_revisions.c.id == job["project_revision_id"]
                        )
                    )
                )
                .mappings()
                .first()
            )
    if job is None or revision is None or job["status"] not in OPEN:
        return []
    if job["asset_id"] is not None:  # rendered already: the media worker has it now
        return []
    if hub.blobs is None:
        raise RuntimeError("the hub has no blob store: exports cannot be rendered")
    tenant_id = str(job["tenant_id"])
    timeline = TimelineV1.model_validate(revision["timeline"])
    try:
        async with reader(hub.engine) as conn:
            graph = await exports.graph_of(conn, tenant_id, timeline, job["render_profile"])
    except render_graph.InvalidRenderInput as exc:  # a source deleted since the request
        _end(gen, ctx, job_id, ExportStatus.FAILED, reason=str(exc)[:300])
        return []
    await _update(gen, ctx, job_id, "running", status=ExportStatus.RUNNING, nodes_ran=0)
    counts = {"ran": 0, "reused": 0}

    async def on_node(node: RenderNode, how: str) -> None:
        counts[how] += 1
        await _update(
            gen,
            ctx,
            job_id,
            f"node {node.id} {how}",
            nodes_ran=counts["ran"],
            nodes_reused=counts["reused"],
            current_node=node.id,
        )

    async with scratch_dir(gen.scratch_root()) as scratch:
        await asyncio.to_thread((scratch / "made").mkdir)
        cache = BlobNodeCache(gen, tenant_id, ctx, scratch / "made")
        try:
            sources = await _sources(gen, graph, cache, scratch)
            report = await _run_watched(gen, job_id, graph, sources, cache, scratch, on_node)
            out = scratch / "export.mp4"
            await cache.fetch(graph.output.key, out)
            await cache.evict()
            await _finish(gen, ctx, job, out, report.cpu_s)
        except Cancelled:
            return []
        except render_run.NodeFailed as exc:
            _end(gen, ctx, job_id, ExportStatus.FAILED, reason=exc.reason, failed_node=exc.node_id)
        except MediaRefused as exc:  # the made file did not probe: the render's fault
            _end(gen, ctx, job_id, ExportStatus.FAILED, reason=f"{exc.code}: {exc}"[:300])
    return []


async def _sources(
    gen: Generation, graph: RenderGraph, cache: BlobNodeCache, scratch: Path
) -> dict[str, Path]:
    """The source assets of the nodes not in the cache, downloaded into ``scratch``."""
    with_source = [n for n in graph.nodes if n.source]
    cached = await cache.cached([n.key for n in with_source])
    wanted = {n.source for n in with_source if n.source and n.key not in cached}
    found: dict[str, Path] = {}
    if not wanted:
        return found
    async with reader(gen.hub.engine) as conn:
        rows = await conn.execute(
            sa.select(assets.c.id, assets.c.object_key).where(assets.c.id.in_(list(wanted)))
        )
        keys = {r.id: str(r.object_key) for r in rows}
    assert gen.hub.blobs is not None
    folder = scratch / "sources"
    await asyncio.to_thread(folder.mkdir)
    for asset_id in sorted(wanted):
        found[asset_id] = folder / asset_id
        await download(gen.hub.blobs, keys[asset_id], found[asset_id])
    return found


async def _run_watched(
    gen: Generation,
    job_id: str,
    graph: RenderGraph,
    sources: dict[str, Path],
    cache: BlobNodeCache,
    scratch: Path,
    on_node: render_run.OnNode,
) -> render_run.RunReport:
    """Run the graph while a watcher looks for a cancel; Cancelled when one came (the
    running node's FFmpeg is killed with its group by the task's cancellation)."""
    settings = gen.settings
    run_settings = render_run.RunSettings(
        limits=dataclasses.replace(gen.media_limits(), niceness=settings.render_niceness),
        threads=settings.render_threads,
        attempts=settings.render_node_attempts,
        backoff_s=settings.render_node_backoff_s,
    )
    work = scratch / "nodes"
    run = asyncio.ensure_future(
        render_run.run_graph(
            graph,
            sources,
            cache,
            work,
            settings=run_settings,
            on_node=on_node,
            failpoints=gen.hub.failpoints,
        )
    )
    try:
        while True:
            done, _ = await asyncio.wait({run}, timeout=CANCEL_POLL_S)
            if done:
                return run.result()
            async with reader(gen.hub.engine) as conn:
                status = await conn.scalar(
                    sa.select(render_jobs.c.status).where(render_jobs.c.id == job_id)
                )
            if status == ExportStatus.CANCELLED:
                raise Cancelled(job_id)
    finally:
        if not run.done():
            run.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await run


async def _update(
    gen: Generation, ctx: HandlerContext, job_id: str, why: str, **values: Any
) -> None:
    """Commit the running export's progress now (unless it was cancelled) and announce it."""
    now = gen.hub.clock.now_ms()

    async def note(conn: AsyncConnection) -> bool:
        moved = await exports.move_job(
            conn, job_id, while_in=OPEN, now=now, kind="progress", **values
        )
        if moved is not None:
            await gen.hub.outbox.add(conn, [moved])
        return moved is not None

    if not await ctx.checkpoint(f"the export's progress: {why}", note):
        raise Cancelled(job_id)


def _end(
    gen: Generation,
    ctx: HandlerContext,
    job_id: str,
    status: ExportStatus,
    *,
    reason: str | None = None,
    failed_node: str | None = None,
    asset: dict[str, Any] | None = None,
    cpu_ms: int = 0,
) -> None:
    """End the export (if still open) in the handler's commit, with its notification."""
    now = gen.hub.clock.now_ms()

    async def record(conn: AsyncConnection) -> list[Envelope | Routed]:
        if asset is not None:
            await conn.execute(assets.insert().values(**asset))
        note = await exports.move_job(
            conn,
            job_id,
            while_in=OPEN,
            now=now,
            status=status,
            status_reason=reason,
            failed_node=failed_node,
            asset_id=None if asset is None else asset["id"],
            current_node=None,
            cpu_ms=cpu_ms,
        )
        return [] if note is None else [note]

    ctx.write(record)


async def _finish(
    gen: Generation,
    ctx: HandlerContext,
    job: Mapping[str, Any],
    out: Path,
    cpu_s: float,
) -> None:
    """Store the rendered file as the project's new READY ``export`` asset; hand it to the
    media worker for its playback variants (the export stays running until they exist), or
    end the export succeeded when no variant is required."""
    info = await probe.probe(out, gen.media_limits())
    asset_id = ids.new_id_str()
    tenant_id = str(job["tenant_id"])
    key = f"t/{tenant_id}/asset/{asset_id}/export.mp4"
    assert gen.hub.blobs is not None
    stored = await gen.hub.blobs.put(key, file_chunks(out), "video/mp4")
    now = gen.hub.clock.now_ms()
    asset = {
        "id": asset_id,
        "tenant_id": tenant_id,
        "project_id": job["project_id"],
        "kind": "export",
        "object_bucket": BUCKET,
        "object_key": key,
        "content_type": "video/mp4",
        "size_bytes": stored.size,
        "checksum_algo": "sha256",
        "checksum_value": stored.sha256,
        "status": "READY",
        "width": info.width,
        "height": info.height,
        "duration_ms": info.duration_ms,
        "frame_rate_num": info.frame_rate_num,
        "frame_rate_den": info.frame_rate_den,
        "codec": info.video_codec,
        "audio_codec": info.audio_codec,
        "created_at": now,
        "updated_at": now,
    }
    job_id, cpu_ms = str(job["id"]), round(cpu_s * 1000)
    if not gen.settings.render_variant_list():
        _end(gen, ctx, job_id, ExportStatus.SUCCEEDED, asset=asset, cpu_ms=cpu_ms)
        return

    async def record(conn: AsyncConnection) -> list[Envelope | Routed]:
        await conn.execute(assets.insert().values(**asset))
        note = await exports.move_job(
            conn,
            job_id,
            while_in=(ExportStatus.RUNNING,),
            now=now,
            kind="progress",
            asset_id=asset_id,
            current_node=VARIANTS,
            cpu_ms=cpu_ms,
        )
        if note is None:  # cancelled meanwhile: the file stays an asset of the project
            return []
        rendered = events.ExportRendered(job_id=job_id, asset_id=asset_id)
        return [
            note,
            Envelope.new(
                events.EXPORT_RENDERED,
                rendered.model_dump(),
                key=job_id,
                source="generation.render",
                tenant_id=tenant_id,
                correlation_id=job_id,
            ),
        ]

    ctx.write(record)
