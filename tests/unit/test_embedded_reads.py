"""The embedded log's read and append helpers: fair quotas, the header codec, the row format."""

from __future__ import annotations

import contextlib
import random
import sqlite3
from collections.abc import Mapping
from pathlib import Path

import pytest

from aigc_hub.core.clock import ManualClock
from aigc_hub.messaging import embedded_reads as reads
from aigc_hub.messaging import embedded_schema as schema
from aigc_hub.messaging.base import OutgoingMessage
from aigc_hub.messaging.embedded import EmbeddedBroker


def dealt_one_by_one(available: Mapping[int, int], max_records: int, shift: int) -> dict[int, int]:
    """The quota rule as first written: deal records one at a time round the partitions."""
    order = sorted(available)
    if not order:
        return {}
    shift %= len(order)
    active = order[shift:] + order[:shift]
    quotas = dict.fromkeys(active, 0)
    left = max_records
    while left and active:
        still = []
        for tp in active:
            if not left:
                break
            quotas[tp] += 1
            left -= 1
            if quotas[tp] < available[tp]:
                still.append(tp)
        active = still
    return {tp: n for tp, n in quotas.items() if n}


@pytest.mark.parametrize(
    ("available", "max_records", "shift", "expected"),
    [
        ({}, 10, 0, {}),
        ({1: 5, 2: 5}, 4, 0, {1: 2, 2: 2}),
        ({1: 5, 2: 5, 3: 5}, 4, 1, {2: 2, 3: 1, 1: 1}),  # the turn starts at the shift
        ({1: 1, 2: 10}, 6, 0, {1: 1, 2: 5}),  # a short partition leaves its share to others
        ({1: 3, 2: 4}, 100, 0, {1: 3, 2: 4}),  # everything fits
        ({1: 9, 2: 9, 3: 9}, 2, 2, {3: 1, 1: 1}),  # fewer records than partitions
    ],
)
def test_fair_quotas_table(
    available: dict[int, int], max_records: int, shift: int, expected: dict[int, int]
) -> None:
    got = reads.fair_quotas(available, max_records, shift)
    assert got == expected
    assert list(got) == list(expected)  # the dealing order is the batch's order


def test_fair_quotas_equal_dealing_one_by_one_for_random_inputs() -> None:
    rng = random.Random(20_261_202)
    for _ in range(5_000):
        partitions = rng.randrange(0, 30)
        ids = rng.sample(range(1, 500), partitions)
        spread = rng.choice((3, 50, 5_000))
        available = {tp: rng.randrange(1, spread + 1) for tp in ids}
        max_records = rng.choice((1, 2, 7, 100, 5_000, rng.randrange(1, 20_000)))
        shift = rng.randrange(0, 1_000)
        got = reads.fair_quotas(available, max_records, shift)
        want = dealt_one_by_one(available, max_records, shift)
        assert got == want, (available, max_records, shift)
        assert list(got) == list(want)


@pytest.mark.parametrize(
    "headers",
    [{}, {"event-id": "e1", "event-type": "a.b"}, {"note": '中文 "quoted" \\ {}'}],
)
def test_headers_round_trip_through_the_column_text(headers: dict[str, str]) -> None:
    text = schema.encode_headers(headers)
    assert isinstance(text, str)
    assert schema.decode_headers(text) == headers


def test_records_without_headers_get_a_dict_of_their_own() -> None:
    assert schema.encode_headers({}) == "{}"
    first, second = schema.decode_headers("{}"), schema.decode_headers("{}")
    assert first == {} and first is not second


def test_headers_written_by_json_dumps_still_read() -> None:
    # Files written before the orjson codec hold json.dumps text (with spaces).
    assert schema.decode_headers('{"event-id": "e1", "k": "v"}') == {"event-id": "e1", "k": "v"}


async def test_appended_rows_keep_the_file_format(tmp_path: Path) -> None:
    broker = EmbeddedBroker(tmp_path / "log.db", clock=ManualClock(), retention_interval=None)
    try:
        await broker.publish(
            [
                OutgoingMessage("t", "MA.156.10005.8361/7K2Q", b"\x00v", {"event-id": "e1"}),
                OutgoingMessage("t", None, b"plain"),
            ]
        )
    finally:
        await broker.close()
    with contextlib.closing(sqlite3.connect(tmp_path / "log.db")) as conn:
        rows = conn.execute(
            'SELECT "offset", "key", typeof("key"), value, typeof(value), headers,'
            ' typeof(headers), typeof(timestamp_ms) FROM records ORDER BY "offset"'
        ).fetchall()
    assert rows == [
        (
            0,
            "MA.156.10005.8361/7K2Q",
            "text",
            b"\x00v",
            "blob",
            '{"event-id":"e1"}',
            "text",
            "integer",
        ),
        (1, None, "null", b"plain", "blob", "{}", "text", "integer"),
    ]
