"""avcc's watchdog on real parts: a work stuck waiting for the chain gets its
``chain.tx.pending`` again, with the same statement, and only once per period."""

from __future__ import annotations

import json
from pathlib import Path

import sqlalchemy as sa

from aigc_hub.pipelines.avcc.scanners import StuckRecords
from aigc_hub.store.tables import outbox
from tests.support.avcc import apply, avcc_stack, noise_png, wait_status
from tests.support.hubs import make_broker


async def test_a_work_stuck_before_the_chain_is_announced_again_with_the_same_statement(
    sqlite_url: str, tmp_path: Path
) -> None:
    broker = make_broker("embedded", tmp_path)
    no_chain = ["avcc-review", "avcc-code", "avcc-embed"]
    async with avcc_stack(sqlite_url, broker, tmp_path, groups=no_chain) as stack:
        async with stack.client(await stack.tenant("studio")) as client:
            record_id = (await apply(client, noise_png(42))).json()["avcc_record_id"]
            await wait_status(client, record_id, "ANCHORING")
        scanner = StuckRecords(stack.avcc)
        now = stack.hub.clock.now_ms()
        assert await scanner.find(now) == []  # not stuck yet: it only just moved
        later = now + stack.avcc.settings.stuck_after_s * 1000 + 1
        [finding] = await scanner.find(later)
        result = await scanner.repair(finding, later)
        again = await scanner.find(later + 1)
        async with stack.hub.engine.connect() as conn:
            pending = (
                (
                    await conn.execute(
                        sa.select(outbox.c.value).where(outbox.c.topic == "topic.chain.tx.pending")
                    )
                )
                .scalars()
                .all()
            )
    assert result == "re-announced:chain.tx.pending"
    assert again == []  # touched: the next pass waits another full period
    statements = [json.loads(value)["payload"]["statement"] for value in pending]
    assert len(statements) == 2 and statements[0] == statements[1]
