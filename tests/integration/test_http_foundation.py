"""The HTTP foundation on SQLite and PostgreSQL: problem+json, auth, limits, admission, probes."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import APIRouter, Depends, Request
from prometheus_client.parser import text_string_to_metric_families
from pydantic import BaseModel

from aigc_hub import tenancy
from aigc_hub.bootstrap import Hub
from aigc_hub.core import errors
from aigc_hub.hub_config import HubConfig
from aigc_hub.interfaces.http import auth, limits, problems
from aigc_hub.interfaces.http.app import create_app
from aigc_hub.messaging.memory import MemoryBroker
from aigc_hub.pipeline import Pipeline
from aigc_hub.reliability.admission import Admission
from aigc_hub.store import engine as store_engine
from tests.support.hubs import hub_for

PROBLEM = "application/problem+json"

# -- a test-only router exercising auth and limits ---------------------------------------------

router = APIRouter(prefix="/test")


class Item(BaseModel):
    name: str
    size: int


@router.get("/me")
async def me(who: limits.LimitedTenant) -> dict[str, Any]:
    return {"tenant_id": who.tenant_id}


@router.get("/admin")
async def admin_only(who: auth.AdminPrincipal) -> dict[str, Any]:
    return {"role": who.role}


@router.get("/items/{item_id}")
async def item(item_id: str, who: auth.TenantPrincipal) -> dict[str, Any]:
    raise auth.not_found("item")


@router.post("/items")
async def post_item(body: Item) -> dict[str, Any]:
    return body.model_dump()


@router.post("/raw")
async def raw(request: Request) -> dict[str, int]:
    return {"size": len(await request.body())}


@router.post("/jobs", dependencies=[Depends(limits.admit("documents"))])
async def start_job() -> dict[str, str]:
    return {"status": "accepted"}


@router.get("/boom")
async def boom() -> None:
    raise RuntimeError("secret internal detail")


# What a pipeline's service raises, by the kind the backbone's error tree gives it.
RAISED: dict[str, errors.HubError] = {
    "invalid": errors.InvalidInput("model", "no provider serves model 'x'"),
    "missing": errors.NotFound("no task t1"),
    "conflict": errors.Conflict("the task is SUCCEEDED; it can no longer be canceled"),
}


@router.get("/raise/{kind}")
async def raise_kind(kind: str) -> None:
    raise RAISED[kind]


# -- fixtures ------------------------------------------------------------------------------------


@pytest.fixture
async def hub(db_url: str) -> AsyncIterator[Hub]:
    async with hub_for(db_url, MemoryBroker(), []) as started:
        yield started


def client_for(app: Any) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    return httpx.AsyncClient(transport=transport, base_url="http://hub.test")


@pytest.fixture
async def client(hub: Hub) -> AsyncIterator[httpx.AsyncClient]:
    async with client_for(create_app(hub, routers=[router])) as c:
        yield c


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def assert_problem(response: httpx.Response, status: int, slug: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith(PROBLEM)
    body: dict[str, Any] = response.json()
    assert body["type"] == problems.BASE + slug
    assert body["status"] == status
    assert body["title"] and isinstance(body["detail"], str)
    assert body["instance"] == response.request.url.path
    return body


# -- auth ----------------------------------------------------------------------------------------


async def test_a_tenant_key_is_accepted(hub: Hub, client: httpx.AsyncClient) -> None:
    tenant, key = await tenancy.create_tenant(hub.engine, "acme")
    response = await client.get("/v1/test/me", headers=bearer(key))
    assert response.status_code == 200
    assert response.json() == {"tenant_id": tenant.id}


@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Basic abc"}, bearer("ak_" + "w" * 32), bearer("")],
    ids=["missing", "not-bearer", "wrong", "empty"],
)
async def test_missing_or_wrong_keys_are_401(
    client: httpx.AsyncClient, headers: dict[str, str]
) -> None:
    response = await client.get("/v1/test/me", headers=headers)
    assert_problem(response, 401, "unauthorized")
    assert response.headers["www-authenticate"] == "Bearer"


async def test_a_revoked_key_is_401(hub: Hub, client: httpx.AsyncClient) -> None:
    _, key = await tenancy.create_tenant(hub.engine, "acme")
    who = await tenancy.authenticate(hub.engine, key)
    assert who is not None
    await tenancy.revoke(hub.engine, who.key_id)
    assert_problem(await client.get("/v1/test/me", headers=bearer(key)), 401, "unauthorized")


async def test_admin_routes_refuse_tenant_keys(hub: Hub, client: httpx.AsyncClient) -> None:
    _, key = await tenancy.create_tenant(hub.engine, "acme")
    admin = await tenancy.create_admin_key(hub.engine)
    assert_problem(await client.get("/v1/test/admin", headers=bearer(key)), 403, "forbidden")
    assert (await client.get("/v1/test/admin", headers=bearer(admin))).json() == {"role": "admin"}
    assert_problem(await client.get("/v1/test/me", headers=bearer(admin)), 403, "forbidden")


async def test_not_found_is_a_problem(hub: Hub, client: httpx.AsyncClient) -> None:
    _, key = await tenancy.create_tenant(hub.engine, "acme")
    body = assert_problem(
        await client.get("/v1/test/items/x", headers=bearer(key)), 404, "not-found"
    )
    assert body["detail"] == "no such item"
    assert_problem(await client.get("/v1/nowhere"), 404, "not-found")
    assert_problem(await client.delete("/healthz"), 405, "method-not-allowed")


# -- errors --------------------------------------------------------------------------------------


async def test_validation_errors_name_the_fields(client: httpx.AsyncClient) -> None:
    response = await client.post("/v1/test/items", json={"name": "x", "size": "big"})
    body = assert_problem(response, 422, "validation-error")
    assert [e["field"] for e in body["errors"]] == ["body.size"]
    assert "body.size" in body["detail"]


async def test_a_bug_is_a_500_problem_without_internals(client: httpx.AsyncClient) -> None:
    response = await client.get("/v1/test/boom")
    body = assert_problem(response, 500, "internal-error")
    assert "secret" not in response.text
    assert "Traceback" not in response.text and "RuntimeError" not in response.text
    assert set(body) == {"type", "title", "status", "detail", "instance"}


@pytest.mark.parametrize(
    ("kind", "status", "slug"),
    [
        ("invalid", 422, "validation-error"),
        ("missing", 404, "not-found"),
        ("conflict", 409, "conflict"),
    ],
)
async def test_a_pipeline_error_of_the_hub_tree_is_answered_with_its_status(
    client: httpx.AsyncClient, kind: str, status: int, slug: str
) -> None:
    response = await client.get(f"/v1/test/raise/{kind}")

    body = assert_problem(response, status, slug)
    assert body["detail"] == RAISED[kind].message
    if kind == "invalid":
        assert body["errors"] == [{"field": "model", "message": RAISED[kind].message}]
    assert "Traceback" not in response.text


# -- limits --------------------------------------------------------------------------------------


async def test_big_bodies_are_413(client: httpx.AsyncClient) -> None:
    big = b"x" * ((1 << 20) + 1)
    assert_problem(await client.post("/v1/test/raw", content=big), 413, "payload-too-large")
    ok = await client.post("/v1/test/raw", content=b"x" * 1000)
    assert ok.json() == {"size": 1000}


async def test_big_streamed_bodies_are_413_without_content_length(
    client: httpx.AsyncClient,
) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(20):
            yield b"x" * 65536

    response = await client.post("/v1/test/raw", content=chunks())
    assert "content-length" not in response.request.headers
    assert_problem(response, 413, "payload-too-large")


async def test_big_json_bodies_are_413(client: httpx.AsyncClient) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        yield b'{"name": "'
        for _ in range(20):
            yield b"x" * 65536
        yield b'", "size": 1}'

    headers = {"Content-Type": "application/json"}
    response = await client.post("/v1/test/items", content=chunks(), headers=headers)
    assert_problem(response, 413, "payload-too-large")


async def test_deep_json_is_refused(client: httpx.AsyncClient) -> None:
    deep = {"name": "x", "size": 1, "extra": json.loads("[" * 40 + "]" * 40)}
    assert_problem(await client.post("/v1/test/items", json=deep), 400, "json-too-deep")
    # Brackets inside strings do not count.
    fine = {"name": "[" * 100, "size": 1}
    assert (await client.post("/v1/test/items", json=fine)).status_code == 200


async def test_the_tenant_rate_limit_answers_429_with_retry_after(hub: Hub) -> None:
    _, key = await tenancy.create_tenant(hub.engine, "acme")
    _, other = await tenancy.create_tenant(hub.engine, "globex")
    app = create_app(hub, routers=[router], limits=limits.Limits(rate_per_s=0.01, burst=2))
    async with client_for(app) as client:
        for _ in range(2):
            assert (await client.get("/v1/test/me", headers=bearer(key))).status_code == 200
        response = await client.get("/v1/test/me", headers=bearer(key))
        assert_problem(response, 429, "too-many-requests")
        assert int(response.headers["retry-after"]) >= 1
        # Buckets are per tenant.
        assert (await client.get("/v1/test/me", headers=bearer(other))).status_code == 200


async def test_a_closed_gate_answers_429_with_retry_after(
    hub: Hub, client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert (await client.post("/v1/test/jobs")).status_code == 200
    monkeypatch.setattr(hub.gate, "admit", lambda p: Admission(False, 42, f"{p}: behind"))
    response = await client.post("/v1/test/jobs")
    body = assert_problem(response, 429, "too-many-requests")
    assert response.headers["retry-after"] == "42"
    assert body["pipeline"] == "documents" and body["detail"] == "documents: behind"


async def test_an_unreachable_broker_closes_the_gate_with_503(
    hub: Hub, client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    down = Admission(False, 7, "broker unreachable", broker_unreachable=True)
    monkeypatch.setattr(hub.gate, "admit", lambda p: down)
    response = await client.post("/v1/test/jobs")
    assert_problem(response, 503, "unavailable")
    assert response.headers["retry-after"] == "7"


# -- probes --------------------------------------------------------------------------------------


async def test_healthz_and_readyz_answer_200(client: httpx.AsyncClient) -> None:
    assert (await client.get("/healthz")).json() == {"status": "ok"}
    ready = await client.get("/readyz")
    assert ready.status_code == 200, ready.text
    assert ready.json()["checks"] == ["database", "broker", "cache"]


async def test_readyz_is_503_on_an_unmigrated_database(tmp_path: Path) -> None:
    engine = store_engine.create_engine(f"sqlite:///{tmp_path / 'empty.db'}")
    hub = Hub(HubConfig(engine=engine, broker=MemoryBroker()))
    await hub.start()
    try:
        async with client_for(create_app(hub)) as client:
            response = await client.get("/readyz")
    finally:
        await hub.close()
    body = assert_problem(response, 503, "unavailable")
    assert body["failed"] == ["database"]
    assert "retry-after" in response.headers


async def test_metrics_parse(client: httpx.AsyncClient) -> None:
    response = await client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    names = {family.name for family in text_string_to_metric_families(response.text)}
    assert any(name.startswith("aigc_hub_") for name in names)


async def test_pipeline_routers_are_mounted_under_v1(db_url: str) -> None:
    pipeline = Pipeline("routed")
    own = APIRouter(prefix="/routed")

    @own.get("/ping")
    async def ping() -> dict[str, str]:
        return {"pong": "routed"}

    pipeline.routers = [own]
    async with hub_for(db_url, MemoryBroker(), [pipeline]) as hub:
        client = client_for(create_app(hub))
        response = await client.get("/v1/routed/ping")
        await client.aclose()
    assert response.json() == {"pong": "routed"}
