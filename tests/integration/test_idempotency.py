"""Idempotency-Key on creating POSTs, on SQLite and PostgreSQL: replay, reuse, races, expiry."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from fastapi import APIRouter, FastAPI, Request, Response
from pydantic import BaseModel

from aigc_hub import tenancy
from aigc_hub.bootstrap import Hub
from aigc_hub.core import ids
from aigc_hub.core.clock import ManualClock
from aigc_hub.interfaces.http import auth, problems
from aigc_hub.interfaces.http.app import create_app
from aigc_hub.interfaces.http.idempotency import (
    ADMIN_SCOPE,
    AdminIdempotency,
    Idempotency,
    IdempotencyPolicy,
    IdempotentRoute,
)
from aigc_hub.interfaces.http.problems import Problem
from aigc_hub.messaging.memory import MemoryBroker
from aigc_hub.reliability.idempotency_scanner import IdempotencyExpiryScanner
from aigc_hub.store import tables
from tests.support.hubs import hub_for

PROBLEM = "application/problem+json"
DAY_S = 24 * 3600

# -- a test-only resource and router ----------------------------------------------------------

test_metadata = sa.MetaData()
widgets = sa.Table(
    "idem_test_widgets",
    test_metadata,
    sa.Column("id", sa.String(36), primary_key=True),
    sa.Column("tenant_id", sa.String(36), nullable=False),
    sa.Column("name", sa.String(100), nullable=False),
)


@dataclass
class Control:
    """What the test route does next; ``app.state.control``."""

    calls: int = 0
    entered: asyncio.Event = field(default_factory=asyncio.Event)
    gate: asyncio.Event | None = None
    fail_next: list[str] = field(default_factory=list)  # "raise" or "503"


class Widget(BaseModel):
    name: str
    size: int = 1


router = APIRouter(prefix="/idem", route_class=IdempotentRoute)


@router.post("/widgets", status_code=201)
async def create_widget(
    body: Widget,
    request: Request,
    response: Response,
    who: auth.TenantPrincipal,
    idem: Idempotency,
) -> dict[str, Any]:
    control: Control = request.app.state.control
    control.calls += 1
    control.entered.set()
    if control.gate is not None:
        await control.gate.wait()
    if control.fail_next:
        failure = control.fail_next.pop(0)
        if failure == "503":
            raise Problem(503, "try again")
        raise RuntimeError("boom")
    if body.name == "forbidden":
        raise Problem(403, "no such widgets allowed")
    new_id = ids.new_id_str()
    async with auth.hub_of(request).engine.begin() as conn:
        await conn.execute(
            widgets.insert().values(id=new_id, tenant_id=who.tenant_id, name=body.name)
        )
    response.headers["Location"] = f"/v1/idem/widgets/{new_id}"
    return {"id": new_id, "name": body.name, "key": idem.key}


@router.post("/admin-jobs", status_code=202)
async def start_admin_job(
    request: Request, who: auth.AdminPrincipal, idem: AdminIdempotency
) -> dict[str, Any]:
    control: Control = request.app.state.control
    control.calls += 1
    return {"job": ids.new_id_str()}


# -- fixtures ------------------------------------------------------------------------------------


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
async def hub(db_url: str, clock: ManualClock) -> AsyncIterator[Hub]:
    async with hub_for(db_url, MemoryBroker(), [], clock=clock) as started:
        async with started.engine.begin() as conn:
            await conn.run_sync(test_metadata.create_all)
        yield started


@pytest.fixture
def app(hub: Hub) -> FastAPI:
    made = create_app(hub, routers=[router])
    made.state.control = Control()
    return made


@pytest.fixture
async def client(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://hub.test") as c:
        yield c


@pytest.fixture
async def key(hub: Hub) -> str:
    _, plaintext = await tenancy.create_tenant(hub.engine, "acme")
    return plaintext


def headers(api_key: str, idem: str | None = "k-1") -> dict[str, str]:
    found = {"Authorization": f"Bearer {api_key}"}
    if idem is not None:
        found["Idempotency-Key"] = idem
    return found


async def widget_count(hub: Hub) -> int:
    async with hub.engine.connect() as conn:
        return int((await conn.execute(sa.select(sa.func.count()).select_from(widgets))).scalar())


async def key_rows(hub: Hub) -> list[Any]:
    t = tables.idempotency_keys
    async with hub.engine.connect() as conn:
        return list((await conn.execute(sa.select(t))).all())


def assert_problem(response: httpx.Response, status: int, slug: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith(PROBLEM)
    body: dict[str, Any] = response.json()
    assert body["type"] == problems.type_uri(slug)
    return body


URL = "/v1/idem/widgets"

# -- tests ---------------------------------------------------------------------------------------


async def test_eight_concurrent_identical_posts_make_one_resource(
    hub: Hub, app: FastAPI, client: httpx.AsyncClient, key: str
) -> None:
    answers = await asyncio.gather(
        *(client.post(URL, json={"name": "w", "size": 2}, headers=headers(key)) for _ in range(8))
    )
    assert {a.status_code for a in answers} == {201}, [a.text for a in answers]
    assert len({a.content for a in answers}) == 1
    assert len({a.headers["location"] for a in answers}) == 1
    assert await widget_count(hub) == 1
    assert app.state.control.calls == 1
    replayed = [a.headers.get("idempotent-replayed") for a in answers]
    assert replayed.count("true") == 7 and replayed.count(None) == 1
    [row] = await key_rows(hub)
    assert row.status == "done" and row.response_status == 201


async def test_a_sequential_retry_replays_the_answer_exactly(
    hub: Hub, client: httpx.AsyncClient, key: str
) -> None:
    first = await client.post(URL, json={"name": "w", "size": 2}, headers=headers(key))
    # Same JSON, other key order and spacing: the same request.
    raw = json.dumps({"size": 2, "name": "w"}, indent=2)
    retry_headers = headers(key, '"k-1"') | {"Content-Type": "application/json"}
    again = await client.post(URL, content=raw, headers=retry_headers)
    assert first.status_code == again.status_code == 201
    assert again.content == first.content
    assert again.headers["location"] == first.headers["location"]
    assert again.headers["content-type"] == first.headers["content-type"]
    assert again.headers["idempotent-replayed"] == "true"
    assert "idempotent-replayed" not in first.headers
    assert await widget_count(hub) == 1


async def test_the_same_key_with_another_body_is_422(
    hub: Hub, client: httpx.AsyncClient, key: str
) -> None:
    assert (await client.post(URL, json={"name": "a"}, headers=headers(key))).status_code == 201
    other = await client.post(URL, json={"name": "b"}, headers=headers(key))
    assert_problem(other, 422, "idempotency-key-reused")
    assert await widget_count(hub) == 1


async def test_a_retry_while_the_first_is_in_flight_is_409(
    hub: Hub, app: FastAPI, client: httpx.AsyncClient, key: str
) -> None:
    app.state.idempotency = IdempotencyPolicy(wait_s=0.1)
    control: Control = app.state.control
    control.gate = asyncio.Event()
    first = asyncio.create_task(client.post(URL, json={"name": "w"}, headers=headers(key)))
    await asyncio.wait_for(control.entered.wait(), 10)
    second = await client.post(URL, json={"name": "w"}, headers=headers(key))
    assert_problem(second, 409, "idempotency-key-in-flight")
    assert second.headers["retry-after"] == "1"
    control.gate.set()
    done = await first
    assert done.status_code == 201
    third = await client.post(URL, json={"name": "w"}, headers=headers(key))
    assert third.status_code == 201 and third.content == done.content
    assert control.calls == 1 and await widget_count(hub) == 1


@pytest.mark.parametrize(
    "value,slug",
    [(None, "idempotency-key-missing"), ("", "idempotency-key-invalid"), ("x" * 256, None)],
    ids=["missing", "empty", "too-long"],
)
async def test_a_missing_or_invalid_key_is_400(
    hub: Hub, app: FastAPI, client: httpx.AsyncClient, key: str, value: str | None, slug: str
) -> None:
    response = await client.post(URL, json={"name": "w"}, headers=headers(key, value))
    assert_problem(response, 400, slug or "idempotency-key-invalid")
    assert app.state.control.calls == 0 and await widget_count(hub) == 0
    assert await key_rows(hub) == []
    longest = await client.post(URL, json={"name": "w"}, headers=headers(key, "x" * 255))
    assert longest.status_code == 201


async def test_keys_are_scoped_by_tenant(hub: Hub, client: httpx.AsyncClient, key: str) -> None:
    _, other = await tenancy.create_tenant(hub.engine, "globex")
    mine = await client.post(URL, json={"name": "w"}, headers=headers(key))
    theirs = await client.post(URL, json={"name": "w"}, headers=headers(other))
    assert mine.status_code == theirs.status_code == 201
    assert mine.json()["id"] != theirs.json()["id"]
    assert "idempotent-replayed" not in theirs.headers
    assert await widget_count(hub) == 2
    assert len(await key_rows(hub)) == 2


@pytest.mark.parametrize("failure", ["raise", "503"])
async def test_a_5xx_first_attempt_lets_a_retry_run_the_route_again(
    hub: Hub, app: FastAPI, client: httpx.AsyncClient, key: str, failure: str
) -> None:
    control: Control = app.state.control
    control.fail_next = [failure]
    failed = await client.post(URL, json={"name": "w"}, headers=headers(key))
    assert failed.status_code == (500 if failure == "raise" else 503)
    assert await key_rows(hub) == []
    retry = await client.post(URL, json={"name": "w"}, headers=headers(key))
    assert retry.status_code == 201 and "idempotent-replayed" not in retry.headers
    assert control.calls == 2 and await widget_count(hub) == 1


async def test_a_4xx_answer_is_stored_and_replayed(
    app: FastAPI, client: httpx.AsyncClient, key: str
) -> None:
    first = await client.post(URL, json={"name": "forbidden"}, headers=headers(key))
    assert_problem(first, 403, "forbidden")
    again = await client.post(URL, json={"name": "forbidden"}, headers=headers(key))
    assert again.status_code == 403 and again.content == first.content
    assert again.headers["content-type"].startswith(PROBLEM)
    assert again.headers["idempotent-replayed"] == "true"
    assert app.state.control.calls == 1


async def test_an_invalid_body_releases_the_key(
    hub: Hub, client: httpx.AsyncClient, key: str
) -> None:
    bad = await client.post(URL, json={"name": "w", "size": "big"}, headers=headers(key))
    assert_problem(bad, 422, "validation-error")
    assert await key_rows(hub) == []
    fixed = await client.post(URL, json={"name": "w", "size": 3}, headers=headers(key))
    assert fixed.status_code == 201


async def test_the_scanner_deletes_expired_keys_and_abandoned_claims(
    hub: Hub, clock: ManualClock, client: httpx.AsyncClient, key: str
) -> None:
    first = await client.post(URL, json={"name": "w"}, headers=headers(key))
    assert first.status_code == 201
    who = await tenancy.authenticate(hub.engine, key)
    assert who is not None and who.tenant_id is not None
    now = clock.now_ms()
    t = tables.idempotency_keys
    async with hub.engine.begin() as conn:
        # A claim whose process died 25 h ago, not yet expired by its own ttl.
        await conn.execute(
            t.insert().values(
                tenant_id=who.tenant_id,
                key="crashed",
                fingerprint="0" * 64,
                status="in_flight",
                created_at=now - 25 * 3600 * 1000,
                expires_at=now + 3600 * 1000,
            )
        )
    scanner = IdempotencyExpiryScanner(hub.engine, clock)
    [abandoned] = await scanner.find(clock.now_ms())
    assert abandoned.detail["key"] == "crashed"
    assert await scanner.repair(abandoned, clock.now_ms()) == "abandoned"
    assert await scanner.repair(abandoned, clock.now_ms()) == "skipped"
    assert [r.key for r in await key_rows(hub)] == ["k-1"]

    await clock.advance(DAY_S + 1)
    [expired] = await scanner.find(clock.now_ms())
    assert expired.detail["key"] == "k-1" and expired.target.startswith("idempotency:")
    assert await scanner.repair(expired, clock.now_ms()) == "expired"
    assert await key_rows(hub) == []
    again = await client.post(URL, json={"name": "w"}, headers=headers(key))
    assert again.status_code == 201 and again.json()["id"] != first.json()["id"]


async def test_an_expired_key_is_free_before_the_scanner_runs(
    hub: Hub, clock: ManualClock, client: httpx.AsyncClient, key: str
) -> None:
    first = await client.post(URL, json={"name": "a"}, headers=headers(key))
    await clock.advance(DAY_S + 1)
    other = await client.post(URL, json={"name": "b"}, headers=headers(key))
    assert other.status_code == 201 and other.json()["id"] != first.json()["id"]
    assert await widget_count(hub) == 2


async def test_admin_routes_are_idempotent_in_the_admin_scope(
    hub: Hub, app: FastAPI, client: httpx.AsyncClient, key: str
) -> None:
    admin = await tenancy.create_admin_key(hub.engine)
    url = "/v1/idem/admin-jobs"
    first = await client.post(url, json={"kind": "purge"}, headers=headers(admin))
    again = await client.post(url, json={"kind": "purge"}, headers=headers(admin))
    assert first.status_code == again.status_code == 202
    assert again.content == first.content and again.headers["idempotent-replayed"] == "true"
    assert app.state.control.calls == 1
    assert [r.tenant_id for r in await key_rows(hub)] == [ADMIN_SCOPE]
    refused = await client.post(url, json={"kind": "purge"}, headers=headers(key))
    assert_problem(refused, 403, "forbidden")
