"""The gateway's hand-written checks of a playback payload answer as the documented schema
(``events.PlaybackPayload``) does: the same payloads pass, the same are refused."""

from __future__ import annotations

import itertools
from decimal import Decimal
from typing import Any

import pydantic

from aigc_hub.pipelines.avcc.events import PlaybackPayload
from aigc_hub.pipelines.avcc.playback import CodeChecks, Limits, _explain, _is_good, _payload_errors

NODE = "8361"
GOOD: dict[str, Any] = {
    "avcc_code": "MA.156.10005.8361/0000002QJ",
    "platform_node": NODE,
    "user_hash": "sha256:user123",
    "event_type": "play",
    "duration_sec": 1800,
    "revenue_cny": 0.0,
}
VARIANTS: dict[str, list[Any]] = {
    "avcc_code": [GOOD["avcc_code"], "MA.156.10005.8361/", "nope", 7],
    "user_hash": ["u", "", "x" * 100, "x" * 101, None],
    "event_type": ["play", "complete", "purchase", "pause"],
    "duration_sec": [0, 1800, 7 * 86_400, -1, 7 * 86_400 + 1, 1.5, "9", True],
    "revenue_cny": [0, 0.0, 12.5, 12.34, 1.005, -1, 1_000_001, "1", None],
}


def _cases() -> list[dict[str, Any]]:
    names = list(VARIANTS)
    return [
        dict(GOOD, **dict(zip(names, values, strict=True)))
        for values in itertools.product(*VARIANTS.values())
    ]


def _schema_accepts(payload: dict[str, Any]) -> bool:
    try:
        PlaybackPayload.model_validate(payload, strict=True)
    except pydantic.ValidationError:
        return False
    if payload["event_type"] == "purchase":
        return bool(payload["revenue_cny"] > 0)
    return payload["revenue_cny"] == 0


def test_hand_checks_agree_with_the_schema() -> None:
    cases = _cases()
    assert len(cases) == 4 * 5 * 4 * 8 * 9
    for payload in cases:
        # The schema holds money as Decimal: give it the JSON number's text, as a parser would.
        as_schema = dict(payload)
        if type(payload["revenue_cny"]) in (int, float):
            as_schema["revenue_cny"] = Decimal(repr(payload["revenue_cny"]))
        assert _schema_accepts(as_schema) == (not list(_payload_errors(payload, NODE))), payload


def test_the_fast_path_accepts_exactly_what_the_explanation_finds_nothing_in() -> None:
    limits = Limits(10, oldest_ms=1_000, newest_ms=2_000)
    checks = CodeChecks()
    envelopes: list[dict[str, Any]] = [
        {"event_id": "0190a0b4-1c2d-7e3f-8a9b-0c1d2e3f4a5b", "timestamp": 1_500},
        {"event_id": "0190a0b4-1c2d-7e3f-8a9b-0c1d2e3f4a5", "timestamp": 1_500},
        {"event_id": 7, "timestamp": 1_500},
        {"event_id": "0190a0b4-1c2d-7e3f-8a9b-0c1d2e3f4a5b", "timestamp": 999},
        {"event_id": "0190a0b4-1c2d-7e3f-8a9b-0c1d2e3f4a5b", "timestamp": 1_500.0},
    ]
    codes = [GOOD["avcc_code"], "MA.156.10005.8361/0000002QK", "MA.156.10005.8361/00"]
    for payload in _cases():
        for envelope in envelopes:
            for code, reporter in itertools.product(codes, (NODE, "9999", 8361)):
                changed = {"avcc_code": code, "platform_node": reporter}
                item = {**envelope, "payload": {**payload, **changed}}
                found = _explain(item, NODE, limits, checks)
                assert _is_good(item, NODE, limits, checks) == (not found), (item, found)
    assert not _is_good({"event_id": "x"}, NODE, limits, checks)
    assert not _is_good({**envelopes[0], "payload": {"a": 1}}, NODE, limits, checks)
