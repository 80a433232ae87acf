"""settlement-svc's pure rules: the split, periods, the line's canonical bytes, the line
proof's offline check, and the chain events' v1 → v2 reading."""

from __future__ import annotations

import json

import pytest

from aigc_hub.core.errors import ConfigurationError
from aigc_hub.pipeline import Pipeline
from aigc_hub.pipelines.avcc import events
from aigc_hub.pipelines.avcc.settlement import (
    InvalidPeriod,
    Line,
    Party,
    batch_id_of,
    parse_period,
    period_of,
    split,
    statement_text,
)
from aigc_hub.pipelines.avcc.settlement_proofs import (
    LineProofRefused,
    make_line_proof,
    verify_line,
)
from aigc_hub.schemas import compat
from aigc_hub.schemas.registry import SchemaRegistry

DEC_1 = 1_796_083_200_000  # 2026-12-01T00:00:00Z


@pytest.mark.parametrize(
    ("fen", "creator", "node", "tenant", "node_fen", "platform"),
    [
        (10_000, 7000, 2000, 7000, 2000, 1000),
        (999, 7000, 2000, 699, 199, 101),  # 699.3 and 199.8: the remainders are the hub's
        (1, 7000, 2000, 0, 0, 1),
        (0, 7000, 2000, 0, 0, 0),
        (12_345, 10_000, 0, 12_345, 0, 0),
        (333, 0, 0, 0, 0, 333),
    ],
)
def test_a_purchase_splits_by_bps_with_every_remainder_to_the_platform(
    fen: int, creator: int, node: int, tenant: int, node_fen: int, platform: int
) -> None:
    shares = split(fen, tenant_id="t1", platform_node="8361", creator_bps=creator, node_bps=node)
    assert [(s.party, s.account, s.amount) for s in shares] == [
        (Party.TENANT, "tenant:t1", tenant),
        (Party.NODE, "node:8361", node_fen),
        (Party.PLATFORM, "platform", platform),
    ]
    assert sum(s.amount for s in shares) == fen


def test_shares_above_the_whole_are_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="exceeds 10000"):
        split(100, tenant_id="t", platform_node="1", creator_bps=9000, node_bps=2000)


@pytest.mark.parametrize(
    ("at", "period_s", "period", "starts", "ends"),
    [
        (DEC_1, 86_400, "20261201T0000Z", DEC_1, DEC_1 + 86_400_000),
        (DEC_1 + 86_399_999, 86_400, "20261201T0000Z", DEC_1, DEC_1 + 86_400_000),
        (DEC_1 + 86_400_000, 86_400, "20261202T0000Z", DEC_1 + 86_400_000, DEC_1 + 172_800_000),
        (DEC_1 + 61_000, 60, "20261201T0001Z", DEC_1 + 60_000, DEC_1 + 120_000),
        (DEC_1 + 3_599_999, 3600, "20261201T0000Z", DEC_1, DEC_1 + 3_600_000),
    ],
)
def test_the_period_of_a_moment_is_utc_aligned(
    at: int, period_s: int, period: str, starts: int, ends: int
) -> None:
    found = period_of(at, period_s)
    assert (found.id, found.starts_at, found.ends_at) == (period, starts, ends)
    assert found.next().starts_at == found.ends_at


def test_a_period_is_whole_minutes_and_its_batch_id_its_digits() -> None:
    with pytest.raises(ConfigurationError):
        period_of(DEC_1, 90)
    assert batch_id_of("20261201T0000Z") == 202612010000


@pytest.mark.parametrize("bad", ["2026", "20261301T0000Z", "20261201T2500Z", "20261201T0000", ""])
def test_a_malformed_period_id_is_refused(bad: str) -> None:
    with pytest.raises(InvalidPeriod):
        parse_period(bad)


def line(line_id: int, amount: int = 699, account: str = "tenant:t1") -> Line:
    return Line(line_id, "20261201T0000Z", account, amount, "p-1", "MA.1/2", 7, "8361", DEC_1)


def test_a_lines_leaf_is_the_canonical_json_of_exactly_its_documented_fields() -> None:
    assert line(5).text() == (
        '{"account":"tenant:t1","amount":699,"avcc_code":"MA.1/2","id":5,'
        '"occurred_at":1796083200000,"period":"20261201T0000Z","platform_node":"8361",'
        '"purchase_id":"p-1","record_id":7,"v":1}'
    )


def proof_of(texts: list[str], index: int) -> dict[str, object]:
    from aigc_hub.pipelines.avcc.settlement import lines_tree

    root = lines_tree(texts).root()
    period = period_of(DEC_1, 86_400)
    statement = statement_text(
        issuer="MA.156.10005.8361", period=period, line_count=len(texts), total_fen=0,
        lines_root=root,
    )  # fmt: skip
    return make_line_proof(texts, index, statement, None)


def test_every_line_of_a_batch_proves_against_its_root() -> None:
    texts = [line(i, amount=i).text() for i in range(1, 8)]
    for index in range(len(texts)):
        checked = verify_line(json.dumps(proof_of(texts, index)).encode())
        assert checked["verified"] and json.loads(texts[index]) == checked["line"]
        assert checked["chain_checked"] is False


def tampered(change: str) -> bytes:
    texts = [line(i, amount=i).text() for i in range(1, 6)]
    proof = proof_of(texts, 2)
    if change == "amount":
        proof["line"] = str(proof["line"]).replace('"amount":3', '"amount":4')
    elif change == "path":
        path = list(proof["inclusion_path"])  # type: ignore[call-overload]  # a list of hex
        path[0] = "00" * 32
        proof["inclusion_path"] = path
    elif change == "statement":
        statement = json.loads(str(proof["statement"]))
        statement["line_count"] = 6
        proof["statement"] = json.dumps(statement)
    elif change == "period":
        statement = json.loads(str(proof["statement"]))
        statement["period"] = "20261202T0000Z"
        proof["statement"] = json.dumps(statement)
    elif change == "garbage":
        return b"{not json"
    elif change == "not-settlement":
        proof["statement"] = json.dumps({"chain_type": "copyright_main"})
    return json.dumps(proof).encode()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ("amount", "the line is not in the batch"),
        ("path", "the line is not in the batch"),
        ("statement", "another batch"),
        ("period", "the line is of period 20261201T0000Z"),
        ("garbage", "not a settlement line proof"),
        ("not-settlement", "not a settlement line proof"),
    ],
)
def test_a_tampered_line_proof_is_refused_naming_the_check(change: str, message: str) -> None:
    with pytest.raises(LineProofRefused, match=message):
        verify_line(tampered(change))


def test_an_unanchored_proof_cannot_pass_the_chain_check() -> None:
    texts = [line(1).text()]
    with pytest.raises(LineProofRefused, match="not anchored yet"):
        verify_line(json.dumps(proof_of(texts, 0)).encode(), b"any key")


def test_v1_chain_events_read_as_v2_and_the_versions_are_compatible() -> None:
    v1 = events.TxPending(
        avcc_record_id=3, chain_type="copyright_main", final_level="G", statement="{}"
    )
    pending = events.pending_v2(v1)
    assert (pending.avcc_record_id, pending.final_level, pending.settlement_batch_id) == (
        3,
        "G",
        None,
    )
    confirmed = events.confirmed_v2(
        events.TxConfirmed(
            avcc_record_id=3,
            chain_type="copyright_main",
            tx_hash="0x1",
            block_height=1,
            status="success",
            crd_address="0x2",
        )
    )
    assert confirmed.avcc_record_id == 3 and confirmed.settlement_batch_id is None
    with pytest.raises(TypeError):
        events.pending_v2(confirmed)
    with pytest.raises(TypeError):
        events.confirmed_v2(v1)
    pipeline: Pipeline[None] = Pipeline("check")
    events.register(pipeline)
    registry = SchemaRegistry()
    for spec in pipeline.events:
        registry.register(spec.name, spec.version, spec.model, topic=spec.topic)
    assert registry.versions(events.TX_PENDING) == [1, 2]
    assert registry.versions(events.TX_CONFIRMED) == [1, 2]
    assert compat.check(registry) == []
