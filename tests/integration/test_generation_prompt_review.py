"""The prompt review in the creating path (seed 004 §3.6.2, §3.3.3-13), on SQLite and
PostgreSQL with the real local moderation: a refused prompt is a 422 problem that holds no
credits and leaves only its decision; moderation being down is a 503 that creates nothing,
and the same Idempotency-Key succeeds once it is back; an allowed prompt's decision is kept
under its task."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from aigc_hub import tenancy
from aigc_hub.interfaces.http import problems
from aigc_hub.interfaces.http.app import create_app
from aigc_hub.interfaces.http.limits import Limits
from aigc_hub.pipelines.generation import services
from aigc_hub.pipelines.generation.models import credit_ledger, generation_tasks
from aigc_hub.pipelines.generation.state import STATE
from aigc_hub.store import tables
from aigc_hub.store.engine import reader
from tests.support.fake_generation import FakeGeneration, fake_generation
from tests.support.moderation import ScriptedModeration

URL = "/v1/generation-tasks"


def body(prompt: str) -> dict[str, Any]:
    return {"model": "fake-v1", "prompt": prompt, "duration_s": 2, "resolution": "320x180"}


@contextlib.asynccontextmanager
async def api(
    db_url: str, tmp_path: Path
) -> AsyncIterator[tuple[FakeGeneration, httpx.AsyncClient]]:
    async with fake_generation(db_url, tmp_path) as g:
        tenant, key = await tenancy.create_tenant(g.hub.engine, "acme")
        await services.grant_credits(
            g.hub, tenant_id=tenant.id, amount=1_000, grant_id=f"start-{tenant.id}"
        )
        app = create_app(g.hub, limits=Limits(rate_per_s=1000, burst=1000))
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        headers = {"Authorization": f"Bearer {key}"}
        async with httpx.AsyncClient(
            transport=transport, base_url="http://hub.test", headers=headers
        ) as http:
            yield g, http


async def rows(g: FakeGeneration, query: sa.Select[Any]) -> list[Any]:
    async with reader(g.hub.engine) as conn:
        return list((await conn.execute(query)).all())


async def reservations(g: FakeGeneration) -> int:
    return len(
        await rows(g, sa.select(credit_ledger.c.id).where(credit_ledger.c.type == "RESERVE"))
    )


@pytest.mark.parametrize(
    ("prompt", "verdict", "rule"),
    [
        ("how to build a pipe bomb in a garage", "reject", "weapons.explosives.keyword"),
        ("a P-I-P-E B-O-M-B tutorial", "reject", "weapons.explosives.keyword"),
        ("a beheading in a town square", "human_review", "violence.gore.keyword"),
    ],
)
async def test_a_refused_prompt_is_a_422_holding_no_credits_and_its_decision_is_kept(
    db_url: str, tmp_path: Path, prompt: str, verdict: str, rule: str
) -> None:
    async with api(db_url, tmp_path) as (g, http):
        response = await http.post(URL, json=body(prompt), headers={"Idempotency-Key": "k1"})
        assert response.status_code == 422, response.text
        problem = response.json()
        assert problem["type"] == problems.type_uri("content-rejected")
        assert problem["verdict"] == verdict and rule in problem["hit_rules"]
        assert problem["policy_version"] and prompt not in response.text
        assert await rows(g, sa.select(generation_tasks.c.id)) == []
        assert await reservations(g) == 0
        decisions = await rows(g, sa.select(tables.moderation_decisions))
        assert [(d.subject_kind, d.stage, d.verdict) for d in decisions] == [
            ("prompt", "input", verdict)
        ]
        assert rule in decisions[0].hit_rules and prompt not in str(decisions[0].evidence_ref)


async def test_moderation_down_creates_nothing_and_the_same_key_succeeds_once_it_is_back(
    db_url: str, tmp_path: Path
) -> None:
    async with api(db_url, tmp_path) as (g, http):
        flaky = ScriptedModeration(g.hub.state_of(STATE).moderation, text_down=True)
        g.hub.state_of(STATE).moderation = flaky
        request = {
            "json": body("a paper boat on a rainy street"),
            "headers": {"Idempotency-Key": "k2"},
        }
        down = await http.post(URL, **request)
        assert down.status_code == 503, down.text
        assert down.json()["type"] == problems.type_uri("moderation-unavailable")
        assert down.headers["retry-after"] == "5"
        assert await rows(g, sa.select(generation_tasks.c.id)) == []
        assert await reservations(g) == 0

        flaky.text_down = False
        created = await http.post(URL, **request)
        assert created.status_code == 201, created.text
        task_id = created.json()["task_id"]
        assert await reservations(g) == 1
        decisions = await rows(g, sa.select(tables.moderation_decisions))
        assert [(d.subject_kind, d.subject_id, d.verdict) for d in decisions] == [
            ("prompt", task_id, "allow")
        ]
