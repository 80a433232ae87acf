"""An avcc handler failing for good takes seed 000 §9.3.3's road, timed on a manual clock:
1 s, 2 s, 4 s in the consumer, then the delayed redelivery (the seed's retry topic, see
docs/topics.md), then ``topic.system.dlq`` with its reason; the dead letter counts for the P2
alert until it is re-injected through the admin API (the console's one click), and the work
is then coded once."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import sqlalchemy as sa
from prometheus_client import REGISTRY

from aigc_hub.bootstrap import Hub
from aigc_hub.core.clock import ManualClock
from aigc_hub.core.errors import RetryableError
from aigc_hub.core.failpoints import Failpoints
from aigc_hub.messaging import headers as h
from aigc_hub.messaging.base import Broker
from aigc_hub.messaging.catalog import DLQ_TOPIC
from aigc_hub.pipelines.avcc.models import avcc_log_leaves, avcc_record_events, avcc_records
from aigc_hub.reliability.dlq import DeadLetterStatus
from aigc_hub.tenancy import create_admin_key, create_tenant
from tests.support.avcc import AvccStack, apply, avcc_stack, noise_png
from tests.support.hubs import DELAYED, IN_PROCESS, make_broker, wait_until

CHAIN = "avcc-chain"
PENDING_TOPIC = "topic.chain.tx.pending"
FAILPOINT = "avcc.chain.after_submit"
REASON = "chain node unreachable"


@dataclass
class ClockedStack:
    """The avcc stack on a manual clock, and the parts the test drives."""

    stack: AvccStack
    broker: Broker
    clock: ManualClock
    failpoints: Failpoints

    @property
    def hub(self) -> Hub:
        return self.stack.hub

    @property
    def api_url(self) -> str:
        return self.stack.api_url


@contextlib.asynccontextmanager
async def clocked_stack(db_url: str, tmp_path: Path) -> AsyncIterator[ClockedStack]:
    """The avcc stack (embedded log, local blobs) on a ManualClock with the seeds' retry
    policies (no jitter); no scanners (their leases would run on the manual clock too)."""
    clock, failpoints = ManualClock(), Failpoints()
    broker = make_broker("embedded", tmp_path, clock)
    options = {"clock": clock, "in_process": IN_PROCESS, "delayed": DELAYED}
    async with avcc_stack(
        db_url, broker, tmp_path, failpoints=failpoints, scan=False, hub_options=options
    ) as stack:
        yield ClockedStack(stack, broker, clock, failpoints)


def retries(kind: str) -> float:
    """``aigc_hub_retries_total`` of the chain group: ``in_process`` or ``delayed``."""
    value = REGISTRY.get_sample_value("aigc_hub_retries_total", {"group": CHAIN, "kind": kind})
    return value or 0.0


async def pending_letters(hub: Hub) -> float | None:
    """``aigc_hub_dead_letters_pending`` of the chain group, refreshed as the lag monitor does
    (the P2 alert's input)."""
    await hub.dlq.refresh_pending_gauge()
    labels = {"group": CHAIN, "topic": PENDING_TOPIC}
    return REGISTRY.get_sample_value("aigc_hub_dead_letters_pending", labels)


async def retried(kind: str, count: float, timeout_s: float = 60) -> None:
    """Wait in real time (the manual clock stays put) until the chain group's ``kind``
    retries number ``count``."""
    deadline = time.monotonic() + timeout_s
    while retries(kind) < count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{kind} retries of {CHAIN} did not reach {count}")
        await asyncio.sleep(0.01)


async def dlq_announcement(broker: Broker, record_key: str) -> dict[str, str]:
    """The headers ``topic.system.dlq`` carries for the dead letter of ``record_key``."""
    consumer = broker.consumer("dlq-inspector", [DLQ_TOPIC])
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            for record in await consumer.fetch(100, timeout=0.1):
                if record.key == record_key:
                    return dict(record.headers)
        raise TimeoutError("no dead letter announced on topic.system.dlq")
    finally:
        await consumer.close()


async def test_a_failing_chain_step_backs_off_1_2_4_s_parks_dead_letters_and_replays_once(
    sqlite_url: str, tmp_path: Path
) -> None:
    def node_down() -> None:
        raise RetryableError(REASON)

    async with clocked_stack(sqlite_url, tmp_path) as stack:
        hub, clock = stack.hub, stack.clock
        stack.failpoints.arm(FAILPOINT, node_down)
        _tenant, key = await create_tenant(hub.engine, "studio")
        async with httpx.AsyncClient(
            base_url=stack.api_url, headers={"Authorization": f"Bearer {key}"}, trust_env=False
        ) as client:
            answer = await apply(client, noise_png(7))
            assert answer.status_code == 201, answer.text
            record_id = answer.json()["avcc_record_id"]

            # In the consumer: each failure is counted just before its back-off starts on the
            # clock, so the clock moves exactly when the wait has begun, by exactly that wait.
            in_process, delayed = retries("in_process"), retries("delayed")
            for n, back_off_s in enumerate((1, 2, 4), start=1):
                await retried("in_process", in_process + n)
                await clock.advance(back_off_s)
            # The fourth failure parks the record's key for delayed redelivery.
            await retried("delayed", delayed + 1)
            assert str(record_id) in await hub.redeliveries.parked_keys(CHAIN)

            async def dead() -> bool:
                return await hub.dlq.count() == 1

            await wait_until(dead, clock=clock, step_s=60.0)
            [letter] = await hub.dlq.list()
            assert (letter.consumer, letter.topic) == (CHAIN, PENDING_TOPIC)
            assert letter.key == str(record_id)
            assert letter.attempts == 1 + 3 + 7  # the first try, 3 in the consumer, 7 redeliveries
            assert letter.error_class == "RetryableError" and REASON in letter.error_message
            at = [int(f["at"]) for f in letter.history]
            gaps = [b - a for a, b in itertools.pairwise(at)]
            assert gaps[:3] == [1_000, 2_000, 4_000]
            # then 7 delayed redeliveries, each at least its due wait: a minute, doubling (the
            # test moves the clock by whole minutes while the runtime catches up, so no more)
            delays = [60_000 * 2**i for i in range(7)]
            assert len(gaps) == 10
            assert all(gap >= d for d, gap in zip(delays, gaps[3:], strict=True))
            announced = await dlq_announcement(stack.broker, str(record_id))
            assert announced[h.DLQ_ORIGINAL_TOPIC] == PENDING_TOPIC
            assert announced[h.DLQ_CONSUMER] == CHAIN
            assert REASON in announced[h.DLQ_ERROR_MESSAGE]
            assert announced[h.DLQ_ATTEMPTS] == "11"
            # what the P2 alert reads: one letter of an avcc topic waiting
            assert await pending_letters(hub) == 1
            snap = (await client.get(f"/v1/avcc/applications/{record_id}")).json()
            assert snap["status"] == "ANCHORING" and snap["avcc_code"] is None

            # the node is back; the operator re-injects the letter in one click
            stack.failpoints.disarm(FAILPOINT)
            admin = {"Authorization": f"Bearer {await create_admin_key(hub.engine)}"}
            replayed = await client.post(f"/admin/dlq/{letter.id}/replay", headers=admin)
            assert replayed.status_code == 200, replayed.text
            assert replayed.json()["status"] == DeadLetterStatus.REPLAYED.value

            async def coded() -> bool:
                snap = (await client.get(f"/v1/avcc/applications/{record_id}")).json()
                return bool(snap["status"] == "CODED")

            await wait_until(coded)
        assert await pending_letters(hub) == 0
        async with hub.engine.connect() as conn:
            moves = (
                await conn.execute(
                    sa.select(avcc_record_events.c.to_status).where(
                        avcc_record_events.c.record_id == record_id
                    )
                )
            ).scalars()
            leaves = (await conn.execute(sa.select(avcc_log_leaves.c.entry_key))).scalars()
            code = (
                await conn.execute(
                    sa.select(avcc_records.c.avcc_code).where(avcc_records.c.id == record_id)
                )
            ).scalar_one()
        assert list(moves) == ["APPLIED", "APPROVED", "ANCHORING", "ANCHORED", "CODED"]
        assert list(leaves) == [f"copyright_main:{record_id}"]  # 12 submits, one entry
        assert code is not None and code.startswith("MA.156.10005.8361/")
