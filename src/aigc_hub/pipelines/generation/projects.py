"""Editing projects and their revisions (seed 004 §3.3.3 item 10, §3.5.1): the tenant's
timeline, saved as immutable numbered revisions that an export can fix.

A save names the revision its edit started from (``base_revision``, 0 for the first): the
project's ``head_revision`` moves from that number to the next in one guarded update, so of
two editors saving from the same revision one wins and the other gets
:class:`StaleRevision` (409) and re-reads. A revision's timeline may reference only the
tenant's READY assets (checked in the saving transaction); saving never touches an export or
an asset.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import pydantic
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from aigc_hub.core import errors, ids
from aigc_hub.store.engine import reader

from . import assets
from .models import project_revisions, projects
from .state import Generation
from .timeline import TimelineV1

#: Most revisions a project keeps (a bound for the numbers a request may name).
MAX_REVISIONS: Final = 1_000_000


class ProjectNotFound(errors.NotFound):
    """No project (or revision) with this id for this tenant."""


class StaleRevision(errors.Conflict):
    """The project moved on since the edit's base revision: re-read it, merge, save again."""

    def __init__(self, base: int, head: int) -> None:
        self.base, self.head = base, head
        super().__init__(f"the edit starts from revision {base}, the project is at {head}")


class CreateProject(pydantic.BaseModel):
    """A new project, with its first timeline when one is given."""

    model_config = pydantic.ConfigDict(
        extra="forbid", json_schema_extra={"examples": [{"name": "Holiday trip"}]}
    )

    name: str = pydantic.Field(min_length=1, max_length=200)
    timeline: TimelineV1 | None = None


class SaveRevision(pydantic.BaseModel):
    """A timeline saved over ``base_revision`` (the revision the edit started from)."""

    model_config = pydantic.ConfigDict(extra="forbid")

    base_revision: int = pydantic.Field(
        ge=0, lt=MAX_REVISIONS, description="0 when the project has none yet"
    )
    timeline: TimelineV1


class RevisionView(pydantic.BaseModel):
    """One saved revision: its number and its timeline."""

    revision_id: str
    number: int
    timeline: TimelineV1
    created_at_ms: int


class ProjectView(pydantic.BaseModel):
    """A project and its newest revision (None before the first save)."""

    project_id: str
    name: str
    head_revision: int
    revision: RevisionView | None = None
    created_at_ms: int
    updated_at_ms: int


class ProjectList(pydantic.BaseModel):
    """Projects, newest first; ``next_before`` pages on."""

    items: list[ProjectView]
    next_before: str | None = None


def _revision_view(row: Mapping[str, Any]) -> RevisionView:
    return RevisionView(
        revision_id=row["id"],
        number=row["number"],
        timeline=TimelineV1.model_validate(row["timeline"]),
        created_at_ms=row["created_at"],
    )


def _project_view(row: Mapping[str, Any], revision: RevisionView | None) -> ProjectView:
    return ProjectView(
        project_id=row["id"],
        name=row["name"],
        head_revision=row["head_revision"],
        revision=revision,
        created_at_ms=row["created_at"],
        updated_at_ms=row["updated_at"],
    )


async def _project(conn: AsyncConnection, tenant_id: str, project_id: str) -> dict[str, Any]:
    row = (
        (
            await conn.execute(
                sa.select(projects).where(
                    projects.c.id == project_id, projects.c.tenant_id == tenant_id
                )
            )
        )
        .mappings()
        .first()
    )
    if row is None:
        raise ProjectNotFound(f"project {project_id} not found")
    return dict(row)


async def _revision(conn: AsyncConnection, project_id: str, number: int) -> RevisionView | None:
    t = project_revisions
    row = (
        (await conn.execute(sa.select(t).where(t.c.project_id == project_id, t.c.number == number)))
        .mappings()
        .first()
    )
    return None if row is None else _revision_view(dict(row))


async def _append(
    conn: AsyncConnection,
    tenant_id: str,
    project_id: str,
    base: int,
    timeline: TimelineV1,
    now: int,
) -> None:
    """Revision ``base + 1`` of the project, if its head is still ``base``."""
    await assets.check_reference_assets(conn, tenant_id, timeline.asset_ids())
    moved = await conn.execute(
        projects.update()
        .where(projects.c.id == project_id, projects.c.head_revision == base)
        .values(head_revision=base + 1, updated_at=now)
    )
    if moved.rowcount != 1:
        head = await conn.scalar(
            sa.select(projects.c.head_revision).where(projects.c.id == project_id)
        )
        raise StaleRevision(base, int(head or 0))
    await conn.execute(
        project_revisions.insert().values(
            id=ids.new_id_str(),
            project_id=project_id,
            tenant_id=tenant_id,
            number=base + 1,
            schema_version=timeline.schema_version,
            timeline=timeline.model_dump(mode="json"),
            created_at=now,
        )
    )


async def create_project(gen: Generation, *, tenant_id: str, body: CreateProject) -> ProjectView:
    """A new project (revision 1 when ``body`` has a timeline). InvalidInput when the
    timeline references an asset that is not the tenant's or not READY."""
    hub = gen.hub
    project_id, now = ids.new_id_str(), hub.clock.now_ms()
    async with hub.transaction() as conn:
        await conn.execute(
            projects.insert().values(
                id=project_id,
                tenant_id=tenant_id,
                name=body.name,
                head_revision=0,
                created_at=now,
                updated_at=now,
            )
        )
        if body.timeline is not None:
            await _append(conn, tenant_id, project_id, 0, body.timeline, now)
        row = await _project(conn, tenant_id, project_id)
        revision = await _revision(conn, project_id, row["head_revision"])
    return _project_view(row, revision)


async def save_revision(
    gen: Generation, *, tenant_id: str, project_id: str, body: SaveRevision
) -> RevisionView:
    """Save ``body.timeline`` as the revision after ``body.base_revision``. ProjectNotFound,
    StaleRevision, InvalidInput (an asset that is not the tenant's READY one)."""
    hub = gen.hub
    now = hub.clock.now_ms()
    async with hub.transaction() as conn:
        await _project(conn, tenant_id, project_id)
        await _append(conn, tenant_id, project_id, body.base_revision, body.timeline, now)
        revision = await _revision(conn, project_id, body.base_revision + 1)
    assert revision is not None
    return revision


async def get_project(gen: Generation, *, tenant_id: str, project_id: str) -> ProjectView:
    """The project with its newest revision; ProjectNotFound (also for another tenant's)."""
    async with reader(gen.hub.engine) as conn:
        row = await _project(conn, tenant_id, project_id)
        revision = await _revision(conn, project_id, row["head_revision"])
    return _project_view(row, revision)


async def get_revision(
    gen: Generation, *, tenant_id: str, project_id: str, number: int
) -> RevisionView:
    """Revision ``number`` of the project; ProjectNotFound when either does not exist."""
    async with reader(gen.hub.engine) as conn:
        await _project(conn, tenant_id, project_id)
        revision = await _revision(conn, project_id, number)
    if revision is None:
        raise ProjectNotFound(f"project {project_id} has no revision {number}")
    return revision


async def list_projects(
    gen: Generation, *, tenant_id: str, limit: int, before: str | None
) -> ProjectList:
    """The tenant's projects, newest first (ids order by creation), before id ``before``;
    without their timelines (read one project for that)."""
    query = sa.select(projects).where(projects.c.tenant_id == tenant_id)
    if before is not None:
        query = query.where(projects.c.id < before)
    query = query.order_by(projects.c.id.desc()).limit(limit + 1)
    async with reader(gen.hub.engine) as conn:
        rows = [dict(r) for r in (await conn.execute(query)).mappings()]
    page = [_project_view(r, None) for r in rows[:limit]]
    more = len(rows) > limit
    return ProjectList(items=page, next_before=page[-1].project_id if more and page else None)
