"""Bulk dead-letter replay as a background job with a progress row in ``admin_jobs``.

:meth:`ReplayJobs.start` snapshots the matching pending dead letters (everything up to the
newest id at that moment, at most ``max_items``), writes a ``dlq.replay`` job row and an
audit row, and replays the letters one by one in an asyncio task, at most ``rate_per_s``
per second (paced with the hub clock's ``sleep``), counting done and failed. Each replay is
audited by :meth:`DeadLetterStore.replay` itself with the job's actor. No HTTP here.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import asdict, dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from aigc_hub.core.clock import Clock
from aigc_hub.core.errors import HubError
from aigc_hub.core.ids import new_id_str
from aigc_hub.reliability import audit
from aigc_hub.reliability.dlq import DeadLetterFilter, DeadLetterStatus, DeadLetterStore
from aigc_hub.store import tables

log = logging.getLogger(__name__)

KIND = "dlq.replay"
QUEUED, RUNNING, DONE, FAILED = "queued", "running", "done", "failed"
#: Letters read per page while the job walks the snapshot.
PAGE = 100


@dataclass(frozen=True)
class Job:
    """One admin job's progress."""

    id: str
    kind: str
    status: str
    total: int
    done: int
    failed: int
    params: dict[str, Any]
    actor: str
    error: str | None
    created_at: int
    updated_at: int
    finished_at: int | None


class ReplayJobs:
    """Starts bulk replays and keeps references to their tasks until they finish."""

    def __init__(
        self,
        engine: AsyncEngine,
        dlq: DeadLetterStore,
        clock: Clock,
        *,
        rate_per_s: float = 50.0,
    ) -> None:
        self.engine = engine
        self.dlq = dlq
        self.clock = clock
        self.rate_per_s = rate_per_s
        self.tasks: dict[str, asyncio.Task[None]] = {}

    async def start(self, flt: DeadLetterFilter, *, max_items: int, actor: str) -> Job:
        """Create the job row and start replaying in the background; returns the queued job."""
        flt = DeadLetterFilter(**{**_filter_fields(flt), "status": DeadLetterStatus.PENDING})
        newest = await self.dlq.list(flt, limit=1)
        upto_id = newest[0].id if newest else 0
        total = min(max_items, await _count_upto(self.engine, flt, upto_id)) if newest else 0
        now = self.clock.now_ms()
        job_id = new_id_str()
        params = {"filter": _filter_fields(flt), "max": max_items, "upto_id": upto_id}
        job = Job(
            id=job_id,
            kind=KIND,
            status=QUEUED,
            total=total,
            done=0,
            failed=0,
            params=params,
            actor=actor,
            error=None,
            created_at=now,
            updated_at=now,
            finished_at=None,
        )
        async with self.engine.begin() as conn:
            await conn.execute(tables.admin_jobs.insert().values(**asdict(job)))
            await audit.record(
                conn,
                at=now,
                actor=actor,
                action="dlq.replay.bulk",
                target=job_id,
                result="accepted",
                detail={**params, "total": total},
            )
        task = asyncio.get_running_loop().create_task(
            self._run(job_id, flt, upto_id, total, actor), name=f"replay-job-{job_id}"
        )
        self.tasks[job_id] = task
        task.add_done_callback(lambda _t: self.tasks.pop(job_id, None))
        # The row as inserted: re-reading it would race the task, which may already be running.
        return job

    async def get(self, job_id: str) -> Job | None:
        """The job row, or None when unknown."""
        j = tables.admin_jobs
        async with self.engine.connect() as conn:
            row = (await conn.execute(sa.select(j).where(j.c.id == job_id))).first()
        if row is None:
            return None
        fields = dict(row._mapping)
        fields["params"] = fields.get("params") or {}
        return Job(**fields)

    async def wait(self, job_id: str) -> None:
        """Wait until the job's task (if still running here) has finished."""
        task = self.tasks.get(job_id)
        if task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(task)

    async def close(self) -> None:
        """Cancel running jobs (their rows are marked failed) and wait for them."""
        tasks = list(self.tasks.values())
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(
        self, job_id: str, flt: DeadLetterFilter, upto_id: int, total: int, actor: str
    ) -> None:
        done = failed = 0
        try:
            await self._update(job_id, status=RUNNING)
            after_id = upto_id + 1
            pace = 1.0 / self.rate_per_s if self.rate_per_s > 0 else 0.0
            while done + failed < total:
                page = await self.dlq.list(
                    flt, limit=min(PAGE, total - done - failed), after_id=after_id
                )
                if not page:
                    break
                for letter in page:
                    after_id = letter.id
                    try:
                        await self.dlq.replay(letter.id, actor=actor)
                        done += 1
                    except HubError as exc:
                        failed += 1
                        log.info("replay job %s: letter %s refused: %s", job_id, letter.id, exc)
                    await self._update(job_id, done=done, failed=failed)
                    if pace:
                        await self.clock.sleep(pace)
            await self._finish(job_id, DONE, None, actor, done, failed)
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                await asyncio.shield(self._finish(job_id, FAILED, "cancelled", actor, done, failed))
            raise
        except Exception as exc:
            log.exception("replay job %s failed", job_id)
            with contextlib.suppress(Exception):
                await self._finish(job_id, FAILED, f"{type(exc).__name__}", actor, done, failed)

    async def _finish(
        self, job_id: str, status: str, error: str | None, actor: str, done: int, failed: int
    ) -> None:
        now = self.clock.now_ms()
        j = tables.admin_jobs
        async with self.engine.begin() as conn:
            await conn.execute(
                sa.update(j)
                .where(j.c.id == job_id)
                .values(
                    status=status,
                    done=done,
                    failed=failed,
                    error=error,
                    updated_at=now,
                    finished_at=now,
                )
            )
            await audit.record(
                conn,
                at=now,
                actor=actor,
                action="dlq.replay.bulk",
                target=job_id,
                result=status,
                detail={"done": done, "failed": failed, "error": error},
            )

    async def _update(self, job_id: str, **values: Any) -> None:
        j = tables.admin_jobs
        async with self.engine.begin() as conn:
            await conn.execute(
                sa.update(j)
                .where(j.c.id == job_id)
                .values(**values, updated_at=self.clock.now_ms())
            )


def _filter_fields(flt: DeadLetterFilter) -> dict[str, Any]:
    fields = asdict(flt)
    fields.pop("ids", None)
    return fields


async def _count_upto(engine: AsyncEngine, flt: DeadLetterFilter, upto_id: int) -> int:
    """How many letters match ``flt`` with an id up to ``upto_id`` (the snapshot)."""
    d = tables.dead_letters
    stmt = sa.select(sa.func.count()).select_from(d).where(*flt.where(), d.c.id <= upto_id)
    async with engine.connect() as conn:
        return int((await conn.execute(stmt)).scalar_one())
