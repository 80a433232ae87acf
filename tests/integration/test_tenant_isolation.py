"""Every route, called as tenant B with tenant A's ids: never a 2xx, never a side effect.

Each call carries a *valid* request: a JSON body from ``BODIES`` (or the request schema's
first example) and, for the webhook route, a well-formed delivery. The same request made by
the resource's owner (tenant A, the admin for ``/admin``, the provider's signature for a
callback) must then succeed, so a 422 or any other refusal of the request itself can never
pass for isolation. B must get 403/404 (401 on the webhook route, which trusts signatures,
not API keys), and no row of any table may change.

A streaming operation (``text/event-stream``, e.g. ``GET /v1/events``) has no ids in its
path and answers every tenant 200 with *its own* events, so it is held to the honest bar
instead: called as B with a bound (``max_seconds``), a subject of A and a resume position
that would replay A's notification, it must carry no event at all.

The test enumerates the app's operations (from its OpenAPI document, which lists every
route however it was mounted), so a route added later (by a pipeline) is covered the day it
lands: its path parameters must have an entry in ``IDS_OF_TENANT_A`` or the test fails.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from fastapi import FastAPI

from aigc_hub import tenancy
from aigc_hub.blobs import keys
from aigc_hub.blobs.local import LocalBlobStore
from aigc_hub.bootstrap import Hub
from aigc_hub.core import ids
from aigc_hub.interfaces.http.app import create_app
from aigc_hub.messaging.memory import MemoryBroker
from aigc_hub.pipelines.generation import exports, projects, services
from aigc_hub.pipelines.generation.models import assets as asset_rows
from aigc_hub.pipelines.generation.pipeline import pipeline as generation
from aigc_hub.pipelines.generation.state import STATE
from aigc_hub.pipelines.generation.timeline import TimelineV1
from aigc_hub.reliability import notifications, webhooks
from aigc_hub.reliability.dlq import DeadLetterFilter
from aigc_hub.reliability.notifications import Notification
from aigc_hub.reliability.replay_jobs import ReplayJobs
from aigc_hub.store import tables
from tests.integration.test_admin_api import seed
from tests.support import effects as fx
from tests.support.hubs import hub_for
from tests.support.provider import SECRET

#: Routes anyone may call (no tenant data behind them).
PUBLIC = {"/healthz", "/readyz", "/metrics"}
#: Capability routes: the signed token in the path is the grant (like a presigned URL, a
#: bearer capability minted for the owner), so who calls does not matter.
CAPABILITIES = {"/v1/playback/{token}/{path}"}
#: Reads of the caller's own collection: B gets 200 with its own (empty) data, never A's.
OWN_COLLECTIONS = {
    ("GET", "/v1/generation-tasks"),
    ("GET", "/v1/credits"),
    ("GET", "/v1/projects"),
}
#: A create charged to the caller: B (no credits) gets 402 from its own empty balance,
#: never a task paid with A's credits.
OWN_CREATES = {("POST", "/v1/generation-tasks")}
#: A create of the caller's own, free: B gets 201 and an asset of its own (B's rows of
#: ``OWN_TABLES`` are left out of the comparison), never anything of A's.
OWN_UPLOADS = {("POST", "/v1/assets/uploads"), ("POST", "/v1/projects")}
#: Tables whose rows of tenant B are B's own doing (its answers, its uploads, its projects).
OWN_TABLES = {"idempotency_keys", "assets", "projects", "project_revisions"}
#: The owner's control answers a state conflict here, not a 2xx: A's asset is past uploading,
#: so fresh part URLs are refused with 409 (B still gets 404: the asset is not B's).
OWNER_CONFLICTS = {("POST", "/v1/assets/{asset_id}/parts"): 409}


async def _dead_letter_of_a(hub: Hub) -> str:
    return str((await seed(hub))[0])


async def _job_of_a(hub: Hub) -> str:
    jobs = ReplayJobs(hub.engine, hub.dlq, hub.clock, rate_per_s=0)
    job = await jobs.start(DeadLetterFilter(topic="none"), max_items=1, actor="admin:a")
    await jobs.wait(job.id)
    await jobs.close()
    return job.id


async def _task_of_a(hub: Hub) -> str:
    tenant_a = next(t for t in await tenancy.list_tenants(hub.engine) if t.name == "tenant-a")
    await services.grant_credits(hub, tenant_id=tenant_a.id, amount=1000, grant_id="iso-a")
    body = services.CreateTask(model="local-v1", prompt="p", duration_s=1, resolution="160x90")
    task = await services.create_task(
        hub.state_of(STATE), tenant_id=tenant_a.id, body=body, idempotency_key="iso-a-1"
    )
    return str(task["task_id"])


async def _key_of_a(hub: Hub) -> str:
    """A second API key of tenant A (the admin's control call revokes it)."""
    tenant_a = next(t for t in await tenancy.list_tenants(hub.engine) if t.name == "tenant-a")
    who = await tenancy.authenticate(
        hub.engine, await tenancy.create_tenant_key(hub.engine, tenant_a.id)
    )
    assert who is not None
    return who.key_id


async def _asset_of_a(hub: Hub) -> str:
    """A READY upload of tenant A, its bytes in the store (a playback grant signs them)."""
    tenant_a = next(t for t in await tenancy.list_tenants(hub.engine) if t.name == "tenant-a")
    assert hub.blobs is not None
    asset_id = ids.new_id_str()
    key = keys.object_key(tenant_a.id, "asset", asset_id, "clip.mp4")
    stored = await hub.blobs.put(key, b"\x00\x00\x00\x18ftypisom", "video/mp4")
    now = hub.clock.now_ms()
    async with hub.transaction() as conn:
        await conn.execute(
            asset_rows.insert().values(
                id=asset_id, tenant_id=tenant_a.id, kind="upload", object_bucket="hub",
                object_key=key, content_type="video/mp4", size_bytes=stored.size,
                checksum_algo="sha256", checksum_value=stored.sha256, status="READY",
                width=320, height=240, duration_ms=2000, created_at=now, updated_at=now,
            )
        )  # fmt: skip
    return asset_id


def _one_clip(asset_id: str) -> dict[str, Any]:
    clip = {"id": "c1", "asset_id": asset_id, "at_ms": 0, "in_ms": 0, "out_ms": 1000}
    return {
        "output": {"width": 320, "height": 240, "frame_rate": 25, "duration_ms": 1000},
        "tracks": [{"id": "v", "clips": [clip]}],
    }


async def _project_of_a(hub: Hub) -> str:
    """A project of tenant A at revision 1 (a timeline of A's READY asset)."""
    tenant_a = next(t for t in await tenancy.list_tenants(hub.engine) if t.name == "tenant-a")
    body = projects.CreateProject(
        name="of a",
        timeline=TimelineV1.model_validate(_one_clip(await _asset_of_a(hub))),
    )
    made = await projects.create_project(hub.state_of(STATE), tenant_id=tenant_a.id, body=body)
    return made.project_id


async def _export_of_a(hub: Hub) -> str:
    """A queued export of A's project (the one ``_project_of_a`` made)."""
    tenant_a = next(t for t in await tenancy.list_tenants(hub.engine) if t.name == "tenant-a")
    gen = hub.state_of(STATE)
    (project,) = (
        await projects.list_projects(gen, tenant_id=tenant_a.id, limit=2, before=None)
    ).items
    made, _ = await exports.request_export(
        gen,
        tenant_id=tenant_a.id,
        project_id=project.project_id,
        body=exports.RequestExport(profile="draft"),
        idempotency_key="iso-a",
    )
    return made.export_id


async def _revision_number(hub: Hub) -> str:
    return "1"


async def _provider(hub: Hub) -> str:
    return "local"  # B is not a provider: no signature → 401, nothing archived


def _streams(operation: dict[str, object]) -> bool:
    ok = operation.get("responses", {}).get("200", {})  # type: ignore[attr-defined]
    return "text/event-stream" in ok.get("content", {})


async def _stream_params_of_a(hub: Hub, tenant_a: str) -> dict[str, object]:
    """Query parameters that would make a stream leak A's notification, if it could."""
    feed = hub.notification_feed
    await feed.start()

    def note(subject: str) -> Notification:
        return Notification(
            tenant_id=tenant_a,
            subject_type="generation_task",
            subject_id=subject,
            kind="status",
            status="RUNNING",
            occurred_at_ms=1,
        )

    before = feed.add(note("task-of-a-0"))
    feed.add(note("task-of-a"))
    return {"max_seconds": 0.5, "subject_id": "task-of-a", "last_event_id": before.id}


#: How to make a resource of tenant A for each path parameter name.
IDS_OF_TENANT_A: dict[str, Callable[[Hub], Awaitable[str]]] = {
    "dead_letter_id": _dead_letter_of_a,
    "job_id": _job_of_a,
    "task_id": _task_of_a,
    "key_id": _key_of_a,
    "provider": _provider,
    "asset_id": _asset_of_a,
    "project_id": _project_of_a,
    "export_id": _export_of_a,  # after project_id: an export of that project
    "number": _revision_number,
}


async def _dismiss_another_letter(hub: Hub, ids: dict[str, str]) -> dict[str, Any]:
    """Dismiss a pending letter other than the one the id routes use (they still need it)."""
    pending = [letter.id for letter in await hub.dlq.list()]
    other = next(i for i in pending if str(i) != ids["dead_letter_id"])
    return {"ids": [other], "reason": "isolation check"}


async def _replay_the_timeouts(hub: Hub, ids: dict[str, str]) -> dict[str, Any]:
    return {"error_class": "TimeoutError", "max": 1}  # matches one seeded letter


async def _revision_over_the_head(hub: Hub, ids: dict[str, str]) -> dict[str, Any]:
    """A's next revision: over revision 1, a timeline of A's asset."""
    return {"base_revision": 1, "timeline": _one_clip(ids["asset_id"])}


#: A valid JSON body per operation, where the request schema has no example to use.
BODIES: dict[tuple[str, str], Callable[[Hub, dict[str, str]], Awaitable[dict[str, Any]]]] = {
    ("POST", "/admin/dlq/replay"): _replay_the_timeouts,
    ("POST", "/admin/dlq/dismiss"): _dismiss_another_letter,
    ("POST", "/v1/projects/{project_id}/revisions"): _revision_over_the_head,
}

#: The webhook route takes a raw delivery (no JSON schema): a well-formed ``job.updated``.
WEBHOOK_BODY = json.dumps({"type": "job.updated", "data": {"id": "job-of-a", "status": "running"}})


async def _body(
    hub: Hub, doc: dict[str, Any], method: str, template: str, ids: dict[str, str]
) -> dict[str, Any] | None:
    """The valid JSON body of an operation (None when it takes none)."""
    request_body = doc["paths"][template][method.lower()].get("requestBody")
    if request_body is None:
        return None
    if (method, template) in BODIES:
        return await BODIES[method, template](hub, ids)
    schema = request_body["content"]["application/json"]["schema"]
    ref = schema.get("$ref", "")
    examples = doc["components"]["schemas"].get(ref.rsplit("/", 1)[-1], {}).get("examples")
    assert examples, f"{method} {template}: add a valid body to BODIES"
    return dict(examples[0])


@pytest.fixture
async def hub(db_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> AsyncIterator[Hub]:
    # The local provider's webhook secret, so a signed delivery is the callback's control.
    monkeypatch.setenv("AIGC_HUB_GEN_LOCAL_WEBHOOK_SECRETS", SECRET)
    pipelines = [fx.make_pipeline(), notifications.pipeline, generation]
    blobs = LocalBlobStore(tmp_path / "blobs", secret=b"test-blob-secret")
    async with hub_for(db_url, MemoryBroker(), pipelines, blobs=blobs) as started:
        yield started


async def _rows(hub: Hub, *, but_of: str) -> dict[str, list[tuple[str, ...]]]:
    """Every row of every table, as text: any insert, update or delete shows. Left out: the
    rows of tenant ``but_of`` in ``OWN_TABLES`` (its answers to, and uploads of, its own)."""
    async with hub.engine.connect() as conn:
        return {
            t.name: sorted(
                tuple(str(v) for v in row)
                for row in await conn.execute(
                    sa.select(t).where(t.c.tenant_id != but_of)
                    if t.name in OWN_TABLES
                    else sa.select(t)
                )
            )
            for t in tables.metadata.sorted_tables
        }


async def _job_finished(client: httpx.AsyncClient, location: str, admin: str) -> None:
    """Wait for a bulk job the control call started, so it changes nothing later."""
    async with asyncio.timeout(20):
        while True:
            job = (await client.get(location, headers={"Authorization": f"Bearer {admin}"})).json()
            if job["status"] in ("done", "failed"):
                return
            await asyncio.sleep(0.02)


def _owner_headers(template: str, key_a: str, admin: str, body: bytes | None) -> dict[str, str]:
    """How the resource's owner calls: the admin key, the provider's signature, or A's key."""
    if template.startswith("/admin/"):
        return {"Authorization": f"Bearer {admin}"}
    if template.startswith("/v1/callbacks/"):
        return webhooks.sign_headers(SECRET, "msg-of-a", int(time.time()), body or b"")
    return {"Authorization": f"Bearer {key_a}"}


async def test_tenant_b_never_gets_a_2xx_or_an_effect_with_tenant_a_ids(hub: Hub) -> None:
    app: FastAPI = create_app(hub)
    doc = app.openapi()
    tenant_a, key_a = await tenancy.create_tenant(hub.engine, "tenant-a")
    tenant_b, key_b = await tenancy.create_tenant(hub.engine, "tenant-b")
    admin = await tenancy.create_admin_key(hub.engine)
    assert key_a != key_b
    ids = {name: await make(hub) for name, make in IDS_OF_TENANT_A.items()}
    stream_params = await _stream_params_of_a(hub, tenant_a.id)

    calls = 0
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://hub.test") as client:
        for template, operations in doc["paths"].items():
            if template in PUBLIC | CAPABILITIES:
                continue
            params = re.findall(r"{(\w+)}", template)
            missing = [p for p in params if p not in ids]
            assert not missing, f"{template}: add a tenant-A id maker for {missing}"
            path = template.format(**{p: ids[p] for p in params})
            for method in sorted(m.upper() for m in operations):
                what = f"{method} {path}"
                streams = _streams(operations[method.lower()])
                body = await _body(hub, doc, method, template, ids)
                raw = WEBHOOK_BODY.encode() if template.startswith("/v1/callbacks/") else None

                request: dict[str, Any] = {
                    "method": method,
                    "url": path,
                    "params": stream_params if streams else None,
                    "json": body,
                    "content": raw,
                }
                # a webhook is JSON sent as raw bytes (the signature covers those bytes)
                raw_type = {"Content-Type": "application/json"} if raw is not None else {}
                before = await _rows(hub, but_of=tenant_b.id)
                b_headers = {
                    "Authorization": f"Bearer {key_b}",
                    "Idempotency-Key": f"b-{calls}",
                    **raw_type,
                }
                as_b = await client.request(**request, headers=b_headers)
                calls += 1
                assert as_b.status_code != 422, f"{what}: B's request was invalid: {as_b.text}"
                if (method, template) in OWN_COLLECTIONS:
                    assert as_b.status_code == 200, (what, as_b.text)
                    assert not any(v in as_b.text for v in ids.values() if len(v) > 8)
                elif (method, template) in OWN_CREATES:
                    assert as_b.status_code == 402, (what, as_b.text)
                elif (method, template) in OWN_UPLOADS:
                    assert as_b.status_code == 201, (what, as_b.text)
                    assert not any(v in as_b.text for v in ids.values() if len(v) > 8)
                elif streams:
                    assert as_b.status_code == 200, (what, as_b.text)
                    assert "event:" not in as_b.text, (what, as_b.text)
                elif raw is not None:
                    assert as_b.status_code == 401, (what, as_b.text)  # an API key is no signature
                else:
                    assert as_b.status_code in (403, 404), (what, as_b.text)
                assert await _rows(hub, but_of=tenant_b.id) == before, f"{what}: B changed a row"

                # The control: the owner's identical request is valid and accepted, so B's
                # refusal above is about who asked, not about the request.
                owner = _owner_headers(template, key_a, admin, raw)
                owner.update({"Idempotency-Key": f"owner-{calls}", **raw_type})
                as_owner = await client.request(**request, headers=owner)
                conflict = OWNER_CONFLICTS.get((method, template))
                if conflict is not None:
                    assert as_owner.status_code == conflict, (what, as_owner.text)
                else:
                    assert 200 <= as_owner.status_code < 300, (what, as_owner.text)
                if streams:
                    assert "event: notification" in as_owner.text, (what, as_owner.text)
                if as_owner.headers.get("location", "").startswith("/admin/jobs/"):
                    await _job_finished(client, as_owner.headers["location"], admin)
    assert calls >= 10  # every admin route and the event stream were tried
