"""What generation shows in the console's gallery (``Pipeline.gallery``): a tenant's tasks with
the prompt, status, poster and player, and each task's result asset and its variants.

Rows keep object keys, never URLs (seed 004 §3.2.9): every poster, player and variant link is
a short-lived grant minted here, per page view, by :func:`playback.playback_grant`, which
also checks that the asset is the tenant's. The database is read in one short read; grants
are minted after it (on S3 each one is a presign, no round trip).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from aigc_hub.core.errors import NotFound
from aigc_hub.pipeline import GalleryItem, GalleryMedia, GalleryQuery
from aigc_hub.pipelines.generation import playback
from aigc_hub.pipelines.generation.models import assets, generation_tasks
from aigc_hub.pipelines.generation.state import STATE, Generation
from aigc_hub.store.engine import reader

if TYPE_CHECKING:
    from aigc_hub.bootstrap import Hub

#: Characters of the prompt a gallery tile shows.
TITLE_CHARS = 120
#: Variant profiles in the order the explorer lists them.
PROFILE_ORDER = ("hls", "proxy", "poster", "thumbnails", "waveform")
#: A task can be played once one of these variants is READY (the grant picks hls, else proxy).
PLAYABLE = frozenset({"hls", "proxy"})
READY = "READY"
#: Hidden from the gallery: the file is gone.
DELETED = "DELETED"


def title_of(params: Any) -> str:
    """The prompt of a task's ``normalized_params``, cut to :data:`TITLE_CHARS`."""
    prompt = params.get("prompt") if isinstance(params, dict) else None
    text = " ".join(str(prompt or "").split())
    return text if len(text) <= TITLE_CHARS else text[: TITLE_CHARS - 1] + "…"


def _media(row: sa.Row[Any], url: str | None = None) -> GalleryMedia:
    return GalleryMedia(
        asset_id=row.id,
        profile=row.variant_profile or "source",
        status=row.status,
        content_type=row.content_type,
        size_bytes=row.size_bytes,
        width=row.width,
        height=row.height,
        duration_ms=row.duration_ms,
        status_reason=row.status_reason,
        url=url,
    )


def _profile_rank(row: sa.Row[Any]) -> tuple[int, int]:
    profile = row.variant_profile or ""
    rank = PROFILE_ORDER.index(profile) if profile in PROFILE_ORDER else len(PROFILE_ORDER)
    return rank, int(row.created_at)


async def _url(gen: Generation, tenant_id: str, asset_id: str) -> playback.PlaybackGrant | None:
    try:
        return await playback.playback_grant(gen, tenant_id=tenant_id, asset_id=asset_id)
    except (NotFound, playback.NotPlayable):
        # A race with a delete or a status change since the read: show the tile without it.
        return None


def _task_query(query: GalleryQuery) -> sa.Select[Any]:
    t = generation_tasks
    columns = (t.c.id, t.c.tenant_id, t.c.normalized_params, t.c.status, t.c.created_at)
    stmt = sa.select(*columns, t.c.result_asset_id)
    if query.tenant_id is not None:
        stmt = stmt.where(t.c.tenant_id == query.tenant_id)
    if query.task_id is not None:
        stmt = stmt.where(t.c.id == query.task_id)
    if query.before is not None:
        at, task_id = query.before
        stmt = stmt.where(
            sa.or_(t.c.created_at < at, sa.and_(t.c.created_at == at, t.c.id < task_id))
        )
    # The (tenant_id, created_at, id) index serves this order.
    return stmt.order_by(t.c.created_at.desc(), t.c.id.desc()).limit(max(1, query.limit))


async def _read(
    hub: Hub, query: GalleryQuery
) -> tuple[Sequence[sa.Row[Any]], dict[str, sa.Row[Any]], dict[str, list[sa.Row[Any]]]]:
    """The tasks, their result assets by id, and the live variants by source asset id."""
    async with reader(hub.engine) as conn:
        tasks = (await conn.execute(_task_query(query))).all()
        result_ids = [r.result_asset_id for r in tasks if r.result_asset_id]
        if not result_ids:
            return tasks, {}, {}
        results = (await conn.execute(sa.select(assets).where(assets.c.id.in_(result_ids)))).all()
        variants = (
            await conn.execute(
                sa.select(assets).where(
                    assets.c.source_asset_id.in_(result_ids), assets.c.status != DELETED
                )
            )
        ).all()
    by_source: dict[str, list[sa.Row[Any]]] = {}
    for row in sorted(variants, key=_profile_rank):
        by_source.setdefault(row.source_asset_id, []).append(row)
    return tasks, {r.id: r for r in results}, by_source


def _first_ready(rows: Iterable[sa.Row[Any]], profiles: frozenset[str]) -> sa.Row[Any] | None:
    return next((r for r in rows if r.variant_profile in profiles and r.status == READY), None)


async def _item(
    gen: Generation,
    task: sa.Row[Any],
    result: sa.Row[Any] | None,
    variants: list[sa.Row[Any]],
    *,
    with_links: bool,
) -> GalleryItem:
    tenant = task.tenant_id
    poster_row = _first_ready(variants, frozenset({"poster"}))
    poster = await _url(gen, tenant, poster_row.id) if poster_row is not None else None
    play = None
    if result is not None and _first_ready(variants, PLAYABLE) is not None:
        play = await _url(gen, tenant, result.id)
    media: list[GalleryMedia] = []
    for row in variants:
        # Links per variant only where they are shown (one task's page), not per tile.
        grant = await _url(gen, tenant, row.id) if with_links and row.status == READY else None
        media.append(_media(row, grant.url if grant else None))
    return GalleryItem(
        task_id=task.id,
        tenant_id=tenant,
        title=title_of(task.normalized_params),
        status=task.status,
        created_at=int(task.created_at),
        poster_url=poster.url if poster else None,
        play_url=play.url if play else None,
        play_type=play.content_type if play else None,
        result=_media(result) if result is not None else None,
        variants=tuple(media),
    )


async def gallery_items(hub: Hub, query: GalleryQuery) -> list[GalleryItem]:
    """Generation's tasks matching ``query``, newest first (the console's gallery source)."""
    gen = hub.state_of(STATE)
    tasks, results, variants = await _read(hub, query)
    items = []
    for task in tasks:
        result = results.get(task.result_asset_id) if task.result_asset_id else None
        rows = variants.get(result.id, []) if result is not None else []
        items.append(await _item(gen, task, result, rows, with_links=query.task_id is not None))
    return items
