"""The playback decoder: records → Arrow rows, exact cents, rejections with their reasons."""

from __future__ import annotations

from decimal import Decimal

import orjson
import pytest
from tests.support.playback import START_MS, playback_value, record

from aigc_hub.pipelines.avcc import playback_rows
from aigc_hub.pipelines.avcc.playback_rows import Rejection


def _with(**payload: object) -> bytes:
    envelope = orjson.loads(playback_value())
    envelope["payload"].update(payload)
    return orjson.dumps(envelope)


def _without(name: str) -> bytes:
    envelope = orjson.loads(playback_value())
    envelope["payload"].pop(name)
    return orjson.dumps(envelope)


def test_a_good_record_becomes_one_row_of_the_schema_with_exact_revenue() -> None:
    value = playback_value(event_type="purchase", revenue=Decimal("12.50"), duration_sec=1800)
    decoded = playback_rows.decode([record(3, 41, value)])
    assert decoded.rejected == []
    assert decoded.table.schema == playback_rows.SCHEMA
    [row] = decoded.table.to_pylist()
    assert row["revenue_cny"] == Decimal("12.50")
    assert (row["ts"], row["event_type"], row["duration_sec"]) == (START_MS, "purchase", 1800)
    assert (row["source_partition"], row["source_offset"]) == (3, 41)
    assert decoded.reached == {3: 42}


@pytest.mark.parametrize(
    ("value", "reason", "detail"),
    [
        (b"{not json", Rejection.UNDECODABLE, ""),
        (b"[1, 2]", Rejection.UNDECODABLE, "not a JSON object"),
        (b'{"event_id": "x", "timestamp": 1}', Rejection.MISSING_FIELD, "payload"),
        (_without("revenue_cny"), Rejection.MISSING_FIELD, "revenue_cny"),
        (_with(event_type="skip"), Rejection.BAD_FIELD, "event_type='skip'"),
        (_with(event_type=["play"]), Rejection.BAD_FIELD, "event_type=['play']"),
        (_with(duration_sec=-1), Rejection.BAD_FIELD, "duration_sec=-1"),
        (_with(duration_sec=True), Rejection.BAD_FIELD, "duration_sec=True"),
        (_with(revenue_cny="12.50"), Rejection.BAD_FIELD, "revenue_cny='12.50'"),
        (_with(revenue_cny=12.345), Rejection.BAD_FIELD, "revenue_cny=12.345"),
        (_with(revenue_cny=-1.0), Rejection.BAD_FIELD, "revenue_cny=-1.0"),
        (_with(revenue_cny=2_000_000.0), Rejection.BAD_FIELD, "revenue_cny=2000000.0"),
        (_with(avcc_code=7), Rejection.BAD_FIELD, "avcc_code=7"),
    ],
)
def test_a_bad_record_is_rejected_with_its_reason_and_the_good_ones_kept(
    value: bytes, reason: Rejection, detail: str
) -> None:
    good = playback_value()
    decoded = playback_rows.decode([record(0, 0, good), record(0, 1, value), record(0, 2, good)])
    assert decoded.table.column("source_offset").to_pylist() == [0, 2]
    [rejected] = decoded.rejected
    assert (rejected.record.offset, rejected.reason) == (1, reason)
    assert detail in rejected.detail
    # A rejected record counts as reached, so a redelivery does not reject it twice.
    assert decoded.reached == {0: 3}


def test_records_below_the_stored_offsets_are_skipped() -> None:
    records = [record(p, o, playback_value()) for p in (0, 1) for o in range(5)]
    decoded = playback_rows.decode(records, {0: 3, 1: 5})
    assert decoded.skipped == 8
    assert decoded.table.column("source_offset").to_pylist() == [3, 4]
    assert decoded.spans == {0: (3, 5)}
    assert decoded.positions == "0:3-4"


def test_positions_name_the_same_records_the_same_whatever_their_order() -> None:
    a = [record(p, o, playback_value()) for p in (0, 5) for o in range(3)]
    b = [record(p, o, playback_value()) for o in range(3) for p in (5, 0)]
    assert playback_rows.decode(a).positions == playback_rows.decode(b).positions == "0:0-2,5:0-2"


def test_an_empty_batch_decodes_to_an_empty_table() -> None:
    decoded = playback_rows.decode([])
    assert decoded.table.num_rows == 0
    assert decoded.table.schema == playback_rows.SCHEMA
    assert decoded.spans == {}
