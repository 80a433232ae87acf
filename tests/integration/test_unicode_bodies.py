"""JSON bodies that are not Unicode text (a lone UTF-16 surrogate escape) against the real app
on SQLite and PostgreSQL: a 400 problem before any route runs, and nothing stored."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
import sqlalchemy as sa

from aigc_hub import tenancy
from aigc_hub.bootstrap import Hub
from aigc_hub.interfaces.http import problems
from aigc_hub.interfaces.http.app import create_app
from aigc_hub.messaging.memory import MemoryBroker
from aigc_hub.pipelines.generation import services
from aigc_hub.pipelines.generation.models import credit_ledger, generation_tasks
from aigc_hub.pipelines.generation.pipeline import pipeline as generation
from aigc_hub.pipelines.generation.settings import GenerationSettings
from aigc_hub.pipelines.generation.state import build
from aigc_hub.store import tables
from tests.support.hubs import hub_for

URL = "/v1/generation-tasks"
LONE = rb'{"model":"local-v1","prompt":"boat \ud800","duration_s":1,"resolution":"160x90"}'
PAIRED = rb'{"model":"local-v1","prompt":"boat \ud83d\udea2","duration_s":1,"resolution":"160x90"}'


@pytest.fixture
async def hub(db_url: str) -> AsyncIterator[Hub]:
    pipeline = generation.with_state(lambda hub, _settings: build(hub, GenerationSettings()))
    async with hub_for(db_url, MemoryBroker(), [pipeline]) as started:
        yield started


@pytest.fixture
async def client(hub: Hub) -> AsyncIterator[httpx.AsyncClient]:
    tenant, key = await tenancy.create_tenant(hub.engine, "acme")
    await services.grant_credits(hub, tenant_id=tenant.id, amount=100, grant_id="g")
    transport = httpx.ASGITransport(app=create_app(hub), raise_app_exceptions=False)
    async with httpx.AsyncClient(
        transport=transport,
        base_url="http://hub.test",
        headers={"Authorization": f"Bearer {key}"},
    ) as c:
        yield c


async def stored(hub: Hub) -> tuple[int, int, list[str]]:
    """(idempotency keys, tasks, ledger entry types) in the database."""
    async with hub.engine.connect() as conn:
        keys = await conn.scalar(sa.select(sa.func.count()).select_from(tables.idempotency_keys))
        tasks = await conn.scalar(sa.select(sa.func.count()).select_from(generation_tasks))
        types = (await conn.execute(sa.select(credit_ledger.c.type))).scalars().all()
    return int(keys or 0), int(tasks or 0), list(types)


@pytest.mark.parametrize(
    "headers",
    [
        {"Idempotency-Key": "k-1", "Content-Type": "application/json"},
        {"Content-Type": "application/json; charset=utf-8"},
        {"Idempotency-Key": "k-2"},  # no content type: FastAPI still parses it as JSON
    ],
    ids=["with-key", "without-key", "no-content-type"],
)
async def test_a_lone_surrogate_in_a_create_body_is_a_400_problem_and_nothing_is_stored(
    hub: Hub, client: httpx.AsyncClient, headers: dict[str, str]
) -> None:
    response = await client.post(URL, content=LONE, headers=headers)
    assert response.status_code == 400, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    problem = response.json()
    assert problem["type"] == problems.type_uri("json-invalid-unicode")
    assert "surrogate" in problem["detail"]
    assert await stored(hub) == (0, 0, ["GRANT"])


async def test_a_surrogate_pair_in_a_create_body_is_ordinary_text(
    hub: Hub, client: httpx.AsyncClient
) -> None:
    headers = {"Idempotency-Key": "k-3", "Content-Type": "application/json"}
    response = await client.post(URL, content=PAIRED, headers=headers)
    assert response.status_code == 201, response.text
    assert await stored(hub) == (1, 1, ["GRANT", "RESERVE"])
