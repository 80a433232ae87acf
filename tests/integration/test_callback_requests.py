"""The callback route refuses ambiguous or mislabelled deliveries with no state change: a
Standard Webhooks header sent twice, or a signed body not sent as JSON. Against the real app
on SQLite and PostgreSQL, with a task and its provider job set up in the database."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from aigc_hub.bootstrap import Hub
from aigc_hub.core import ids
from aigc_hub.interfaces.http import problems
from aigc_hub.interfaces.http.app import create_app
from aigc_hub.messaging.memory import MemoryBroker
from aigc_hub.pipelines.generation import services
from aigc_hub.pipelines.generation.models import callback_events, generation_tasks, provider_jobs
from aigc_hub.pipelines.generation.pipeline import pipeline as generation
from aigc_hub.pipelines.generation.settings import GenerationSettings
from aigc_hub.pipelines.generation.state import STATE, build
from aigc_hub.reliability import webhooks
from aigc_hub.store import tables
from tests.support.hubs import hub_for

SECRET = webhooks.generate_secret(32)  # 32 bytes: its base64 ends in "=" (padded)
URL = "/v1/callbacks/local"
BODY = b'{"type":"job.updated","data":{"id":"job_1","status":"running","progress":0.5}}'
JSON = "application/json"

Headers = list[tuple[str, str]]


@contextlib.asynccontextmanager
async def hub_with_job(db_url: str, secret: str) -> AsyncIterator[Hub]:
    """A hub verifying local webhooks with ``secret``, whose one task has job ``job_1``."""
    settings = GenerationSettings(local_webhook_secrets=secret)
    pipeline = generation.with_state(lambda hub, _settings: build(hub, settings))
    async with hub_for(db_url, MemoryBroker(), [pipeline]) as started:
        await services.grant_credits(started, tenant_id="t", amount=100, grant_id="g")
        body = services.CreateTask(model="local-v1", prompt="p", duration_s=1, resolution="160x90")
        task = await services.create_task(
            started.state_of(STATE), tenant_id="t", body=body, idempotency_key="k"
        )
        async with started.engine.begin() as conn:
            await conn.execute(
                provider_jobs.insert().values(
                    id=ids.new_id_str(),
                    task_id=task["task_id"],
                    attempt_id=ids.new_id_str(),
                    tenant_id="t",
                    provider="local",
                    provider_job_id="job_1",
                    normalized_status="ACCEPTED",
                    poll_count=0,
                    created_at=0,
                    updated_at=0,
                )
            )
        yield started


@pytest.fixture
async def hub(db_url: str) -> AsyncIterator[Hub]:
    async with hub_with_job(db_url, SECRET) as started:
        yield started


@contextlib.asynccontextmanager
async def client_of(hub: Hub) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=create_app(hub), raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://hub.test") as c:
        yield c


@pytest.fixture
async def client(hub: Hub) -> AsyncIterator[httpx.AsyncClient]:
    async with client_of(hub) as c:
        yield c


def signed(msg_id: str = "msg_1") -> Headers:
    return list(webhooks.sign_headers(SECRET, msg_id, int(time.time()), BODY).items())


async def state(hub: Hub) -> tuple[list[Any], ...]:
    """Every row the callback route could write or change."""
    async with hub.engine.connect() as conn:
        rows = [
            (await conn.execute(sa.select(t))).all()
            for t in (callback_events, generation_tasks, provider_jobs, tables.outbox)
        ]
    return tuple(rows)


def twice(headers: Headers, name: str, second: str | None = None) -> Headers:
    """``headers`` with the ``name`` header sent again (with ``second``, else the same value)."""
    value = dict(headers)[name]
    return [*headers, (name, second if second is not None else value)]


REPEATED: dict[str, Headers] = {
    "two different ids": twice(signed(), "webhook-id", "msg_2"),
    "the same id twice": twice(signed(), "webhook-id"),
    "two timestamps": twice(signed(), "webhook-timestamp", "1"),
    "the same signature twice": twice(signed(), "webhook-signature"),
}


@pytest.mark.parametrize("headers", REPEATED.values(), ids=REPEATED.keys())
async def test_a_webhook_header_sent_twice_is_refused_and_changes_nothing(
    hub: Hub, client: httpx.AsyncClient, headers: Headers
) -> None:
    before = await state(hub)
    response = await client.post(URL, content=BODY, headers=[("content-type", JSON), *headers])
    assert response.status_code == 401, response.text
    problem = response.json()
    assert problem["type"] == problems.type_uri("bad-webhook")
    assert "malformed_header" in problem["detail"]
    assert await state(hub) == before


@pytest.mark.parametrize(
    "content_type",
    ["text/plain", "application/x-www-form-urlencoded", "application/json; charset=latin-1", None],
)
async def test_a_signed_body_not_sent_as_json_is_a_415_and_changes_nothing(
    hub: Hub, client: httpx.AsyncClient, content_type: str | None
) -> None:
    before = await state(hub)
    kind = [] if content_type is None else [("content-type", content_type)]
    response = await client.post(URL, content=BODY, headers=[*kind, *signed()])
    assert response.status_code == 415, response.text
    assert response.json()["type"] == problems.type_uri("unsupported-media-type")
    assert await state(hub) == before


@pytest.mark.parametrize("content_type", [JSON, "Application/JSON; charset=UTF-8"])
async def test_a_genuine_json_delivery_is_accepted_once(
    hub: Hub, client: httpx.AsyncClient, content_type: str
) -> None:
    headers = [("content-type", content_type), *signed()]
    response = await client.post(URL, content=BODY, headers=headers)
    assert (response.status_code, response.json()) == (202, {"status": "accepted"})
    again = await client.post(URL, content=BODY, headers=headers)
    assert (again.status_code, again.json()) == (202, {"status": "duplicate"})
    async with hub.engine.connect() as conn:
        archived = (await conn.execute(sa.select(callback_events.c.status))).scalars().all()
    assert archived == ["applied"]


PADDED = SECRET.removeprefix("whsec_")
SECRET_FORMS = {
    "prefix, padded": SECRET,
    "prefix, unpadded": SECRET.rstrip("="),
    "bare, padded": PADDED,
    "bare, unpadded": PADDED.rstrip("="),
}


@pytest.mark.parametrize("configured", SECRET_FORMS.values(), ids=SECRET_FORMS.keys())
async def test_each_secret_form_the_reference_accepts_verifies_a_real_delivery(
    sqlite_url: str, configured: str
) -> None:
    async with hub_with_job(sqlite_url, configured) as hub, client_of(hub) as client:
        headers = [("content-type", JSON), *signed()]  # signed with the whsec_ padded form
        response = await client.post(URL, content=BODY, headers=headers)
        assert (response.status_code, response.json()) == (202, {"status": "accepted"})
