"""API keys remembered for a few seconds, on SQLite and PostgreSQL: a revocation through the
admin route counts at once in that process; one made elsewhere counts once the entry is old."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from fastapi import FastAPI

from aigc_hub import tenancy
from aigc_hub.bootstrap import Hub
from aigc_hub.interfaces.http.app import create_app
from aigc_hub.interfaces.http.key_cache import KeyCache
from aigc_hub.messaging.memory import MemoryBroker
from aigc_hub.pipelines.generation.pipeline import pipeline as generation
from aigc_hub.reliability import audit
from tests.support.hubs import hub_for

#: A tenant route that needs nothing but the key.
URL = "/v1/credits"


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def hub(db_url: str) -> AsyncIterator[Hub]:
    async with hub_for(db_url, MemoryBroker(), [generation]) as started:
        yield started


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def app(hub: Hub, clock: Clock) -> FastAPI:
    made = create_app(hub)
    made.state.key_cache = KeyCache(ttl_s=5.0, clock=clock)
    return made


@pytest.fixture
async def client(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://hub.test") as c:
        yield c


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def test_a_key_revoked_elsewhere_is_accepted_until_its_entry_is_old(
    hub: Hub, client: httpx.AsyncClient, clock: Clock
) -> None:
    _, key = await tenancy.create_tenant(hub.engine, "acme")
    assert (await client.get(URL, headers=bearer(key))).status_code == 200
    who = await tenancy.authenticate(hub.engine, key)
    assert who is not None
    await tenancy.revoke(hub.engine, who.key_id)  # as another process would
    clock.now += 4.9
    assert (await client.get(URL, headers=bearer(key))).status_code == 200
    clock.now += 0.1
    assert (await client.get(URL, headers=bearer(key))).status_code == 401


async def test_a_key_revoked_through_the_admin_route_is_refused_at_once(
    hub: Hub, client: httpx.AsyncClient
) -> None:
    _, key = await tenancy.create_tenant(hub.engine, "acme")
    admin = await tenancy.create_admin_key(hub.engine)
    assert (await client.get(URL, headers=bearer(key))).status_code == 200
    who = await tenancy.authenticate(hub.engine, key)
    assert who is not None
    url = f"/admin/api-keys/{who.key_id}/revoke"
    assert (await client.post(url, headers=bearer(key))).status_code == 403
    revoked = await client.post(url, headers=bearer(admin))
    assert revoked.status_code == 200 and revoked.json() == {"revoked": True}
    assert (await client.get(URL, headers=bearer(key))).status_code == 401
    again = await client.post(url, headers=bearer(admin))
    assert again.json() == {"revoked": False}
    entries = await audit.recent(hub.engine, action="api_key.revoke")
    assert [(e.target, e.result) for e in entries] == [
        (f"api_key:{who.key_id}", "not_live"),
        (f"api_key:{who.key_id}", "revoked"),
    ]
    assert entries[0].actor.startswith("admin:")


async def test_an_unknown_key_is_never_remembered(hub: Hub, client: httpx.AsyncClient) -> None:
    _, key = await tenancy.create_tenant(hub.engine, "acme")
    who = await tenancy.authenticate(hub.engine, key)
    assert who is not None
    await tenancy.revoke(hub.engine, who.key_id)
    assert (await client.get(URL, headers=bearer(key))).status_code == 401
    fresh = await tenancy.create_tenant_key(hub.engine, who.tenant_id or "")
    assert (await client.get(URL, headers=bearer(fresh))).status_code == 200
