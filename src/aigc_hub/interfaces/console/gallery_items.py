"""The gallery's items, gathered from every pipeline's :data:`~aigc_hub.pipeline.GallerySource`.

The console never imports a pipeline: each pipeline declares what it shows
(``@pipeline.gallery``) and mints the short-lived poster and player URLs itself. Here the
sources are asked in turn, their items merged newest first and cut to one page; a failing
source is reported next to the gallery instead of failing the page (as the task explorer does
with timelines).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from aigc_hub.bootstrap import Hub
from aigc_hub.pipeline import GalleryItem, GalleryQuery

log = logging.getLogger(__name__)

#: Items on one gallery page.
PAGE_SIZE = 24


@dataclass
class Gallery:
    """One page of items, newest first, the cursor of the next page, and failed sources."""

    items: list[GalleryItem] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    #: ``(created_at, task_id)`` of the last item when an older page may exist.
    next_before: tuple[int, str] | None = None


def _newest_first(item: GalleryItem) -> tuple[int, str]:
    return (item.created_at, item.task_id)


async def gallery_page(hub: Hub, query: GalleryQuery) -> Gallery:
    """Up to ``query.limit`` items of every pipeline matching ``query``, newest first."""
    gallery = Gallery()
    found: list[GalleryItem] = []
    for pipeline in hub.pipelines:
        for source in pipeline.galleries:
            try:
                found += await source(hub, query)
            except Exception as exc:
                log.exception("gallery source of %s failed", pipeline.name)
                gallery.errors.append(f"{pipeline.name}: {type(exc).__name__}")
    # Defence in depth: a source that ignored a filter leaks nothing here.
    if query.tenant_id is not None:
        found = [item for item in found if item.tenant_id == query.tenant_id]
    if query.task_id is not None:
        found = [item for item in found if item.task_id == query.task_id]
    found.sort(key=_newest_first, reverse=True)
    gallery.items = found[: query.limit]
    if len(found) >= query.limit and gallery.items:
        last = gallery.items[-1]
        gallery.next_before = (last.created_at, last.task_id)
    return gallery


async def task_media(hub: Hub, task_id: str, tenant_id: str | None) -> Gallery:
    """The one item about ``task_id`` (its result and variants), if a pipeline knows it and,
    when ``tenant_id`` is set, it is that tenant's."""
    return await gallery_page(hub, GalleryQuery(tenant_id=tenant_id, task_id=task_id, limit=1))


def parse_cursor(text: str) -> tuple[int, str] | None:
    """``<created_at>.<task_id>`` (what :func:`format_cursor` writes); None when malformed."""
    at, _, task_id = text.partition(".")
    if not at.isdigit() or not task_id or len(at) > 19:
        return None
    return int(at), task_id


def format_cursor(cursor: tuple[int, str]) -> str:
    """The query-string form of a gallery cursor."""
    return f"{cursor[0]}.{cursor[1]}"
