"""settlement-svc end to end on embedded defaults (SQLite, the embedded log, the real API):
works coded through the normal flow, purchases published through the outbox as the gateway
does, booked by ``avcc-settlement``, periods sealed by the ``avcc-settlement-periods``
scanner, batches notarized by ``avcc-chain`` and confirmed back."""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import sqlalchemy as sa
from typer.testing import CliRunner

from aigc_hub.bootstrap import Hub
from aigc_hub.cli.main import app as cli
from aigc_hub.core.envelope import Envelope
from aigc_hub.pipelines.avcc import events, settlement_services
from aigc_hub.pipelines.avcc.models import avcc_log_leaves
from aigc_hub.pipelines.avcc.receipts import Receipt, verify_receipt
from aigc_hub.pipelines.avcc.settlement import Period, period_of
from aigc_hub.pipelines.avcc.settlement_proofs import verify_line
from aigc_hub.pipelines.avcc.settlement_scanners import SettlementPeriods
from aigc_hub.pipelines.avcc.settlement_tables import avcc_settlement_periods, settlement_ledger
from tests.support.avcc import AvccStack, apply, avcc_stack, noise_png, wait_settled
from tests.support.hubs import make_broker, wait_until

LINES = settlement_ledger.entries
SETTINGS = {"settlement_period_s": 60, "settlement_grace_s": 0}


@dataclass(frozen=True)
class Work:
    tenant_key: str
    tenant_id: str
    code: str


async def coded_works(stack: AvccStack, per_tenant: Sequence[int]) -> list[Work]:
    """Works applied for and coded through the normal flow: ``per_tenant[i]`` of tenant i."""
    works: list[Work] = []
    for t, count in enumerate(per_tenant):
        key = await stack.tenant(f"studio-{t}")
        async with stack.client(key) as client:
            ids = []
            for i in range(count):
                answer = await apply(client, noise_png(500 + 10 * t + i))
                assert answer.status_code == 201, answer.text
                ids.append(answer.json()["avcc_record_id"])
            settled = await wait_settled(client, ids)
        records = {r["id"]: r for r in await stack.records()}
        for record_id in ids:
            assert settled[record_id]["status"] == "CODED"
            row = records[record_id]
            works.append(Work(key, row["tenant_id"], row["avcc_code"]))
    return works


def purchase(
    code: str, fen: int, at_ms: int, node: str = "8361", purchase_id: str | None = None
) -> events.PurchaseRecorded:
    return events.PurchaseRecorded(
        purchase_id=purchase_id or str(uuid.uuid4()),
        avcc_code=code,
        platform_node=node,
        user_hash="sha256:user",
        revenue_fen=fen,
        occurred_at=at_ms,
    )


def envelope_of(p: events.PurchaseRecorded) -> Envelope:
    """The gateway's event for a purchase: keyed by code."""
    return Envelope.new(
        events.PURCHASE_RECORDED, p.model_dump(), key=p.avcc_code, source=events.GATEWAY_SVC
    )


async def publish(hub: Hub, envelopes: Sequence[Envelope]) -> None:
    """Through the outbox, as the playback gateway writes them."""
    async with hub.transaction() as conn:
        await hub.outbox.add(conn, list(envelopes))


async def line_count(hub: Hub, **where: Any) -> int:
    async with hub.engine.connect() as conn:
        query = sa.select(sa.func.count()).select_from(LINES)
        for column, value in where.items():
            query = query.where(LINES.c[column] == value)
        return int((await conn.execute(query)).scalar_one())


async def wait_lines(hub: Hub, count: int, **where: Any) -> None:
    async def booked() -> bool:
        return await line_count(hub, **where) >= count

    await wait_until(booked, timeout=60)
    assert await line_count(hub, **where) == count


async def seal_due(stack: AvccStack) -> list[str]:
    """One pass of the sealing scanner (the runner's leader lease is the backbone's)."""
    scanner = SettlementPeriods(stack.avcc)
    now = int(time.time() * 1000)
    return [await scanner.repair(f, now) for f in await scanner.find(now)]


async def period_row(hub: Hub, period: str) -> dict[str, Any]:
    async with hub.engine.connect() as conn:
        row = (
            (
                await conn.execute(
                    sa.select(avcc_settlement_periods).where(
                        avcc_settlement_periods.c.period == period
                    )
                )
            )
            .mappings()
            .one()
        )
    return dict(row)


async def wait_anchored(hub: Hub, periods: Sequence[str]) -> None:
    async def anchored() -> bool:
        statuses = [(await period_row(hub, p))["status"] for p in periods]
        return statuses == ["ANCHORED"] * len(periods)

    await wait_until(anchored, timeout=60)


def two_past_periods() -> tuple[Period, Period]:
    """The two 60 s periods before the one before now: both over, grace 0, so both seal."""
    first = period_of(int(time.time() * 1000) - 3 * 60_000, 60)
    return first, first.next()


def leaf(line: dict[str, Any]) -> bytes:
    """A line's leaf hash written out from the documented fields (not the module's code)."""
    fields = {
        "v": 1,
        **{
            k: line[k]
            for k in (
                "id",
                "period",
                "account",
                "amount",
                "purchase_id",
                "avcc_code",
                "record_id",
                "platform_node",
                "occurred_at",
            )
        },
    }
    text = json.dumps(fields, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(b"\x00" + text.encode()).digest()


def root(leaves: list[bytes]) -> bytes:
    """RFC 9162's Merkle tree hash, written out recursively (independent of merkle.py)."""
    if not leaves:
        return hashlib.sha256(b"").digest()
    if len(leaves) == 1:
        return leaves[0]
    k = 1 << ((len(leaves) - 1).bit_length() - 1)
    return hashlib.sha256(b"\x01" + root(leaves[:k]) + root(leaves[k:])).digest()


async def test_purchases_of_3_works_over_2_periods_reconcile_per_tenant_and_anchor_every_line(
    sqlite_url: str, tmp_path: Path
) -> None:
    broker = make_broker("embedded", tmp_path)
    async with avcc_stack(sqlite_url, broker, tmp_path, scan=False, **SETTINGS) as stack:
        hub = stack.hub
        works = await coded_works(stack, [2, 1])
        p1, p2 = two_past_periods()
        # (work, fen, period, node): amounts with remainders at 70 % and 20 %.
        plan = [
            (0, 999, p1, "8361"),
            (0, 1, p1, "1024"),
            (1, 12_345, p1, "8361"),
            (2, 333, p1, "1024"),
            (0, 500, p2, "8361"),
            (1, 7, p2, "8361"),
            (2, 100_003, p2, "1024"),
            (2, 19, p2, "8361"),
        ]
        bought = [
            (works[w], purchase(works[w].code, fen, p.starts_at + 1000 * i, node), p)
            for i, (w, fen, p, node) in enumerate(plan)
        ]
        await publish(hub, [envelope_of(b) for _, b, _ in bought])
        await wait_lines(hub, 3 * len(plan))
        assert sorted(await seal_due(stack)) == ["sealed:12", "sealed:12"]
        await wait_anchored(hub, [p1.id, p2.id])

        statements: dict[tuple[str, str], dict[str, Any]] = {}
        for work in works:
            async with stack.client(work.tenant_key) as client:
                for p in (p1, p2):
                    answer = await client.get(f"/v1/avcc/settlements/{p.id}")
                    assert answer.status_code == 200, answer.text
                    statements[(work.tenant_id, p.id)] = answer.json()
        reconciled = {p.id: await settlement_services.reconcile(hub.engine, p.id) for p in (p1, p2)}
        async with hub.engine.connect() as conn:
            ledger = [dict(r) for r in (await conn.execute(sa.select(LINES))).mappings()]
            leaves = set((await conn.execute(sa.select(avcc_log_leaves.c.entry_key))).scalars())
        rows = {p.id: await period_row(hub, p.id) for p in (p1, p2)}
        proofs = [
            await settlement_services.line_proof(
                hub.engine, line["period"], line["id"], tenant_id=None
            )
            for line in ledger
        ]
        public_key = stack.avcc.chain.public_key_pem()
        # code-svc read the settlement confirmations too, and let them be.
        dead_letters = await hub.dlq.count()

    assert dead_letters == 0
    for p in (p1, p2):
        mine = [(w, b) for w, b, q in bought if q == p]
        # Each tenant's statement: its 70 % of its works' purchases, to the fen, = its lines.
        for tenant_id in {w.tenant_id for w in works}:
            expected = [b.revenue_fen * 7000 // 10_000 for w, b in mine if w.tenant_id == tenant_id]
            got = statements[(tenant_id, p.id)]
            assert got["total_fen"] == sum(expected) and got["line_count"] == len(expected)
            ledger_sum = sum(
                line["amount"]
                for line in ledger
                if line["period"] == p.id and line["account"] == f"tenant:{tenant_id}"
            )
            assert got["total_fen"] == ledger_sum
            assert got["status"] == "ANCHORED" and got["lines_root"] == rows[p.id]["lines_root"]
        # The nodes' 20 %, the platform the rest; the period's total is the purchases'.
        accounts = reconciled[p.id].accounts
        for node in ("8361", "1024"):
            node_fen = sum(
                b.revenue_fen * 2000 // 10_000 for _, b in mine if b.platform_node == node
            )
            assert accounts.get(f"node:{node}", 0) == node_fen
        revenue = sum(b.revenue_fen for _, b in mine)
        tenants_and_nodes = sum(v for k, v in accounts.items() if k != "platform")
        assert accounts["platform"] == revenue - tenants_and_nodes
        assert rows[p.id]["total_fen"] == revenue == reconciled[p.id].lines_total_fen
        assert reconciled[p.id].ok, reconciled[p.id].problems
        assert reconciled[p.id].purchases == len(mine)

        # The anchored batch: the root recomputed from the ledger's lines is the statement's.
        lines = sorted((line for line in ledger if line["period"] == p.id), key=lambda x: x["id"])
        recomputed = root([leaf(line) for line in lines]).hex()
        statement = json.loads(rows[p.id]["statement"])
        assert recomputed == rows[p.id]["lines_root"] == statement["lines_root"]
        assert statement["line_count"] == len(lines) == 12
        # ... and the statement's leaf is in the chain's log: its receipt verifies offline.
        assert f"settlement:{statement['batch_id']}" in leaves
        receipt = Receipt.from_json(json.dumps(rows[p.id]["chain_proof"]["receipt"]))
        checked = verify_receipt(receipt, public_key, data=rows[p.id]["statement"].encode())
        assert checked.data_checked and rows[p.id]["tx_hash"] == "0x" + checked.leaf_hash.hex()
    # Every line's inclusion proof verifies, up to the chain's receipt of its statement.
    for proof in proofs:
        result = verify_line(json.dumps(proof).encode(), public_key)
        assert result["verified"] and result["chain_checked"]


async def test_a_purchase_delivered_twice_or_under_a_second_envelope_is_booked_once(
    sqlite_url: str, tmp_path: Path
) -> None:
    broker = make_broker("embedded", tmp_path)
    async with avcc_stack(sqlite_url, broker, tmp_path, scan=False, **SETTINGS) as stack:
        hub = stack.hub
        [work] = await coded_works(stack, [1])
        p1, _ = two_past_periods()
        twice = purchase(work.code, 1_001, p1.starts_at + 5)
        again = envelope_of(twice)  # the same purchase_id in a second envelope
        sentinel = purchase(work.code, 10, p1.starts_at + 6)
        # The same envelope twice on the topic, then the other envelope, then a sentinel on
        # the same key: once the sentinel is booked, the three before it were handled.
        first = envelope_of(twice)
        await publish(hub, [first, first, again, envelope_of(sentinel)])
        await wait_lines(hub, 3, purchase_id=sentinel.purchase_id)
        booked = await line_count(hub, purchase_id=twice.purchase_id)
        reconciled = await settlement_services.reconcile(hub.engine, p1.id)
    assert booked == 3
    assert reconciled.ok and reconciled.purchases == 2
    assert reconciled.lines_total_fen == 1_001 + 10


async def test_a_late_purchase_for_a_sealed_period_lands_in_the_next_open_one(
    sqlite_url: str, tmp_path: Path
) -> None:
    broker = make_broker("embedded", tmp_path)
    async with avcc_stack(sqlite_url, broker, tmp_path, scan=False, **SETTINGS) as stack:
        hub = stack.hub
        [work] = await coded_works(stack, [1])
        p1, p2 = two_past_periods()
        on_time = purchase(work.code, 400, p1.starts_at + 10)
        await publish(hub, [envelope_of(on_time)])
        await wait_lines(hub, 3)
        assert await seal_due(stack) == ["sealed:3"]
        sealed = await period_row(hub, p1.id)
        late = purchase(work.code, 250, p1.starts_at + 20)
        await publish(hub, [envelope_of(late)])
        await wait_lines(hub, 3, purchase_id=late.purchase_id)
        late_period = await line_count(hub, purchase_id=late.purchase_id, period=p2.id)
        after = await period_row(hub, p1.id)
        reconciled = await settlement_services.reconcile(hub.engine, p1.id)
        next_row = await period_row(hub, p2.id)
        async with stack.client(work.tenant_key) as client:
            still_open = await client.get(f"/v1/avcc/settlements/{p2.id}/lines/{1 << 40}/proof")
    assert late_period == 3
    assert (after["line_count"], after["total_fen"], after["lines_root"]) == (
        sealed["line_count"],
        sealed["total_fen"],
        sealed["lines_root"],
    )
    assert reconciled.ok and reconciled.line_count == 3
    assert next_row["status"] == "OPEN"
    assert still_open.status_code == 409 and still_open.json()["type"].endswith("period-open")


async def test_purchases_that_cannot_be_booked_and_a_nameless_batch_are_dead_lettered(
    sqlite_url: str, tmp_path: Path
) -> None:
    broker = make_broker("embedded", tmp_path)
    async with avcc_stack(
        sqlite_url,
        broker,
        tmp_path,
        scan=False,
        groups=["avcc-settlement", "avcc-chain"],
        **SETTINGS,
    ) as stack:
        hub = stack.hub
        now = int(time.time() * 1000)
        unknown = purchase("MA.156.10005.8361/0000ZZZZX", 100, now)
        too_long = purchase("MA.156.10005.8361/0000ZZZZX", 100, now, purchase_id="x" * 65)
        # A settlement batch to notarize that does not say which batch.
        nameless = Envelope.new(
            events.TX_PENDING,
            {"avcc_record_id": None, "chain_type": "settlement", "final_level": None,
             "statement": "{}"},
            key="settlement:0",
            source=events.SETTLEMENT_SVC,
            schema_version=2,
        )  # fmt: skip
        await publish(hub, [envelope_of(unknown), envelope_of(too_long), nameless])

        async def dead() -> bool:
            return await hub.dlq.count() == 3

        await wait_until(dead, timeout=60)
        letters = {letter.error_class: letter for letter in await hub.dlq.list()}
        booked = await line_count(hub)
    assert booked == 0
    assert set(letters) == {"UnknownCode", "InvalidPurchase", "PermanentError"}
    assert "without settlement_batch_id" in letters["PermanentError"].error_message
    assert "no work was issued code MA.156.10005.8361/0000ZZZZX" in (
        letters["UnknownCode"].error_message
    )
    assert letters["UnknownCode"].consumer == "avcc-settlement"
    assert "purchase_id must be 1 to 64 characters" in letters["InvalidPurchase"].error_message


async def one_anchored_line(stack: AvccStack, work: Work, fen: int) -> tuple[Any, int]:
    """One purchase of ``work`` in a past period, sealed and anchored: the period and the id
    of the work's tenant's line."""
    hub = stack.hub
    p1, _ = two_past_periods()
    await publish(hub, [envelope_of(purchase(work.code, fen, p1.starts_at + 1))])
    await wait_lines(hub, 3)
    await seal_due(stack)
    await wait_anchored(hub, [p1.id])
    async with hub.engine.connect() as conn:
        [line_id] = (
            await conn.execute(
                sa.select(LINES.c.id).where(LINES.c.account == f"tenant:{work.tenant_id}")
            )
        ).scalars()
    return p1, int(line_id)


async def test_statement_routes_answer_only_the_tenants_own_lines_and_4xx_on_bad_input(
    sqlite_url: str, tmp_path: Path
) -> None:
    broker = make_broker("embedded", tmp_path)
    async with avcc_stack(sqlite_url, broker, tmp_path, scan=False, **SETTINGS) as stack:
        mine, theirs = await coded_works(stack, [1, 1])
        p1, line_id = await one_anchored_line(stack, mine, 1000)
        admin = await stack.admin()
        answers: dict[str, httpx.Response] = {}
        async with stack.client(mine.tenant_key) as client:
            answers["own proof"] = await client.get(
                f"/v1/avcc/settlements/{p1.id}/lines/{line_id}/proof"
            )
            answers["malformed period"] = await client.get("/v1/avcc/settlements/2026")
            answers["month 13"] = await client.get("/v1/avcc/settlements/20261301T0000Z")
            answers["unknown period"] = await client.get("/v1/avcc/settlements/20000101T0000Z")
            answers["tenant on admin"] = await client.get("/v1/avcc/admin/settlement-periods")
            answers["bad line id"] = await client.get(f"/v1/avcc/settlements/{p1.id}/lines/0/proof")
        async with stack.client(theirs.tenant_key) as client:
            answers["their statement"] = await client.get(f"/v1/avcc/settlements/{p1.id}")
            answers["their proof"] = await client.get(
                f"/v1/avcc/settlements/{p1.id}/lines/{line_id}/proof"
            )
        async with stack.client(admin) as client:
            answers["periods"] = await client.get("/v1/avcc/admin/settlement-periods")
            answers["reconciliation"] = await client.get(
                f"/v1/avcc/admin/settlement-periods/{p1.id}/reconciliation"
            )
            answers["unknown reconciliation"] = await client.get(
                "/v1/avcc/admin/settlement-periods/20000101T0000Z/reconciliation"
            )
        public_key = stack.avcc.chain.public_key_pem()
    status = {name: answer.status_code for name, answer in answers.items()}
    assert status == {
        "own proof": 200,
        "malformed period": 422,
        "month 13": 422,
        "unknown period": 404,
        "tenant on admin": 403,
        "bad line id": 422,
        "their statement": 200,
        "their proof": 404,
        "periods": 200,
        "reconciliation": 200,
        "unknown reconciliation": 404,
    }
    assert verify_line(answers["own proof"].content, public_key)["chain_checked"]
    assert answers["their statement"].json()["lines"] == []
    assert answers["their statement"].json()["period_line_count"] == 3
    assert [p["period"] for p in answers["periods"].json()["items"]] == [p1.id]
    assert answers["reconciliation"].json()["ok"] is True


async def test_the_settlement_commands_show_a_statement_and_verify_a_line_offline(
    sqlite_url: str, tmp_path: Path
) -> None:
    runner = CliRunner()
    broker = make_broker("embedded", tmp_path)
    async with avcc_stack(sqlite_url, broker, tmp_path, scan=False, **SETTINGS) as stack:
        [work] = await coded_works(stack, [1])
        p1, line_id = await one_anchored_line(stack, work, 2_000)
        key_file = tmp_path / "log.pem"
        key_file.write_bytes(stack.avcc.chain.public_key_pem())
        proof_file = tmp_path / "line.json"
        admin = await stack.admin()

        def run(*args: str) -> Any:
            # In a thread: the CLI's blocking HTTP calls reach the API on this event loop.
            return asyncio.to_thread(runner.invoke, cli, ["avcc", "settlement", *args])

        shown = await run(
            "statement", p1.id, "--save-proof-of", str(line_id), "--proof-file", str(proof_file),
            "--url", stack.api_url, "--api-key", work.tenant_key,
        )  # fmt: skip
        periods = await run("periods", "--url", stack.api_url, "--api-key", admin)
        refused = await run("periods", "--url", stack.api_url, "--api-key", work.tenant_key)
    verified = runner.invoke(
        cli, ["avcc", "settlement", "verify-line", str(proof_file), "--public-key", str(key_file)]
    )
    tampered = json.loads(proof_file.read_text())
    tampered["line"] = tampered["line"].replace('"amount":1400', '"amount":1500')
    bad_file = tmp_path / "tampered.json"
    bad_file.write_text(json.dumps(tampered))
    forged = runner.invoke(cli, ["avcc", "settlement", "verify-line", str(bad_file)])
    assert shown.exit_code == 0, shown.output
    assert '"total_fen": 1400' in shown.stdout
    assert periods.exit_code == 0 and p1.id in periods.stdout
    assert refused.exit_code == 2
    assert verified.exit_code == 0, verified.output
    assert '"chain_checked": true' in verified.stdout
    assert forged.exit_code == 1 and "the line is not in the batch" in forged.stderr
