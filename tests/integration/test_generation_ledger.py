"""The credit ledger on SQLite and PostgreSQL: one row per business key, a balance that is
the ledger's sum, and reservations that never overdraw under concurrency."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from aigc_hub.bootstrap import Hub
from aigc_hub.messaging.memory import MemoryBroker
from aigc_hub.pipelines.generation import ledger, records, services
from aigc_hub.pipelines.generation.models import credit_ledger, generation_tasks
from aigc_hub.pipelines.generation.pipeline import pipeline as generation
from aigc_hub.pipelines.generation.scanners import LedgerScanner
from aigc_hub.pipelines.generation.settings import GenerationSettings
from aigc_hub.pipelines.generation.state import STATE, build
from aigc_hub.pipelines.generation.states import TaskStatus
from aigc_hub.reliability.scanners import ScannerRunner
from aigc_hub.store.tables import audit_log
from tests.support.hubs import hub_for


async def test_each_action_happens_once_and_the_balance_is_the_ledger_sum(db: AsyncEngine) -> None:
    async with db.begin() as conn:
        assert await ledger.grant(conn, tenant_id="t", amount=100, grant_id="g1", now_ms=1)
        assert not await ledger.grant(conn, tenant_id="t", amount=100, grant_id="g1", now_ms=2)
        await ledger.reserve(conn, tenant_id="t", task_id="task-1", amount=30, now_ms=3)
        await ledger.reserve(conn, tenant_id="t", task_id="task-2", amount=30, now_ms=3)
        assert await ledger.settle(
            conn, tenant_id="t", task_id="task-1", reserved=30, actual=20, now_ms=4
        )
        assert not await ledger.settle(
            conn, tenant_id="t", task_id="task-1", reserved=30, actual=20, now_ms=5
        )
        assert await ledger.release(conn, tenant_id="t", task_id="task-2", reserved=30, now_ms=6)
        assert not await ledger.release(
            conn, tenant_id="t", task_id="task-2", reserved=30, now_ms=7
        )
        assert await ledger.refund(
            conn, tenant_id="t", refund_id="r1", amount=5, now_ms=8, task_id="task-1"
        )
        assert not await ledger.refund(
            conn, tenant_id="t", refund_id="r1", amount=5, now_ms=9, task_id="task-1"
        )
        assert await ledger.compensate(
            conn, tenant_id="t", compensation_id="c1", amount=7, now_ms=9
        )
        balance = await ledger.balance(conn, "t")
    assert balance == ledger.Balance(available=92, reserved=0, ledger_sum=92)


async def test_too_few_credits_is_refused_with_nothing_written(db: AsyncEngine) -> None:
    async with db.begin() as conn:
        await ledger.grant(conn, tenant_id="t", amount=10, grant_id="g", now_ms=1)
    with pytest.raises(ledger.InsufficientCredits) as caught:
        async with db.begin() as conn:
            await ledger.reserve(conn, tenant_id="t", task_id="big", amount=11, now_ms=2)
    assert (caught.value.available, caught.value.required) == (10, 11)
    async with db.connect() as conn:
        rows = (await conn.execute(sa.select(credit_ledger.c.type))).scalars().all()
        assert rows == ["GRANT"]
        assert (await ledger.balance(conn, "t")).available == 10


async def test_concurrent_reservations_never_overdraw(db: AsyncEngine) -> None:
    async with db.begin() as conn:
        await ledger.grant(conn, tenant_id="t", amount=50, grant_id="g", now_ms=1)

    async def try_reserve(n: int) -> bool:
        try:
            async with db.begin() as conn:
                await ledger.reserve(conn, tenant_id="t", task_id=f"task-{n}", amount=10, now_ms=2)
            return True
        except ledger.InsufficientCredits:
            return False

    results = await asyncio.gather(*(try_reserve(n) for n in range(12)))
    assert results.count(True) == 5
    async with db.connect() as conn:
        balance = await ledger.balance(conn, "t")
    assert balance == ledger.Balance(available=0, reserved=50, ledger_sum=0)


@contextlib.asynccontextmanager
async def finished_task_with_open_hold(
    db_url: str, status: TaskStatus = TaskStatus.FAILED
) -> AsyncIterator[tuple[Hub, str]]:
    """A hub whose one task ended in ``status`` with its reservation left open (a bug)."""
    pipeline = generation.with_state(lambda hub, _settings: build(hub, GenerationSettings()))
    async with hub_for(db_url, MemoryBroker(), [pipeline]) as hub:
        await services.grant_credits(hub, tenant_id="t", amount=100, grant_id="g")
        body = services.CreateTask(model="local-v1", prompt="p", duration_s=1, resolution="160x90")
        task = await services.create_task(
            hub.state_of(STATE), tenant_id="t", body=body, idempotency_key="k"
        )
        async with hub.engine.begin() as conn:
            await conn.execute(
                sa.update(generation_tasks)
                .where(generation_tasks.c.id == task["task_id"])
                .values(status=status.value, terminal_at=0)
            )
        yield hub, task["task_id"]


async def ledger_rows(hub: Hub, task_id: str) -> list[tuple[str, str, int]]:
    async with hub.engine.connect() as conn:
        rows = await conn.execute(
            sa.select(credit_ledger.c.type, credit_ledger.c.business_type, credit_ledger.c.amount)
            .where(credit_ledger.c.task_id == task_id)
            .order_by(credit_ledger.c.id)
        )
        return [(r.type, r.business_type, r.amount) for r in rows]


async def scanner_audit(hub: Hub) -> list[tuple[str, str]]:
    async with hub.engine.connect() as conn:
        rows = await conn.execute(
            sa.select(audit_log.c.target, audit_log.c.result)
            .where(audit_log.c.action == "scan.generation-ledger")
            .order_by(audit_log.c.id)
        )
        return [(r.target, r.result) for r in rows]


async def test_the_ledger_scanner_releases_an_open_hold_of_a_failed_task_once_and_audits_it(
    db_url: str,
) -> None:
    async with finished_task_with_open_hold(db_url) as (hub, task_id):
        scanner = LedgerScanner(hub)
        runner = ScannerRunner(hub.engine, hub.leases, hub.clock, [scanner])
        assert [f.target for f in await scanner.find(hub.clock.now_ms())] == [task_id]
        await runner.run_once()
        reserved = (await ledger_rows(hub, task_id))[0][2]
        assert reserved > 0
        assert await ledger_rows(hub, task_id) == [
            ("RESERVE", "generation.reserve", reserved),
            ("RELEASE", "generation.release", reserved),
        ]
        async with hub.engine.connect() as conn:
            balance = await ledger.balance(conn, "t")
        assert balance == ledger.Balance(available=100, reserved=0, ledger_sum=100)
        assert await scanner_audit(hub) == [(task_id, "released")]
        assert await scanner.find(hub.clock.now_ms()) == []
        runner.state[scanner.name].next_run_ms = 0  # due again now
        await runner.run_once()
        assert len(await ledger_rows(hub, task_id)) == 2
        assert await scanner_audit(hub) == [(task_id, "released")]


async def test_the_ledger_scanner_settles_an_open_hold_of_a_succeeded_task_at_its_estimate(
    db_url: str,
) -> None:
    async with finished_task_with_open_hold(db_url, TaskStatus.SUCCEEDED) as (hub, task_id):
        async with hub.engine.connect() as conn:
            task = await records.load(conn, task_id)
        assert task is not None and task["actual_cost"] is None
        estimate = int(task["estimated_cost"])
        await ScannerRunner(hub.engine, hub.leases, hub.clock, [LedgerScanner(hub)]).run_once()
        types = [(t, amount) for t, _, amount in await ledger_rows(hub, task_id)]
        assert types == [("RESERVE", int(task["reserved_amount"])), ("SETTLE", estimate)]
        async with hub.engine.connect() as conn:
            balance = await ledger.balance(conn, "t")
        assert balance == ledger.Balance(
            available=100 - estimate, reserved=0, ledger_sum=100 - estimate
        )
        assert await scanner_audit(hub) == [(task_id, "settled")]


async def test_a_normal_close_racing_the_ledger_scanner_leaves_one_closing_row(
    db_url: str,
) -> None:
    async with finished_task_with_open_hold(db_url) as (hub, task_id):
        scanner = LedgerScanner(hub)
        (finding,) = await scanner.find(hub.clock.now_ms())
        # the normal path's close lands between the scanner's query and its repair
        async with hub.engine.begin() as conn:
            task = await records.load(conn, task_id)
            assert task is not None
            kind, written = await records.close_ledger(
                conn, task, TaskStatus.FAILED, hub.clock.now_ms(), actual_cost=None
            )
        assert (kind, written) == (ledger.EntryType.RELEASE, True)
        assert await scanner.repair(finding, hub.clock.now_ms()) == "skipped"
        types = [t for t, _, _ in await ledger_rows(hub, task_id)]
        assert types == ["RESERVE", "RELEASE"]
        async with hub.engine.connect() as conn:
            assert (await ledger.balance(conn, "t")).available == 100
