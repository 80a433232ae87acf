"""Exports of a project (seed 004 §3.3.3 item 10, §3.4's export chain, §3.8.1): a fixed
revision rendered with a render profile into a new asset, by the render worker.

An export is a ``render_jobs`` row keyed by ``(project_revision_id, render_profile,
idempotency_key)``: the same click twice finds the same job. Requesting one compiles the
revision's render graph first, so a timeline its sources cannot give (a clip past its
source's end, music from an asset without sound) is refused now (422), not by a failed
render later; the job and its ``render.execute`` event are written in one transaction.

States: ``queued → running → succeeded | failed``, and ``cancelled`` from either of the first
two. A running export renders its graph, stores the file as an ``export`` asset and then
waits for the media worker's playback variants of it (``current_node`` ``variants``); it
succeeds once they exist. A failed export names the node that failed; it never touches the
sources or another export.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import StrEnum
from typing import Any, Final

import pydantic
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from aigc_hub.core import ids
from aigc_hub.core.envelope import Envelope
from aigc_hub.reliability.notifications import Notification, notification_envelope
from aigc_hub.store.dialects import dialect_of
from aigc_hub.store.engine import reader

from . import assets, events, render_graph
from .models import assets as assets_table
from .models import project_revisions, render_jobs
from .projects import ProjectNotFound, _project
from .render_graph import RenderGraph, SourceFacts
from .state import Generation
from .timeline import TimelineV1

SUBJECT: Final = "render_job"


class ExportStatus(StrEnum):
    """Where an export is."""

    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


#: States an export still moves from.
OPEN: Final = (ExportStatus.QUEUED, ExportStatus.RUNNING)


class ExportNotFound(ProjectNotFound):
    """No export with this id in this tenant's project."""


class RequestExport(pydantic.BaseModel):
    """Render a revision (the newest when ``revision`` is absent) with a render profile."""

    model_config = pydantic.ConfigDict(
        extra="forbid", json_schema_extra={"examples": [{"profile": "hd"}]}
    )

    revision: int | None = pydantic.Field(None, ge=1, description="default: the newest")
    profile: str = pydantic.Field(
        "hd", description=f"one of: {', '.join(render_graph.RENDER_PROFILES)}", max_length=40
    )


class ExportView(pydantic.BaseModel):
    """An export: its revision, profile and state; its nodes' counts; the asset when done."""

    export_id: str
    project_id: str
    revision: int
    profile: str
    status: ExportStatus
    status_reason: str | None = None
    failed_node: str | None = None
    current_node: str | None = None
    nodes_total: int
    nodes_ran: int
    nodes_reused: int
    progress: float = pydantic.Field(
        ge=0, le=1, description="nodes done / (nodes + 1): the playback variants are the last step"
    )
    asset_id: str | None = None
    created_at_ms: int
    updated_at_ms: int


class ExportList(pydantic.BaseModel):
    """A project's exports, newest first."""

    items: list[ExportView]


def view(row: Mapping[str, Any]) -> ExportView:
    """The API's view of a ``render_jobs`` row."""
    total = int(row["nodes_total"] or 0)
    done = int(row["nodes_ran"] or 0) + int(row["nodes_reused"] or 0)
    return ExportView(
        export_id=row["id"],
        project_id=row["project_id"],
        revision=row["revision_number"],
        profile=row["render_profile"],
        status=ExportStatus(row["status"]),
        status_reason=row["status_reason"],
        failed_node=row["failed_node"],
        current_node=row["current_node"],
        nodes_total=total,
        nodes_ran=row["nodes_ran"],
        nodes_reused=row["nodes_reused"],
        # the variants step after the last node counts as one more
        progress=1.0 if row["status"] == ExportStatus.SUCCEEDED else min(1.0, done / (total + 1)),
        asset_id=row["asset_id"],
        created_at_ms=row["created_at"],
        updated_at_ms=row["updated_at"],
    )


def notification(row: Mapping[str, Any], at: int, *, kind: str = "status") -> Envelope:
    """The hint that the export ``row`` (as it is now) moved; clients re-read it."""
    seen = view(row)
    note = Notification(
        tenant_id=str(row["tenant_id"]),
        subject_type=SUBJECT,
        subject_id=str(row["id"]),
        kind="progress" if kind == "progress" else "status",
        status=seen.status.value,
        stage=seen.current_node,
        progress=seen.progress,
        occurred_at_ms=at,
        data={"project_id": seen.project_id, "failed_node": seen.failed_node},
    )
    return notification_envelope(note, source="generation")


async def source_facts(
    conn: AsyncConnection, tenant_id: str, asset_ids: Sequence[str]
) -> dict[str, SourceFacts]:
    """What the render graph needs of the tenant's READY assets among ``asset_ids`` (an
    asset that is not one of them is left out: the compiler names it)."""
    if not asset_ids:
        return {}
    t = assets_table
    rows = (
        await conn.execute(
            sa.select(t).where(
                t.c.id.in_(list(asset_ids)),
                t.c.tenant_id == tenant_id,
                t.c.status == assets.AssetStatus.READY,
            )
        )
    ).mappings()
    found: dict[str, SourceFacts] = {}
    for row in rows:
        content = str(row["content_type"] or "")
        moving = row["width"] is not None and not content.startswith("image/")
        found[row["id"]] = SourceFacts(
            asset_id=row["id"],
            # an asset's bytes never change under its id: the id stands in for a missing hash
            sha256=row["checksum_value"] or f"asset:{row['id']}",
            duration_ms=row["duration_ms"],
            has_video=moving,
            has_audio=row["audio_codec"] is not None,
        )
    return found


async def graph_of(
    conn: AsyncConnection, tenant_id: str, timeline: TimelineV1, profile: str
) -> RenderGraph:
    """The revision's render graph for ``profile``; InvalidRenderInput when it cannot be."""
    chosen = render_graph.profile_named(profile)
    facts = await source_facts(conn, tenant_id, timeline.asset_ids())
    return render_graph.compile_graph(timeline, chosen, facts)


async def request_export(
    gen: Generation,
    *,
    tenant_id: str,
    project_id: str,
    body: RequestExport,
    idempotency_key: str,
) -> tuple[ExportView, bool]:
    """The export of the revision with the profile (created, with its ``render.execute``
    event, or found by its key); True when created. ProjectNotFound, InvalidRenderInput."""
    hub = gen.hub
    now = hub.clock.now_ms()
    async with hub.transaction() as conn:
        project = await _project(conn, tenant_id, project_id)
        number = body.revision or int(project["head_revision"])
        revision = (
            (
                await conn.execute(
                    sa.select(project_revisions).where(
                        project_revisions.c.project_id == project_id,
                        project_revisions.c.number == number,
                    )
                )
            )
            .mappings()
            .first()
        )
        if revision is None:
            raise ProjectNotFound(f"project {project_id} has no revision {number}")
        timeline = TimelineV1.model_validate(revision["timeline"])
        graph = await graph_of(conn, tenant_id, timeline, body.profile)
        job_id = ids.new_id_str()
        inserted = await conn.execute(
            dialect_of(conn)
            .insert(render_jobs)
            .values(
                id=job_id,
                tenant_id=tenant_id,
                project_id=project_id,
                project_revision_id=revision["id"],
                revision_number=number,
                render_profile=body.profile,
                idempotency_key=idempotency_key,
                status=ExportStatus.QUEUED,
                nodes_total=len(graph.nodes),
                nodes_ran=0,
                nodes_reused=0,
                cpu_ms=0,
                created_at=now,
                updated_at=now,
            )
            .on_conflict_do_nothing()
            .returning(render_jobs.c.id)
        )
        # RETURNING says whether this statement inserted the row (rowcount did not on PG)
        created = inserted.first() is not None
        found = (
            (
                await conn.execute(
                    sa.select(render_jobs).where(
                        render_jobs.c.project_revision_id == revision["id"],
                        render_jobs.c.render_profile == body.profile,
                        render_jobs.c.idempotency_key == idempotency_key,
                    )
                )
            )
            .mappings()
            .one()
        )
        row = dict(found)
        if created:
            requested = events.RenderRequested(job_id=job_id)
            await hub.outbox.add(
                conn,
                [
                    Envelope.new(
                        events.RENDER_REQUESTED,
                        requested.model_dump(),
                        key=job_id,
                        source="generation.exports",
                        tenant_id=tenant_id,
                        correlation_id=job_id,
                    ),
                    notification(row, now),
                ],
            )
    return view(row), created


async def load_job(conn: AsyncConnection, job_id: str) -> dict[str, Any] | None:
    """The ``render_jobs`` row ``job_id`` as it is now, or None."""
    found = await conn.execute(sa.select(render_jobs).where(render_jobs.c.id == job_id))
    row = found.mappings().first()
    return None if row is None else dict(row)


async def move_job(
    conn: AsyncConnection,
    job_id: str,
    *,
    while_in: Sequence[ExportStatus],
    now: int,
    kind: str = "status",
    **values: Any,
) -> Envelope | None:
    """Set ``values`` on the export while it is in one of ``while_in``; the notification of
    its new state, or None when it had moved on (cancelled, ended) and nothing changed."""
    moved = await conn.execute(
        render_jobs.update()
        .where(render_jobs.c.id == job_id, render_jobs.c.status.in_([s.value for s in while_in]))
        .values(updated_at=now, **values)
    )
    if moved.rowcount != 1:
        return None
    row = await load_job(conn, job_id)
    assert row is not None
    return notification(row, now, kind=kind)


async def _job(
    conn: AsyncConnection, tenant_id: str, project_id: str, export_id: str
) -> dict[str, Any]:
    t = render_jobs
    row = (
        (
            await conn.execute(
                sa.select(t).where(
                    t.c.id == export_id, t.c.tenant_id == tenant_id, t.c.project_id == project_id
                )
            )
        )
        .mappings()
        .first()
    )
    if row is None:
        raise ExportNotFound(f"export {export_id} not found")
    return dict(row)


async def get_export(
    gen: Generation, *, tenant_id: str, project_id: str, export_id: str
) -> ExportView:
    """One export of the tenant's project; ExportNotFound."""
    async with reader(gen.hub.engine) as conn:
        return view(await _job(conn, tenant_id, project_id, export_id))


async def list_exports(gen: Generation, *, tenant_id: str, project_id: str) -> ExportList:
    """The project's exports, newest first (at most 200); ProjectNotFound."""
    t = render_jobs
    async with reader(gen.hub.engine) as conn:
        await _project(conn, tenant_id, project_id)
        rows = (
            await conn.execute(
                sa.select(t)
                .where(t.c.tenant_id == tenant_id, t.c.project_id == project_id)
                .order_by(t.c.id.desc())
                .limit(200)
            )
        ).mappings()
        return ExportList(items=[view(dict(r)) for r in rows])


async def cancel_export(
    gen: Generation, *, tenant_id: str, project_id: str, export_id: str
) -> ExportView:
    """Cancel an export still queued or running (the worker stops its running node); an
    export already ended is answered as it is."""
    hub = gen.hub
    now = hub.clock.now_ms()
    async with hub.transaction() as conn:
        await _job(conn, tenant_id, project_id, export_id)
        note = await move_job(
            conn,
            export_id,
            while_in=OPEN,
            now=now,
            status=ExportStatus.CANCELLED,
            current_node=None,
        )
        if note is not None:
            await hub.outbox.add(conn, [note])
        row = await _job(conn, tenant_id, project_id, export_id)
    return view(row)
