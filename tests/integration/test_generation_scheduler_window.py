"""The scheduler's wake-up reads a bounded window of the queue, on SQLite and PostgreSQL:
however many tasks are QUEUED, a pass reads at most ``PER_TENANT`` rows per tenant (and
``PASS_ROWS`` in all), and still dispatches in fair order."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from aigc_hub.core import ids
from aigc_hub.pipelines.generation.handlers import scheduler
from aigc_hub.pipelines.generation.models import generation_tasks
from aigc_hub.pipelines.generation.states import TaskStatus
from aigc_hub.store.engine import reader
from tests.support.fake_generation import FakeGeneration, fake_generation

TENANTS = ("t-a", "t-b", "t-c")


async def queue_copies(
    g: FakeGeneration,
    template: dict[str, Any],
    per_tenant: int,
    tenants: tuple[str, ...] = TENANTS,
) -> None:
    """Put ``per_tenant`` QUEUED copies of ``template`` in the table for each tenant, straight
    into the database (no TaskQueued events: the test runs the wake-up itself)."""
    now = g.clock.now_ms()
    rows = []
    for tenant in tenants:
        for n in range(per_tenant):
            task_id = ids.new_id_str()
            rows.append(
                template
                | {
                    "id": task_id,
                    "tenant_id": tenant,
                    "idempotency_key": task_id,
                    "status": TaskStatus.QUEUED.value,
                    "status_version": 0,
                    "current_attempt_id": None,
                    "attempt_count": 0,
                    "priority": 50 + n % 3,
                    "queued_at": now - per_tenant + n,
                    "deadline_at": now + 600_000,
                }
            )
    async with g.hub.engine.begin() as conn:
        await conn.execute(generation_tasks.insert(), rows)


async def one_wake_up(
    db_url: str, tmp_path: Path, per_tenant: int
) -> tuple[int, int, int, Counter[str]]:
    """Queue ``per_tenant`` tasks for each of three tenants, run one scheduler wake-up with
    five platform slots; the passes it ran, the rows they read, the slots that were free, and
    who got dispatched."""
    async with fake_generation(db_url, tmp_path, slots_platform=5, slots_tenant=5) as g:
        template_id = await g.create("template")
        await g.settle()  # the template task is at the (fake) provider: it holds one slot
        template = await g.task(template_id)
        await queue_copies(g, template, per_tenant)
        stats = g.gen.scheduler
        before = (stats.passes, stats.rows_read)
        free = 5 - await g.held_slots()

        await scheduler.schedule(g.gen)

        async with reader(g.hub.engine) as conn:
            dispatched = await conn.execute(
                sa.select(generation_tasks.c.tenant_id).where(
                    generation_tasks.c.status == TaskStatus.DISPATCHING.value
                )
            )
            by_tenant = Counter(str(r.tenant_id) for r in dispatched)
        return stats.passes - before[0], stats.rows_read - before[1], free, by_tenant


@pytest.mark.parametrize("per_tenant", [40, 1_500])
async def test_a_wake_up_reads_a_bounded_window_however_many_tasks_are_queued(
    db_url: str, tmp_path: Path, per_tenant: int
) -> None:
    passes, rows_read, free, by_tenant = await one_wake_up(db_url, tmp_path, per_tenant)

    window = len(TENANTS) * scheduler.PER_TENANT
    assert window <= scheduler.PASS_ROWS
    # 120 queued or 4,500 queued: the one pass reads the same window of 96 rows.
    assert (passes, rows_read) == (1, window)
    # The free slots went to the three tenants fairly: nobody got a second before each a first.
    assert free == 4
    assert sorted(by_tenant.values()) == [1, 1, 2]


async def test_a_window_the_pass_used_up_runs_another_pass(db_url: str, tmp_path: Path) -> None:
    roomy = {f"slots_{level}": 500 for level in ("platform", "tenant", "provider", "model")}
    async with fake_generation(db_url, tmp_path, **roomy) as g:
        template_id = await g.create("template")
        await g.settle()
        await queue_copies(g, await g.task(template_id), per_tenant=50)
        stats = g.gen.scheduler
        before = stats.passes

        dispatched = await scheduler.schedule(g.gen)

        # 150 queued, a window of 96: the first pass uses it up, a second takes the other 54.
        assert dispatched == 150
        assert stats.passes - before == 2


async def test_a_full_window_of_full_tenants_ends_the_wake_up(db_url: str, tmp_path: Path) -> None:
    tenants = tuple(f"t-{n}" for n in range(9))  # 9 x 32 rows: more than one window holds
    levels = {f"slots_{level}": 500 for level in ("platform", "provider", "model")}
    async with fake_generation(db_url, tmp_path, slots_tenant=1, **levels) as g:
        template_id = await g.create("template")
        await g.settle()
        await queue_copies(g, await g.task(template_id), per_tenant=40, tenants=tenants)
        stats = g.gen.scheduler
        before = stats.passes

        dispatched = await scheduler.schedule(g.gen)

        # One task per tenant; the second pass finds every tenant full and stops there.
        assert dispatched == len(tenants)
        assert stats.passes - before == 2
