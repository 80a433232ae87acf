"""gateway-svc on real parts: platform nodes' keys, ``POST /v1/avcc/playback`` over a real
uvicorn API, the embedded log, and the outbox (seed 000 §9.2.4, §9.3.1).

No consumer group runs here: the tests read ``topic.playback.event`` and
``topic.avcc.purchase.recorded`` themselves, as the sink, the detector and settlement-svc will.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import orjson
import pytest

from aigc_hub.messaging.base import Record
from aigc_hub.pipelines.avcc import events
from aigc_hub.pipelines.avcc.codes import make_code, parse_code
from aigc_hub.tenancy import create_tenant
from tests.support.avcc import AvccStack, avcc_stack, coded_work
from tests.support.hubs import make_broker

NODE = "8361"


@pytest.fixture
async def stack(sqlite_url: str, tmp_path: Path) -> AsyncIterator[AvccStack]:
    async with avcc_stack(
        sqlite_url, make_broker("embedded", tmp_path), tmp_path, groups=[], scan=False
    ) as started:
        yield started


async def node_key(stack: AvccStack, code: str = NODE) -> str:
    async with stack.client(await stack.admin()) as admin:
        answer = await admin.post("/v1/avcc/admin/nodes", json={"code": code, "name": "site"})
    assert answer.status_code == 201, answer.text
    key: str = answer.json()["key"]
    return key


def event(code: str, kind: str = "play", *, revenue: float = 0.0, **changes: Any) -> dict[str, Any]:
    payload = {
        "avcc_code": code,
        "platform_node": NODE,
        "user_hash": "sha256:user123",
        "event_type": kind,
        "duration_sec": 1800,
        "revenue_cny": revenue,
    } | changes.pop("payload", {})
    return {
        "event_id": str(uuid.uuid4()),
        "timestamp": int(time.time() * 1000),
        "payload": payload,
    } | changes


async def read_topic(stack: AvccStack, topic: str, count: int) -> list[Record]:
    """``count`` records of ``topic`` from its start (a group of the test's own)."""
    consumer = stack.hub.broker.consumer(f"test-{uuid.uuid4().hex[:8]}", [topic])
    got: list[Record] = []
    deadline = asyncio.get_running_loop().time() + 30
    try:
        while len(got) < count:
            assert asyncio.get_running_loop().time() < deadline, f"{len(got)} of {count}"
            got += await consumer.fetch(count - len(got), timeout=0.5)
    finally:
        await consumer.close()
    return got


async def topic_size(stack: AvccStack, topic: str) -> int:
    lags = await stack.hub.broker.lag("nobody", [topic])
    return sum(lag.end_offset for lag in lags)


async def post(stack: AvccStack, key: str, evs: Sequence[dict[str, Any]]) -> Any:
    async with stack.client(key) as client:
        return await client.post("/v1/avcc/playback", json={"events": list(evs)})


async def test_a_batch_goes_to_the_playback_topic_as_the_seeds_envelope_and_purchases_to_settlement(
    stack: AvccStack,
) -> None:
    tenant, _ = await create_tenant(stack.hub.engine, "studio")
    code = await coded_work(stack.hub, tenant.id)
    key = await node_key(stack)
    sent = [event(code), event(code, "complete"), event(code, "purchase", revenue=12.5)]

    answer = await post(stack, key, sent)

    assert answer.status_code == 202, answer.text
    assert answer.json() == {"accepted": 3, "purchases": 1}
    records = await read_topic(stack, events.PLAYBACK_TOPIC, 3)
    assert {r.key for r in records} == {code}
    envelopes = sorted((orjson.loads(r.value) for r in records), key=lambda e: e["event_id"])
    assert envelopes == sorted(
        ({**e, "source": "gateway-svc"} for e in sent), key=lambda e: e["event_id"]
    )
    [purchase] = await read_topic(stack, events.PURCHASE_TOPIC, 1)
    recorded = orjson.loads(purchase.value)
    assert recorded["event_type"] == events.PURCHASE_RECORDED
    assert recorded["tenant_id"] == tenant.id and purchase.key == code
    assert recorded["payload"] == {
        "purchase_id": sent[2]["event_id"],
        "avcc_code": code,
        "platform_node": NODE,
        "user_hash": "sha256:user123",
        "revenue_fen": 1250,
        "occurred_at": sent[2]["timestamp"],
    }


#: Bad events, each with the field its error names and words of the message.
BAD_EVENTS: list[tuple[dict[str, Any], str, str]] = [
    ({"event_id": "not-a-uuid"}, "event_id", "a UUID"),
    ({"timestamp": 1_000}, "timestamp", "outside the accepted window"),
    ({"timestamp": "now"}, "timestamp", "an integer"),
    ({"payload": {"platform_node": "9999"}}, "payload.platform_node", "node 8361 only"),
    ({"payload": {"event_type": "pause"}}, "payload.event_type", "play, complete or purchase"),
    ({"payload": {"revenue_cny": 1.0}}, "payload.revenue_cny", "only a purchase"),
    ({"payload": {"duration_sec": -1}}, "payload.duration_sec", "an integer from 0"),
    ({"payload": {"user_hash": ""}}, "payload.user_hash", "1 to 100 characters"),
    ({"payload": {"avcc_code": "MA.156.10005.8361/00000001X"}}, "payload.avcc_code", "check"),
    ({"payload": {"avcc_code": "nope"}}, "payload.avcc_code", "an AVCC code"),
    ({"payload": {"extra": 1}}, "payload", "exactly"),
    ({"extra": 1}, "", "event_id, timestamp and payload"),
]


async def test_bad_events_refuse_their_whole_batch_each_named_and_nothing_is_published(
    stack: AvccStack,
) -> None:
    tenant, _ = await create_tenant(stack.hub.engine, "studio")
    code = await coded_work(stack.hub, tenant.id)
    key = await node_key(stack)
    batch = [event(code)] + [event(code, **changes) for changes, _, _ in BAD_EVENTS]

    answer = await post(stack, key, batch)

    assert answer.status_code == 422, answer.text
    assert answer.headers["content-type"].startswith("application/problem+json")
    problem = answer.json()
    assert problem["invalid_events"] == len(BAD_EVENTS)
    found = {e["field"]: e["message"] for e in problem["errors"]}
    for index, (_, field, words) in enumerate(BAD_EVENTS, 1):
        where = f"body.events[{index}]" + (f".{field}" if field else "")
        assert words in found[where], (where, found)
    assert "body.events[0]" not in " ".join(found)
    assert await topic_size(stack, events.PLAYBACK_TOPIC) == 0


async def test_purchase_money_must_be_positive_with_two_decimals(stack: AvccStack) -> None:
    tenant, _ = await create_tenant(stack.hub.engine, "studio")
    code = await coded_work(stack.hub, tenant.id)
    key = await node_key(stack)
    answer = await post(
        stack,
        key,
        [event(code, "purchase", revenue=0.0), event(code, "purchase", revenue=1.005)],
    )
    assert answer.status_code == 422
    messages = {e["field"]: e["message"] for e in answer.json()["errors"]}
    assert "carries its revenue" in messages["body.events[0].payload.revenue_cny"]
    assert "two decimals" in messages["body.events[1].payload.revenue_cny"]


async def test_a_purchase_of_a_code_never_issued_refuses_the_batch_and_records_nothing(
    stack: AvccStack,
) -> None:
    tenant, _ = await create_tenant(stack.hub.engine, "studio")
    code = await coded_work(stack.hub, tenant.id)
    parts = parse_code(code)
    never = make_code(parts.country, parts.issuer, parts.node, parts.record_id + 1000)
    key = await node_key(stack)

    answer = await post(stack, key, [event(code), event(never, "purchase", revenue=3.0)])

    assert answer.status_code == 422, answer.text
    [error] = answer.json()["errors"]
    assert error["field"] == "body.events[1].payload.avcc_code"
    assert "no work holds this code" in error["message"]
    assert await topic_size(stack, events.PLAYBACK_TOPIC) == 0
    assert await topic_size(stack, events.PURCHASE_TOPIC) == 0


async def test_a_body_that_is_no_batch_is_refused_with_a_problem(stack: AvccStack) -> None:
    key = await node_key(stack)
    async with stack.client(key) as client:
        for body in (b"{", b"[]", b'{"events": []}', b'{"events": {}}', b'{"events": [], "x": 1}'):
            answer = await client.post(
                "/v1/avcc/playback", content=body, headers={"Content-Type": "application/json"}
            )
            assert answer.status_code == 422, (body, answer.text)
            assert answer.headers["content-type"].startswith("application/problem+json")


async def test_a_batch_over_the_limit_or_not_json_is_refused(
    sqlite_url: str, tmp_path: Path
) -> None:
    async with avcc_stack(
        sqlite_url,
        make_broker("embedded", tmp_path),
        tmp_path,
        groups=[],
        scan=False,
        playback_max_events=2,
    ) as small:
        tenant, _ = await create_tenant(small.hub.engine, "studio")
        code = await coded_work(small.hub, tenant.id)
        key = await node_key(small)
        too_many = await post(small, key, [event(code)] * 3)
        assert too_many.status_code == 422
        assert "1 to 2 events" in too_many.json()["detail"]
        async with small.client(key) as client:
            form = await client.post("/v1/avcc/playback", data={"events": "x"})
        assert form.status_code == 415


async def test_only_a_live_node_key_reports(stack: AvccStack) -> None:
    tenant_key = await stack.tenant("studio")
    tenant, _ = await create_tenant(stack.hub.engine, "other")
    code = await coded_work(stack.hub, tenant.id)
    assert (await post(stack, "", [event(code)])).status_code == 401
    assert (await post(stack, tenant_key, [event(code)])).status_code == 401
    assert (await post(stack, "avn_forged", [event(code)])).status_code == 401

    key = await node_key(stack)
    assert (await post(stack, key, [event(code)])).status_code == 202
    async with stack.client(await stack.admin()) as admin:
        assert (await admin.delete(f"/v1/avcc/admin/nodes/{NODE}")).status_code == 204
        assert (await admin.delete("/v1/avcc/admin/nodes/4040")).status_code == 404
        listed = (await admin.get("/v1/avcc/admin/nodes")).json()["nodes"]
    assert [n["code"] for n in listed] == [NODE] and listed[0]["revoked_at"] is not None
    # A process may trust a key it saw for a few seconds (nodes.CACHE_S): wait for the refusal.
    deadline = asyncio.get_running_loop().time() + 15
    while (await post(stack, key, [event(code)])).status_code != 401:
        assert asyncio.get_running_loop().time() < deadline, "the revoked key is still accepted"
        await asyncio.sleep(0.2)


async def test_registering_a_node_twice_or_as_a_tenant_is_refused(stack: AvccStack) -> None:
    await node_key(stack)
    async with stack.client(await stack.admin()) as admin:
        again = await admin.post("/v1/avcc/admin/nodes", json={"code": NODE, "name": "x"})
        bad = await admin.post("/v1/avcc/admin/nodes", json={"code": "8a", "name": "x"})
    assert again.status_code == 409 and again.json()["type"].endswith("node-exists")
    assert bad.status_code == 422
    async with stack.client(await stack.tenant("studio")) as tenant:
        assert (await tenant.get("/v1/avcc/admin/nodes")).status_code == 403
