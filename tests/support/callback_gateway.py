"""Signed webhooks of the fake provider posted to the hub's real callback route."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import AsyncIterator
from pathlib import Path

import httpx

from aigc_hub.interfaces.http.app import create_app
from aigc_hub.reliability import webhooks
from aigc_hub.testing import FakeJob, FakeProvider, JobScript
from tests.support.fake_generation import WEBHOOK_SECRET, FakeGeneration, fake_generation

_ids = itertools.count(1)

#: Webhooks are JSON; the gateway refuses other content types (415).
JSON = {"content-type": "application/json"}


class Gateway:
    """Posts signed webhooks of the fake provider to the hub's callback route."""

    def __init__(self, g: FakeGeneration, http: httpx.AsyncClient) -> None:
        self.g, self.http = g, http

    async def send(self, job: FakeJob, *, body: bytes | None = None, msg_id: str = "") -> str:
        """Post the job's current state (or ``body``); the gateway's answer."""
        body = body if body is not None else self.g.provider.callback_body(job)
        msg_id = msg_id or f"msg_{next(_ids)}"
        ts = self.g.clock.now_ms() // 1000
        headers = {**webhooks.sign_headers(WEBHOOK_SECRET, msg_id, ts, body), **JSON}
        response = await self.http.post(
            f"/v1/callbacks/{self.g.provider.name}", content=body, headers=headers
        )
        assert response.status_code == 202, response.text
        status: str = response.json()["status"]
        return status


@contextlib.asynccontextmanager
async def gateway_for(db_url: str, tmp_path: Path) -> AsyncIterator[Gateway]:
    """A fake generation stack and its app, the fake standing in for the local provider
    (the gateway holds webhook secrets for the providers that sign: local, replicate)."""
    provider = FakeProvider("local", default=JobScript(steps=[]))
    async with fake_generation(db_url, tmp_path, provider) as g:
        transport = httpx.ASGITransport(app=create_app(g.hub))
        async with httpx.AsyncClient(transport=transport, base_url="http://hub") as http:
            yield Gateway(g, http)
