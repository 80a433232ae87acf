"""The credit ledger on SQLite and PostgreSQL: one row per business key, a balance that is
the ledger's sum, and reservations that never overdraw under concurrency."""

from __future__ import annotations

import asyncio

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from aigc_hub.pipelines.generation import ledger
from aigc_hub.pipelines.generation.models import credit_ledger


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


async def test_the_ledger_scanner_flags_an_open_reservation_of_a_finished_task(
    db_url: str,
) -> None:
    from aigc_hub.messaging.memory import MemoryBroker
    from aigc_hub.pipelines.generation import services, wiring
    from aigc_hub.pipelines.generation.config import GenerationSettings
    from aigc_hub.pipelines.generation.models import generation_tasks
    from aigc_hub.pipelines.generation.pipeline import pipeline as generation
    from aigc_hub.pipelines.generation.scanners import LedgerScanner
    from aigc_hub.reliability.scanners import ScannerRunner
    from aigc_hub.store.tables import audit_log
    from tests.support.hubs import hub_for

    async with hub_for(db_url, MemoryBroker(), [generation]) as hub:
        wiring.install(hub, wiring.build(hub, GenerationSettings()))
        await services.grant_credits(hub, tenant_id="t", amount=100, grant_id="g")
        body = services.CreateTask(model="local-v1", prompt="p", duration_s=1, resolution="160x90")
        task = await services.create_task(hub, tenant_id="t", body=body, idempotency_key="k")
        # a bug elsewhere ends the task without closing its reservation
        async with hub.engine.begin() as conn:
            await conn.execute(
                sa.update(generation_tasks)
                .where(generation_tasks.c.id == task["task_id"])
                .values(status="FAILED", terminal_at=0)
            )
        scanner = LedgerScanner(hub)
        findings = await scanner.find(hub.clock.now_ms())
        assert [f.target for f in findings] == [task["task_id"]]
        await ScannerRunner(hub.engine, hub.leases, hub.clock, [scanner]).run_once()
        async with hub.engine.connect() as conn:
            flagged = (
                await conn.execute(
                    sa.select(audit_log.c.target, audit_log.c.result).where(
                        audit_log.c.action == "scan.generation-ledger"
                    )
                )
            ).all()
        assert [(r.target, r.result) for r in flagged] == [
            (task["task_id"], "flagged_open_reservation")
        ]
