"""Watchdogs of the media stages (seed 004 §3.10.2), each emitting an audited command that the
normal path carries out; none fixes anything itself.

* ``generation-output-expiry``: a task still OUTPUT_FETCHING whose provider URL stops working
  within ``urgent_fetch_within_s`` gets a fetch on the urgent queue (again at most every
  ``fetch_deadline_s``), so a backlog of ordinary fetches cannot make it miss the window.
* ``generation-orphans``: objects in the blob store that no asset row names (older than
  ``orphan_grace_s``, so an upload or fetch whose row is about to commit is not one), and
  READY asset rows whose object is gone. Each becomes a ``reconcile.command`` event; the
  ``generation-reconciler`` group checks again and deletes the orphan, or marks the row
  ``MISSING`` (see :mod:`.handlers.reconciler`); and uploads left UPLOADING past twice
  their URLs' life (``upload_abandoned``: the multipart upload is aborted, the asset
  REJECTED, so it stops counting against the tenant's limits).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from aigc_hub.core.envelope import Envelope
from aigc_hub.pipelines.generation import events
from aigc_hub.pipelines.generation.assets import KEY_KIND
from aigc_hub.pipelines.generation.models import assets, generation_tasks, provider_jobs
from aigc_hub.pipelines.generation.state import Generation
from aigc_hub.pipelines.generation.states import TaskStatus
from aigc_hub.reliability.scanners import Finding
from aigc_hub.store.engine import reader

if TYPE_CHECKING:
    from aigc_hub.bootstrap import Hub

#: Key prefixes of the objects generation owns: fetched outputs and their variants
#: (``tenants/<t>/generation/…``) and uploads (``t/<t>/asset/…``, see blobs.keys).
OWNED_PREFIXES = ("tenants/", "t/")
#: Second segment of a ``t/<tenant>/<kind>/…`` key that is generation's.
OWNED_KINDS = frozenset({KEY_KIND})


def owned(key: str) -> bool:
    """True for keys the generation pipeline stores (others belong to other pipelines)."""
    if key.startswith("tenants/"):
        return "/generation/" in key
    parts = key.split("/")
    return len(parts) > 3 and parts[0] == "t" and parts[2] in OWNED_KINDS


def owner_prefix(key: str) -> str:
    """What an asset row's ``object_key`` starts with when it owns ``key``: a variant's files
    are siblings of its main file under ``…/variants/<version>/<profile>/``."""
    head, sep, tail = key.partition("/variants/")
    if not sep:
        return key
    version, _, rest = tail.partition("/")
    profile = rest.split("/", 1)[0]
    return f"{head}/variants/{version}/{profile}/"


async def has_owner(hub: Hub, key: str) -> bool:
    """True when an asset row names ``key`` (or, for a variant's file, its variant)."""
    prefix = owner_prefix(key)
    condition = (
        assets.c.object_key == key
        if prefix == key
        else assets.c.object_key.startswith(prefix, autoescape=True)
    )
    async with reader(hub.engine) as conn:
        row = (await conn.execute(sa.select(assets.c.id).where(condition).limit(1))).first()
    return row is not None


def _command(event_type: str, payload: dict[str, Any], key: str, tenant: str | None) -> Envelope:
    return Envelope.new(event_type, payload, key=key, source="generation.scanner", tenant_id=tenant)


@dataclass
class ExpiryScanner:
    gen: Generation
    name: str = "generation-output-expiry"
    interval_s: float = 5.0
    batch: int = 200

    @property
    def hub(self) -> Hub:
        """The hub the pipeline's state belongs to."""
        return self.gen.hub

    async def find(self, now_ms: int) -> Sequence[Finding]:
        settings = self.gen.settings
        window_ms = int(settings.urgent_fetch_within_s * 1000)
        again_ms = int(settings.fetch_deadline_s * 1000)
        job = provider_jobs
        async with reader(self.hub.engine) as conn:
            rows = await conn.execute(
                sa.select(generation_tasks.c.id, job.c.attempt_id, job.c.output_expires_at)
                .join(job, job.c.attempt_id == generation_tasks.c.current_attempt_id)
                .where(
                    generation_tasks.c.status == TaskStatus.OUTPUT_FETCHING.value,
                    job.c.output_expires_at.is_not(None),
                    job.c.output_expires_at > now_ms,
                    job.c.output_expires_at <= now_ms + window_ms,
                    sa.or_(
                        job.c.urgent_fetch_at.is_(None), job.c.urgent_fetch_at <= now_ms - again_ms
                    ),
                )
                .order_by(job.c.output_expires_at)
                .limit(self.batch)
            )
            return [
                Finding(r.id, {"attempt_id": r.attempt_id, "expires_at": int(r.output_expires_at)})
                for r in rows
            ]

    async def repair(self, finding: Finding, now_ms: int) -> str:
        attempt_id = str(finding.detail["attempt_id"])
        async with self.hub.transaction() as conn:
            task = (
                await conn.execute(
                    sa.select(generation_tasks.c.tenant_id, generation_tasks.c.status).where(
                        generation_tasks.c.id == finding.target
                    )
                )
            ).first()
            if task is None or task.status != TaskStatus.OUTPUT_FETCHING.value:
                return "skipped"
            payload = events.FetchRequested(task_id=finding.target, attempt_id=attempt_id)
            command = _command(
                events.FETCH_URGENT_REQUESTED,
                payload.model_dump(),
                finding.target,
                str(task.tenant_id),
            )
            await self.hub.outbox.add(conn, [command])
            await conn.execute(
                sa.update(provider_jobs)
                .where(provider_jobs.c.attempt_id == attempt_id)
                .values(urgent_fetch_at=now_ms)
            )
        return "urgent_fetch_sent"


@dataclass
class OrphanScanner:
    gen: Generation
    name: str = "generation-orphans"
    interval_s: float = 600.0
    batch: int = 200
    #: Where the READY-row check goes on next (rows are checked a page per pass).
    _after_id: str = field(default="", repr=False)

    @property
    def hub(self) -> Hub:
        """The hub the pipeline's state belongs to."""
        return self.gen.hub

    async def find(self, now_ms: int) -> Sequence[Finding]:
        if self.hub.blobs is None:
            return []
        found = await self._abandoned_uploads(now_ms)
        found += await self._orphan_objects(now_ms)
        return [*found, *await self._missing_objects(self.batch - len(found))]

    async def _abandoned_uploads(self, now_ms: int) -> list[Finding]:
        older_than = now_ms - 2 * int(self.gen.settings.asset_upload_url_s * 1000)
        async with reader(self.hub.engine) as conn:
            rows = await conn.execute(
                sa.select(assets.c.id)
                .where(assets.c.status == "UPLOADING", assets.c.created_at < older_than)
                .order_by(assets.c.created_at)
                .limit(self.batch)
            )
            return [Finding(str(r.id), {"kind": "upload_abandoned"}) for r in rows]

    async def _orphan_objects(self, now_ms: int) -> list[Finding]:
        assert self.hub.blobs is not None
        grace_ms = int(self.gen.settings.orphan_grace_s * 1000)
        found: list[Finding] = []
        for prefix in OWNED_PREFIXES:
            async for item in self.hub.blobs.list_objects(prefix):
                if len(found) >= self.batch:
                    return found
                if not owned(item.key) or item.modified_ms > now_ms - grace_ms:
                    continue
                if not await self._has_owner(item.key):
                    found.append(Finding(item.key, {"kind": "orphan_object"}))
        return found

    async def _has_owner(self, key: str) -> bool:
        return await has_owner(self.hub, key)

    async def _missing_objects(self, limit: int) -> list[Finding]:
        assert self.hub.blobs is not None
        if limit <= 0:
            return []
        async with reader(self.hub.engine) as conn:
            rows = (
                await conn.execute(
                    sa.select(assets.c.id, assets.c.object_key)
                    .where(assets.c.status == "READY", assets.c.id > self._after_id)
                    .order_by(assets.c.id)
                    .limit(limit)
                )
            ).all()
        self._after_id = str(rows[-1].id) if len(rows) == limit else ""  # else wrap around
        found: list[Finding] = []
        for row in rows:
            if await self.hub.blobs.head(str(row.object_key)) is None:
                found.append(Finding(str(row.id), {"kind": "missing_object"}))
        return found

    async def repair(self, finding: Finding, now_ms: int) -> str:
        kind = finding.detail["kind"]
        event_type, payload, result = {
            "upload_abandoned": (
                events.UPLOAD_ABANDONED,
                events.UploadAbandoned(asset_id=finding.target),
                "abandoned_upload_abort_requested",
            ),
            "orphan_object": (
                events.ORPHAN_OBJECT_FOUND,
                events.OrphanObjectFound(key=finding.target),
                "orphan_delete_requested",
            ),
            "missing_object": (
                events.MISSING_OBJECT_FOUND,
                events.MissingObjectFound(asset_id=finding.target),
                "missing_object_reported",
            ),
        }[kind]
        command = _command(event_type, payload.model_dump(), finding.target, None)
        async with self.hub.transaction() as conn:
            await self.hub.outbox.add(conn, [command])
        return result
