"""The admin API on SQLite and PostgreSQL: dead letters, bulk replay jobs, lag, outbox, audit."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from fastapi import FastAPI

from aigc_hub import tenancy
from aigc_hub.bootstrap import Hub
from aigc_hub.interfaces.http import problems
from aigc_hub.interfaces.http.app import create_app
from aigc_hub.messaging import headers as h
from aigc_hub.messaging.memory import MemoryBroker
from aigc_hub.reliability.dlq import DeadLetterDraft, DeadLetterFilter
from aigc_hub.reliability.replay_jobs import ReplayJobs
from aigc_hub.store import tables
from tests.support import effects as fx
from tests.support.hubs import hub_for

PROBLEM = "application/problem+json"
OTHER_TOPIC = "test.other"


@pytest.fixture
async def hub(db_url: str) -> AsyncIterator[Hub]:
    async with hub_for(db_url, MemoryBroker(), [fx.make_pipeline()]) as started:
        yield started


@pytest.fixture
async def app(hub: Hub) -> AsyncIterator[FastAPI]:
    app = create_app(hub)  # mounts the admin router at /admin
    app.state.replay_jobs = ReplayJobs(hub.engine, hub.dlq, hub.clock, rate_per_s=200)
    yield app
    await app.state.replay_jobs.close()


@pytest.fixture
async def client(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://hub.test") as c:
        yield c


@pytest.fixture
async def admin_key(hub: Hub) -> str:
    return await tenancy.create_admin_key(hub.engine)


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def assert_problem(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith(PROBLEM)
    body: dict[str, Any] = response.json()
    assert body["status"] == status
    assert body["type"].startswith(problems.BASE)
    return body


def draft(key: str, n: int, *, topic: str = fx.TOPIC, error: str = "PermanentError") -> Any:
    env = fx.request(key, n)
    return DeadLetterDraft(
        topic=topic,
        partition=n % 3,
        offset=100 + n,
        key=key,
        consumer=fx.GROUP,
        pipeline="effects",
        value=env.to_bytes(),
        headers={h.EVENT_ID: env.event_id, h.EVENT_TYPE: env.event_type},
        error_class=error,
        error_message=f"boom {n}",
        attempts=3,
        first_failure_at=1_000 + n,
        last_failure_at=2_000 + n,
        envelope=env,
        history=[{"attempt": 1, "error": "boom"}],
    )


def raw_draft() -> DeadLetterDraft:
    return DeadLetterDraft(
        topic=fx.TOPIC,
        partition=0,
        offset=1,
        key=None,
        consumer=fx.GROUP,
        pipeline="effects",
        value=b"\xffnot an envelope",
        headers={},
        error_class="EnvelopeError",
        error_message="not json",
        attempts=1,
        first_failure_at=1,
        last_failure_at=1,
    )


async def seed(hub: Hub) -> list[int]:
    """Five dead letters: 3 PermanentError + 1 Timeout on the test topic, 1 raw; ids ascending."""
    ids = []
    async with hub.transaction() as conn:
        ids.append(await hub.dlq.add(conn, draft("a", 1)))
        ids.append(await hub.dlq.add(conn, draft("b", 2)))
        ids.append(await hub.dlq.add(conn, draft("c", 3, error="TimeoutError")))
        ids.append(await hub.dlq.add(conn, draft("d", 4, topic=OTHER_TOPIC)))
        ids.append(await hub.dlq.add(conn, raw_draft()))
    return ids


ROUTES = [
    ("GET", "/admin/dlq", None),
    ("GET", "/admin/dlq/1", None),
    ("POST", "/admin/dlq/1/replay", None),
    ("POST", "/admin/dlq/replay", {}),
    ("POST", "/admin/dlq/dismiss", {"ids": [1]}),
    ("GET", "/admin/jobs/x", None),
    ("GET", "/admin/lag", None),
    ("GET", "/admin/outbox", None),
    ("GET", "/admin/audit", None),
]


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
async def test_every_route_needs_an_admin_key(hub: Hub, client: httpx.AsyncClient) -> None:
    _, tenant_key = await tenancy.create_tenant(hub.engine, "acme")
    for method, path, body in ROUTES:
        anonymous = await client.request(method, path, json=body)
        assert_problem(anonymous, 401)
        as_tenant = await client.request(method, path, json=body, headers=bearer(tenant_key))
        assert_problem(as_tenant, 403)


async def test_list_filter_and_paginate(
    hub: Hub, client: httpx.AsyncClient, admin_key: str
) -> None:
    ids = await seed(hub)
    auth = bearer(admin_key)
    body = (await client.get("/admin/dlq", headers=auth)).json()
    assert [x["id"] for x in body["items"]] == ids[::-1]
    assert body["next_cursor"] is None
    first = body["items"][-1]
    assert first["event_type"] == fx.EVENT and first["consumer"] == fx.GROUP
    assert first["partition"] == 1 and first["offset"] == 101 and first["attempts"] == 3
    assert first["first_failure_at"] == 1001 and first["last_failure_at"] == 2001
    assert first["status"] == "pending" and first["error_message"] == "boom 1"

    pages: list[int] = []
    cursor: str | None = None
    for _ in range(5):
        params: dict[str, Any] = {"limit": 2}
        if cursor:
            params["cursor"] = cursor
        page = (await client.get("/admin/dlq", params=params, headers=auth)).json()
        pages += [x["id"] for x in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert pages == ids[::-1]

    async def listed(**params: Any) -> list[int]:
        r = await client.get("/admin/dlq", params=params, headers=auth)
        assert r.status_code == 200, r.text
        return [x["id"] for x in r.json()["items"]]

    assert await listed(topic=OTHER_TOPIC) == [ids[3]]
    assert await listed(error_class="TimeoutError") == [ids[2]]
    assert await listed(consumer=fx.GROUP, pipeline="effects") == ids[::-1]
    assert await listed(consumer="nobody") == []
    assert await listed(status="replayed") == []
    assert await listed(status="any") == ids[::-1]
    now = hub.clock.now_ms()
    assert await listed(since=now + 60_000) == []
    assert await listed(until=now + 60_000) == ids[::-1]
    assert_problem(await client.get("/admin/dlq", params={"limit": 201}, headers=auth), 422)
    assert_problem(await client.get("/admin/dlq", params={"cursor": "x"}, headers=auth), 422)
    assert_problem(await client.get("/admin/dlq", params={"status": "weird"}, headers=auth), 422)


async def test_get_one_with_envelope_or_raw(
    hub: Hub, client: httpx.AsyncClient, admin_key: str
) -> None:
    ids = await seed(hub)
    auth = bearer(admin_key)
    one = (await client.get(f"/admin/dlq/{ids[0]}", headers=auth)).json()
    assert one["envelope"]["event_type"] == fx.EVENT
    assert one["envelope"]["payload"] == {"n": 1, "note": ""}
    assert one["raw"] is None
    assert one["headers"][h.EVENT_TYPE] == fx.EVENT
    assert one["history"] == [{"attempt": 1, "error": "boom"}]
    raw = (await client.get(f"/admin/dlq/{ids[4]}", headers=auth)).json()
    assert raw["envelope"] is None and raw["raw"] == "/25vdCBhbiBlbnZlbG9wZQ=="
    assert_problem(await client.get("/admin/dlq/999999", headers=auth), 404)


async def test_replay_one_then_conflict(
    hub: Hub, client: httpx.AsyncClient, admin_key: str
) -> None:
    ids = await seed(hub)
    key_id = (await tenancy.authenticate(hub.engine, admin_key)).key_id  # type: ignore[union-attr]
    auth = bearer(admin_key)
    r = await client.post(f"/admin/dlq/{ids[0]}/replay", headers=auth)
    assert r.status_code == 200, r.text
    assert r.json()["status"] == "replayed" and r.json()["id"] == ids[0]
    event_id = r.json()["event_id"]
    o = tables.outbox
    async with hub.engine.connect() as conn:
        rows = (
            await conn.execute(
                sa.select(o.c.topic, o.c.headers).where(
                    o.c.event_id == event_id, o.c.topic == fx.TOPIC
                )
            )
        ).all()
    assert len(rows) == 1 and rows[0].headers[h.REPLAYED_FROM_DLQ] == str(ids[0])

    again = assert_problem(await client.post(f"/admin/dlq/{ids[0]}/replay", headers=auth), 409)
    assert "replayed" in again["detail"]
    not_envelope = assert_problem(
        await client.post(f"/admin/dlq/{ids[4]}/replay", headers=auth), 409
    )
    assert "envelope" in not_envelope["detail"]
    assert_problem(await client.post("/admin/dlq/999999/replay", headers=auth), 404)

    entries = (
        await client.get("/admin/audit", params={"action": "dlq.replay"}, headers=auth)
    ).json()
    results = [(e["target"], e["result"], e["actor"]) for e in entries["items"]]
    actor = f"admin:{key_id}"
    assert results == [
        (str(ids[4]), "refused", actor),
        (str(ids[0]), "refused", actor),
        (str(ids[0]), "ok", actor),
    ]


async def test_bulk_replay_job(
    hub: Hub, app: FastAPI, client: httpx.AsyncClient, admin_key: str
) -> None:
    ids = await seed(hub)
    auth = bearer(admin_key)
    body = {"topic": fx.TOPIC, "consumer": fx.GROUP}
    missing = await client.post("/admin/dlq/replay", json=body, headers=auth)
    assert_problem(missing, 400)  # creating POSTs need an Idempotency-Key
    once = {**auth, "Idempotency-Key": "bulk-1"}
    r = await client.post("/admin/dlq/replay", json=body, headers=once)
    assert r.status_code == 202, r.text
    again = await client.post("/admin/dlq/replay", json=body, headers=once)
    assert again.json() == r.json()  # the same job, not a second one
    accepted = r.json()
    assert accepted["total"] == 4  # a, b, c and the raw one; d is on another topic
    location = r.headers["location"]
    assert location == f"/admin/jobs/{accepted['job_id']}"
    job: dict[str, Any] = {}
    for _ in range(200):
        job = (await client.get(location, headers=auth)).json()
        if job["status"] in ("done", "failed"):
            break
        await asyncio.sleep(0.02)
    assert job["status"] == "done", job
    assert (job["total"], job["done"], job["failed"]) == (4, 3, 1)
    assert job["kind"] == "dlq.replay" and job["finished_at"] is not None
    assert job["actor"].startswith("admin:")
    replayed = await hub.dlq.list(DeadLetterFilter(status="replayed"))
    assert sorted(x.id for x in replayed) == ids[:3]
    pending = await hub.dlq.list()
    assert sorted(x.id for x in pending) == [ids[3], ids[4]]
    assert_problem(await client.get("/admin/jobs/nope", headers=auth), 404)

    # max bounds the job; nothing matching gives an empty, finished job
    r = await client.post(
        "/admin/dlq/replay", json={"max": 1}, headers={**auth, "Idempotency-Key": "bulk-2"}
    )
    assert r.json()["total"] == 1
    await app.state.replay_jobs.wait(r.json()["job_id"])
    job = (await client.get(r.headers["location"], headers=auth)).json()
    assert (job["status"], job["done"], job["failed"]) == ("done", 0, 1)  # the newest: raw
    r = await client.post(
        "/admin/dlq/replay", json={"topic": "none"}, headers={**auth, "Idempotency-Key": "bulk-3"}
    )
    assert r.json()["total"] == 0
    await app.state.replay_jobs.wait(r.json()["job_id"])
    assert (await client.get(r.headers["location"], headers=auth)).json()["status"] == "done"


async def test_replay_jobs_without_http(hub: Hub) -> None:
    ids = await seed(hub)
    jobs = ReplayJobs(hub.engine, hub.dlq, hub.clock, rate_per_s=0)
    job = await jobs.start(DeadLetterFilter(error_class="PermanentError"), max_items=10, actor="t")
    assert job.status == "queued" and job.total == 3
    await jobs.wait(job.id)
    finished = await jobs.get(job.id)
    assert finished is not None
    assert (finished.status, finished.done, finished.failed) == ("done", 3, 0)
    replayed = await hub.dlq.list(DeadLetterFilter(status="replayed"))
    assert sorted(x.id for x in replayed) == [ids[0], ids[1], ids[3]]
    assert not jobs.tasks


async def test_dismiss(hub: Hub, client: httpx.AsyncClient, admin_key: str) -> None:
    ids = await seed(hub)
    auth = bearer(admin_key)
    r = await client.post(
        "/admin/dlq/dismiss", json={"ids": [ids[1], ids[2], 999999], "reason": "bad"}, headers=auth
    )
    assert r.status_code == 200, r.text
    assert r.json() == {"dismissed": 2}
    listed = (await client.get("/admin/dlq", params={"status": "dismissed"}, headers=auth)).json()
    assert [x["id"] for x in listed["items"]] == [ids[2], ids[1]]
    assert_problem(await client.post("/admin/dlq/dismiss", json={"ids": []}, headers=auth), 422)
    entries = (
        await client.get("/admin/audit", params={"action": "dlq.dismiss", "limit": 2}, headers=auth)
    ).json()["items"]
    assert [e["target"] for e in entries] == ["999999", str(ids[2])]
    assert entries[0]["result"] == "not-pending" and entries[1]["detail"] == {"reason": "bad"}


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
async def test_lag_and_outbox(hub: Hub, client: httpx.AsyncClient, admin_key: str) -> None:
    auth = bearer(admin_key)
    async with hub.transaction() as conn:
        await hub.outbox.add(conn, [fx.request("k", 1), fx.request("k", 2)])
    outbox = (await client.get("/admin/outbox", headers=auth)).json()
    assert outbox["backlog"] == 2 and outbox["oldest_age_s"] >= 0
    await hub.relay.drain()
    lag = (await client.get("/admin/lag", headers=auth)).json()
    assert lag["broker_reachable"] is True
    [row] = [x for x in lag["items"] if x["group"] == fx.GROUP and x["topic"] == fx.TOPIC]
    assert row["lag"] == 2 and row["breached"] is False and row["oldest_age_s"] >= 0
    assert sum(p["lag"] for p in row["partitions"]) == 2
    assert (await client.get("/admin/outbox", headers=auth)).json()["backlog"] == 0


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
async def test_openapi_declares_models_and_problems(app: FastAPI) -> None:
    spec = app.openapi()
    paths = spec["paths"]
    for path, method in [
        ("/admin/dlq", "get"),
        ("/admin/dlq/{dead_letter_id}", "get"),
        ("/admin/dlq/{dead_letter_id}/replay", "post"),
        ("/admin/dlq/replay", "post"),
        ("/admin/dlq/dismiss", "post"),
        ("/admin/jobs/{job_id}", "get"),
        ("/admin/lag", "get"),
        ("/admin/outbox", "get"),
        ("/admin/audit", "get"),
    ]:
        responses = paths[path][method]["responses"]
        ok = responses.get("200") or responses["202"]
        assert "$ref" in ok["content"]["application/json"]["schema"], (path, ok)
        for status in ("401", "403"):
            content = responses[status]["content"]
            assert list(content) == [PROBLEM], (path, status)
            assert {"type", "title", "status", "detail"} <= set(
                content[PROBLEM]["schema"]["required"]
            )
    assert "409" in paths["/admin/dlq/{dead_letter_id}/replay"]["post"]["responses"]
    assert "404" in paths["/admin/dlq/{dead_letter_id}"]["get"]["responses"]
    assert PROBLEM in paths["/admin/dlq"]["get"]["responses"]["422"]["content"]
    assert "422" not in paths["/admin/lag"]["get"]["responses"]
    for path_item in paths.values():
        for operation in path_item.values():
            for status, response in operation["responses"].items():
                if status.startswith(("4", "5")):
                    assert list(response["content"]) == [PROBLEM], (operation, status)
