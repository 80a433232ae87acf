"""``Pipeline("generation", state=build_state)``: topics, events, consumer groups, routes,
scanners, timeline, and what the hub's tools need: settings (``AIGC_HUB_GEN_*``), the
``aigc-hub gen`` CLI, its tables, and the local provider ``aigc-hub up`` serves beside it.
The hub builds the state (a :class:`Generation`) once at start; the handlers and the scanners
that need it receive it as their first argument. This is the only module that wires: every
other module of the folder only offers what is declared here (``events.register`` included).

Installed as the entry point ``generation`` (group ``aigc_hub.pipelines``), so every hub
process runs it unless ``AIGC_HUB_PIPELINES`` selects others. Consumer groups, each its own
concurrency pool (seed 004 §3.2.9), each handled by its module in ``handlers/``:

* ``generation-scheduler`` — wake-ups on ``generation.dispatch`` → a scheduling pass;
* ``generation-submitter`` — submit and cancel calls to providers;
* ``generation-observer`` — the one state handler for ``provider.status.observe``;
* ``generation-poller`` — provider status queries on ``provider.poll``;
* ``generation-fetcher`` — output downloads on ``output.fetch``;
* ``generation-fetcher-urgent`` — the same for outputs whose URL expires soon, on
  ``output.fetch.urgent``, so they never wait behind ordinary fetches;
* ``generation-media`` — the media worker on ``media.process`` (variants, output review),
  paused while its scratch disk is past the high-water mark;
* ``generation-render`` — the render worker on ``render.execute`` (exports of projects);
* ``generation-reconciler`` — the orphan scanner's commands on ``reconcile.command``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import sqlalchemy as sa

from aigc_hub.pipeline import GroupTuning, Pipeline, TimelineEntry
from aigc_hub.pipelines.generation import (
    assets_http,
    events,
    exports_http,
    gallery,
    http,
    models,
    projects_http,
)
from aigc_hub.pipelines.generation.handlers import (
    fetcher,
    media,
    media_variants,
    observer,
    poller,
    reconciler,
    render,
    scheduler,
    submitter,
)
from aigc_hub.pipelines.generation.models import task_events
from aigc_hub.pipelines.generation.scanners import factories, state_factories
from aigc_hub.pipelines.generation.settings import GenerationSettings
from aigc_hub.pipelines.generation.state import NAME, build_state
from aigc_hub.pipelines.generation.up import local_provider_hook
from aigc_hub.store.engine import reader

if TYPE_CHECKING:
    from aigc_hub.bootstrap import Hub

pipeline = Pipeline(
    NAME,
    state=build_state,
    # `gen`: the documented `aigc-hub gen …` commands and AIGC_HUB_GEN_* settings.
    alias="gen",
    settings=GenerationSettings,
    # Named, not imported: only the CLI loads it, so hub processes never load CLI code.
    cli="aigc_hub.pipelines.generation.cli:app",
    models=models.__name__,
    # Its tables' revisions (0004 on) are in the hub's own linear chain: no branch of its own.
    migrations=None,
)
events.register(pipeline)
pipeline.up_hook(local_provider_hook)
pipeline.gallery(gallery.gallery_items)
pipeline.routers += [http.router, http.credits_router, http.callbacks_router]
pipeline.routers += [assets_http.router, assets_http.playback_router, projects_http.router]
pipeline.routers += [exports_http.router]
for factory in factories():
    pipeline.scanner(factory)
for state_factory in state_factories():
    pipeline.scanner_with_state(state_factory)


pipeline.handler_with_state("generation-scheduler", [events.DISPATCH], concurrency=2)(
    scheduler.on_wake
)
pipeline.handler_with_state("generation-submitter", [events.DISPATCH], concurrency=8, timeout=120)(
    submitter.on_dispatch
)
pipeline.handler_with_state("generation-observer", [events.OBSERVE], concurrency=8)(
    observer.on_observed
)
pipeline.handler_with_state("generation-poller", [events.POLL], concurrency=8, timeout=60)(
    poller.on_poll
)
pipeline.handler_with_state("generation-fetcher", [events.FETCH], concurrency=2, timeout=600)(
    fetcher.on_fetch
)
pipeline.handler_with_state(
    "generation-fetcher-urgent", [events.FETCH_URGENT], concurrency=2, timeout=600
)(fetcher.on_fetch)
pipeline.handler_with_state(
    "generation-media",
    [events.MEDIA],
    concurrency=2,
    timeout=1800,
    pause=media_variants.disk_pressure,
)(media.on_media)
# The render worker: its own pool, apart from the media worker and the API (seed 004 §3.3.3-10).
pipeline.handler_with_state(
    "generation-render",
    [events.RENDER],
    concurrency=1,
    timeout=6 * 3600,
    tune=lambda gen: GroupTuning("generation-render", gen.settings.render_concurrency),
)(render.on_render)
pipeline.handler_with_state("generation-reconciler", [events.RECONCILE], concurrency=2)(
    reconciler.on_reconcile
)


@pipeline.timeline
async def task_timeline(hub: Hub, subject_id: str) -> list[TimelineEntry] | None:
    """A task's transitions, oldest first (the console's task explorer)."""
    async with reader(hub.engine) as conn:
        rows = (
            await conn.execute(
                sa.select(task_events)
                .where(task_events.c.task_id == subject_id)
                .order_by(task_events.c.id)
            )
        ).all()
    if not rows:
        return None
    return [
        TimelineEntry(
            at_ms=int(r.at),
            source="transition",
            title=f"{r.from_status or '∅'} → {r.to_status}",
            detail={"cause": r.cause, "version": r.status_version, **(r.detail or {})},
        )
        for r in rows
    ]
