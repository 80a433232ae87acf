"""Scanners: leadership under a lease, the outbox-age scanner, the expired-lease requeue scanner."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from aigc_hub.core.clock import ManualClock
from aigc_hub.core.envelope import Envelope
from aigc_hub.messaging.memory import MemoryBroker
from aigc_hub.reliability import audit
from aigc_hub.reliability.lease_scanner import ExpiredLeaseScanner
from aigc_hub.reliability.leases import DatabaseLeases
from aigc_hub.reliability.outbox import EventRoutes, OutboxWriter
from aigc_hub.reliability.outbox_scanner import OutboxAgeScanner
from aigc_hub.reliability.relay import Relay
from aigc_hub.reliability.scanners import Finding, ScannerRunner
from aigc_hub.store import tables
from tests.support import effects as fx

work_meta = sa.MetaData()
jobs = sa.Table(
    "test_jobs",
    work_meta,
    sa.Column("id", sa.String(36), primary_key=True),
    sa.Column("status", sa.String(20), nullable=False),
    sa.Column("status_version", sa.Integer, nullable=False),
    sa.Column("lease_expires_at", sa.BigInteger, nullable=True),
)


class CountingScanner:
    """A scanner that finds one thing per run and records who ran it."""

    name = "counting"
    interval_s = 1.0

    def __init__(self) -> None:
        self.runs = 0

    async def find(self, now_ms: int) -> list[Finding]:
        self.runs += 1
        return [Finding(f"thing-{self.runs}", {"now": now_ms})]

    async def repair(self, finding: Finding, now_ms: int) -> str:
        return "fixed"


async def test_only_the_lease_holder_runs_a_scanner_and_a_peer_takes_over(db: AsyncEngine) -> None:
    clock = ManualClock()
    leases = DatabaseLeases(db, clock)
    a_scanner, b_scanner = CountingScanner(), CountingScanner()
    a = ScannerRunner(db, leases, clock, [a_scanner], owner="a", lease_ttl_ms=3_000)
    b = ScannerRunner(db, leases, clock, [b_scanner], owner="b", lease_ttl_ms=3_000)
    for _ in range(3):
        await a.run_once()
        await b.run_once()
        await clock.advance(1.0)
    assert (a_scanner.runs, b_scanner.runs) == (3, 0)
    assert a.state["counting"].leader and not b.state["counting"].leader

    # "a" stops renewing (as a dead process would). Within one TTL "b" leads.
    for _ in range(4):
        await clock.advance(1.0)
        await b.run_once()
    assert b.state["counting"].leader and b_scanner.runs >= 1
    holder = await leases.holder("scanner:counting")
    assert holder is not None and holder[0] == "b"
    entries = await audit.recent(db, action="scan.counting", limit=50)
    assert {e.actor.split("@")[1] for e in entries} == {"a", "b"}
    assert all(e.result == "fixed" for e in entries)


async def test_outbox_age_scanner_republishes_when_the_relay_is_gone(db: AsyncEngine) -> None:
    clock = ManualClock()
    broker = MemoryBroker()
    routes = EventRoutes({fx.EVENT: fx.TOPIC})
    outbox = OutboxWriter(routes, clock)
    async with db.begin() as conn:
        await outbox.add(conn, [fx.request(f"k{i}", i) for i in range(5)])
    dead_relay = Relay(db, broker, clock, name="dead-relay", lease_ttl_ms=10_000)
    # the dead relay took the lease (SQLite) and then vanished without publishing
    await DatabaseLeases(db, clock).acquire("outbox-relay", "dead-relay", 10_000)
    scanner = OutboxAgeScanner(
        db, Relay(db, broker, clock, name="scanner-relay"), clock, max_age_s=60
    )
    runner = ScannerRunner(db, DatabaseLeases(db, clock), clock, [scanner], owner="s")
    assert dead_relay.published_total == 0

    await runner.run_once()
    assert await scanner.backlog() == (5, 0.0)  # young rows: nothing to do yet
    await clock.advance(120)
    runner.state["outbox-age"].next_run_ms = 0
    await runner.run_once()
    [entry] = await audit.recent(db, action="scan.outbox-age")
    backlog, _ = await scanner.backlog()
    if db.dialect.name == "sqlite":
        assert entry.result == "republished"  # the dead relay's lease had expired by then
    assert backlog == 0
    lag = await broker.lag("nobody", [fx.TOPIC])
    assert sum(p.end_offset for p in lag) == 5


async def test_expired_lease_rows_are_requeued_once_and_a_finished_row_is_left_alone(
    db: AsyncEngine,
) -> None:
    clock = ManualClock()
    async with db.begin() as conn:
        await conn.run_sync(work_meta.create_all)
        now = clock.now_ms()
        await conn.execute(
            jobs.insert(),
            [
                {
                    "id": "stale",
                    "status": "PROCESSING",
                    "status_version": 3,
                    "lease_expires_at": now - 1,
                },
                {
                    "id": "alive",
                    "status": "PROCESSING",
                    "status_version": 1,
                    "lease_expires_at": now + 60_000,
                },
                {"id": "done", "status": "DONE", "status_version": 5, "lease_expires_at": now - 1},
            ],
        )
    routes = EventRoutes({fx.EVENT: fx.TOPIC})
    outbox = OutboxWriter(routes, clock)

    def restart(row: dict[str, object]) -> Envelope:
        return Envelope.new(
            fx.EVENT, {"n": 0, "note": "requeued"}, key=str(row["id"]), source="scan"
        )

    scanner = ExpiredLeaseScanner(
        "jobs-lease",
        db,
        outbox,
        jobs,
        working_states=["PROCESSING"],
        requeue_state="QUEUED",
        requeue_event=restart,
    )
    findings = await scanner.find(clock.now_ms())
    assert [f.target for f in findings] == ["stale"]
    # the worker finishes just before the repair: the guarded transition loses, nothing changes
    async with db.begin() as conn:
        await conn.execute(sa.update(jobs).where(jobs.c.id == "stale").values(status_version=4))
    assert await scanner.repair(findings[0], clock.now_ms()) == "skipped"
    findings = await scanner.find(clock.now_ms())
    assert await scanner.repair(findings[0], clock.now_ms()) == "requeued"
    async with db.connect() as conn:
        status = dict((await conn.execute(sa.select(jobs.c.id, jobs.c.status))).all())
        keys = (await conn.execute(sa.select(tables.outbox.c.key))).scalars().all()
    assert status == {"stale": "QUEUED", "alive": "PROCESSING", "done": "DONE"}
    assert keys == ["stale"]
    assert await scanner.find(clock.now_ms()) == []
