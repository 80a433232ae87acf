"""Schemathesis against the app's own OpenAPI: no 5xx, no response the schema does not describe.

Every operation of ``/v1/openapi.json`` gets a small, derandomized batch of generated requests,
sent with an admin key so the admin routes are exercised past authentication. The hub, the app
and the HTTP client all live on one event loop (an anyio blocking portal this test owns), so the
async engine is never shared between loops; schemathesis only generates cases and validates.

schemathesis is a hard requirement: a missing package fails collection, it never skips.
"""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from anyio.from_thread import start_blocking_portal
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from aigc_hub import tenancy
from aigc_hub.blobs.local import LocalBlobStore
from aigc_hub.interfaces.http.app import API_PREFIX, create_app
from aigc_hub.messaging.memory import MemoryBroker
from aigc_hub.pipelines.generation import services
from aigc_hub.pipelines.generation.pipeline import pipeline as generation
from aigc_hub.reliability import notifications
from aigc_hub.reliability.replay_jobs import ReplayJobs
from tests.integration.test_admin_api import seed
from tests.support import effects as fx
from tests.support.hubs import hub_for

BASE_URL = "http://hub.test"
MAX_EXAMPLES = 15
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]
FUZZ_SETTINGS = settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    derandomize=True,  # the same cases on every CI run
    database=None,  # no .hypothesis directory in the work tree
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


class Served:
    """A started hub, its app and an httpx client, entered on the portal's event loop."""

    def __init__(self, db_url: str) -> None:
        self.db_url = db_url
        self.admin_key = ""
        self.tenant_key = ""
        self.client: httpx.AsyncClient

    async def __aenter__(self) -> Served:
        pipelines = [fx.make_pipeline(), notifications.pipeline, generation]
        # every deployed hub has a blob store (local files by default): so does this one
        self._blob_dir = tempfile.TemporaryDirectory(prefix="fuzz-blobs-")
        blobs = LocalBlobStore(Path(self._blob_dir.name), secret=b"fuzz-blob-secret-0123")
        self._hub_cm = hub_for(self.db_url, MemoryBroker(), pipelines, blobs=blobs)
        hub = await self._hub_cm.__aenter__()
        # Streams end quickly here: the fuzzer reads whole responses.
        hub.notification_feed.settings = dataclasses.replace(
            hub.notification_feed.settings, max_stream_s=0.2, heartbeat_s=0.05
        )
        app = create_app(hub)
        self._jobs = ReplayJobs(hub.engine, hub.dlq, hub.clock, rate_per_s=200)
        app.state.replay_jobs = self._jobs
        await seed(hub)  # list and detail responses carry real rows
        self.admin_key = await tenancy.create_admin_key(hub.engine)
        tenant, self.tenant_key = await tenancy.create_tenant(hub.engine, "fuzz")
        await services.grant_credits(hub, tenant_id=tenant.id, amount=10**9, grant_id="fuzz")
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        self.client = httpx.AsyncClient(transport=transport, base_url=BASE_URL)
        self.app = app
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.client.aclose()
        await self._jobs.close()
        await self._hub_cm.__aexit__(None, None, None)
        self._blob_dir.cleanup()

    async def openapi(self) -> dict[str, Any]:
        response = await self.client.get(f"{API_PREFIX}/openapi.json")
        response.raise_for_status()
        schema: dict[str, Any] = response.json()
        return schema

    async def send(self, kwargs: dict[str, Any]) -> httpx.Response:
        """Send schemathesis' requests-style kwargs with httpx."""
        kwargs = dict(kwargs)
        request: dict[str, Any] = {
            "method": kwargs.pop("method"),
            "url": kwargs.pop("url"),
            "headers": kwargs.pop("headers", None),
            "params": kwargs.pop("params", None),
        }
        # No operation declares a cookie parameter; httpx deprecates per-request cookies.
        assert not kwargs.pop("cookies", None), "unexpected cookies"
        if "json" in kwargs:
            request["json"] = kwargs.pop("json")
        if "data" in kwargs:
            data = kwargs.pop("data")
            request["content" if isinstance(data, bytes | str) else "data"] = data
        if "files" in kwargs:
            request["files"] = kwargs.pop("files")
        assert not kwargs, f"unexpected transport arguments: {sorted(kwargs)}"
        return await self.client.request(**request)


@pytest.fixture
def served(sqlite_url: str) -> Any:
    with (
        start_blocking_portal() as portal,
        portal.wrap_async_context_manager(Served(sqlite_url)) as s,
    ):
        yield portal, s


def _checker(portal: Any, s: Any, operation: Any, headers: dict[str, str]) -> Any:
    """A hypothesis test of ``operation`` sending ``headers``."""

    @FUZZ_SETTINGS
    @given(case=operation.as_strategy())
    def check(case: Any) -> None:
        kwargs = case.as_transport_kwargs(base_url=BASE_URL, headers=headers)
        response = portal.call(s.send, kwargs)
        case.validate_response(response, checks=CHECKS, headers=headers, transport_kwargs=kwargs)

    return check


def test_every_operation_conforms_to_the_openapi_schema(served: Any) -> None:
    portal, s = served
    raw = portal.call(s.openapi)
    schema = schemathesis.openapi.from_dict(raw)
    admin = {"Authorization": f"Bearer {s.admin_key}"}
    tenant = {"Authorization": f"Bearer {s.tenant_key}"}

    operations = []
    for result in schema.get_all_operations():
        operations.append(result.ok())  # an unresolvable operation is itself a failure
    assert len(operations) >= 10, [op.label for op in operations]

    failures: dict[str, str] = {}
    for operation in operations:
        # Admin routes with the admin key, business routes with a tenant key.
        headers = admin if operation.path.startswith("/admin") else tenant

        check = _checker(portal, s, operation, headers)
        try:
            check()
        except (Exception, BaseExceptionGroup) as exc:  # schemathesis raises FailureGroup
            failures[operation.label] = f"{type(exc).__name__}: {exc}"

    assert not failures, "\n\n".join(f"== {label}\n{text}" for label, text in failures.items())
