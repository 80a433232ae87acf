"""The creating route's Idempotency-Key in folded mode, on SQLite and PostgreSQL: one write
transaction per create, byte-identical replays, reuse, 402, expiry, concurrent duplicates
and a failure after the answer was written inside the transaction."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from sqlalchemy import event

from aigc_hub import tenancy
from aigc_hub.core.failpoints import Failpoints
from aigc_hub.interfaces.http import idempotency_rows
from aigc_hub.interfaces.http.app import create_app
from aigc_hub.interfaces.http.limits import Limits
from aigc_hub.pipelines.generation import services
from aigc_hub.pipelines.generation.models import credit_ledger, generation_tasks
from aigc_hub.store import tables
from aigc_hub.store.engine import reader
from tests.support.fake_generation import FakeGeneration, fake_generation

URL = "/v1/generation-tasks"
DAY_S = 24 * 3600
BODY = {
    "model": "fake-v1",
    "prompt": "a paper boat, 一只纸船",
    "duration_s": 2,
    "resolution": "320x180",
}


@dataclass
class Api:
    """The app of a fake-provider hub, a tenant key with credits, and counters on the rows."""

    g: FakeGeneration
    http: httpx.AsyncClient
    key: str
    tenant_id: str

    async def create(self, idem: str, body: dict[str, Any] | None = None) -> httpx.Response:
        return await self.http.post(
            URL,
            json=BODY if body is None else body,
            headers={"Authorization": f"Bearer {self.key}", "Idempotency-Key": idem},
        )

    async def count(self, query: sa.Select[Any]) -> int:
        async with reader(self.g.hub.engine) as conn:
            return int((await conn.execute(query)).scalar_one())

    async def tasks(self) -> int:
        return await self.count(sa.select(sa.func.count()).select_from(generation_tasks))

    async def reservations(self) -> int:
        reserves = sa.select(sa.func.count()).where(
            credit_ledger.c.type == "RESERVE", credit_ledger.c.tenant_id == self.tenant_id
        )
        return await self.count(reserves)

    async def key_rows(self) -> list[Any]:
        async with reader(self.g.hub.engine) as conn:
            return list((await conn.execute(sa.select(tables.idempotency_keys))).all())


@contextlib.asynccontextmanager
async def _api(g: FakeGeneration, credits: int) -> AsyncIterator[Api]:
    tenant, key = await tenancy.create_tenant(g.hub.engine, "acme")
    if credits:
        await services.grant_credits(
            g.hub, tenant_id=tenant.id, amount=credits, grant_id=f"start-{tenant.id}"
        )
    app = create_app(g.hub, limits=Limits(rate_per_s=1000, burst=1000))
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://hub.test") as http:
        yield Api(g, http, key, tenant.id)


@pytest.fixture
async def api(db_url: str, tmp_path: Path) -> AsyncIterator[Api]:
    async with fake_generation(db_url, tmp_path) as g, _api(g, credits=1_000) as made:
        yield made


@dataclass
class Transactions:
    """What the engine did: each transaction's statements, in order, and how it ended."""

    statements: list[list[str]] = field(default_factory=list)
    ends: list[str] = field(default_factory=list)


@pytest.fixture
def transactions(api: Api) -> Iterator[Transactions]:
    """Records BEGIN, each statement and COMMIT/ROLLBACK on the hub's (writer) engine."""
    seen = Transactions()
    engine = api.g.hub.engine.sync_engine

    def on_begin(_conn: sa.Connection) -> None:
        seen.statements.append([])

    def on_statement(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if seen.statements:
            seen.statements[-1].append(statement.split("(")[0].strip())

    def on_commit(_conn: sa.Connection) -> None:
        seen.ends.append("commit")

    listeners = [("begin", on_begin), ("before_cursor_execute", on_statement)]
    listeners.append(("commit", on_commit))
    for name, listener in listeners:
        event.listen(engine, name, listener)
    try:
        yield seen
    finally:
        for name, listener in listeners:
            event.remove(engine, name, listener)


async def test_a_create_is_one_write_transaction(api: Api, transactions: Transactions) -> None:
    warm = await api.create("warm-up")  # first-use work (statement caches) out of the count
    assert warm.status_code == 201, warm.text
    transactions.statements.clear()
    transactions.ends.clear()

    created = await api.create("counted")

    assert created.status_code == 201, created.text
    assert transactions.ends == ["commit"]
    [written] = [s for s in transactions.statements if any("INSERT" in x for x in s)]
    inserts = [s for s in written if s.startswith("INSERT INTO")]
    assert "INSERT INTO generation_tasks" in inserts
    assert "INSERT INTO idempotency_keys" in inserts  # the answer, in the same transaction
    [row] = [r for r in await api.key_rows() if r.key == "counted"]
    assert row.status == "done" and bytes(row.response_body) == created.content


async def test_a_replay_after_the_folded_create_is_byte_identical(api: Api) -> None:
    first = await api.create("k-1")
    assert first.status_code == 201, first.text
    assert list(first.json()) == list(services.TaskSnapshot.model_fields)
    assert services.TaskSnapshot.model_validate_json(first.content).status == "QUEUED"
    # The same JSON with other key order and spacing is the same request.
    again = await api.http.post(
        URL,
        content=json.dumps(dict(reversed(BODY.items())), indent=2),
        headers={
            "Authorization": f"Bearer {api.key}",
            "Idempotency-Key": '"k-1"',
            "Content-Type": "application/json",
        },
    )
    assert again.status_code == 201 and again.content == first.content
    assert again.headers["location"] == first.headers["location"]
    assert again.headers["location"] == f"{URL}/{first.json()['task_id']}"
    assert again.headers["content-type"] == first.headers["content-type"] == "application/json"
    assert again.headers["idempotent-replayed"] == "true"
    assert "idempotent-replayed" not in first.headers
    assert await api.tasks() == 1 and await api.reservations() == 1


async def test_another_body_with_the_same_key_is_422_and_creates_nothing(api: Api) -> None:
    first = await api.create("k-1")
    assert first.status_code == 201, first.text
    other = await api.create("k-1", BODY | {"prompt": "something else"})
    assert other.status_code == 422, other.text
    assert other.json()["type"].endswith("/idempotency-key-reused")
    assert await api.tasks() == 1 and await api.reservations() == 1


async def test_a_body_that_fails_validation_stores_nothing(api: Api) -> None:
    invalid = await api.create("k-1", BODY | {"duration_s": 0})
    assert invalid.status_code == 422
    assert invalid.json()["type"].endswith("/validation-error")
    assert await api.key_rows() == []
    fixed = await api.create("k-1")
    assert fixed.status_code == 201 and "idempotent-replayed" not in fixed.headers


async def test_a_402_answer_is_stored_and_replayed(db_url: str, tmp_path: Path) -> None:
    async with fake_generation(db_url, tmp_path) as g, _api(g, credits=0) as poor:
        first = await poor.create("k-1")
        assert first.status_code == 402, first.text
        assert first.json()["type"].endswith("/insufficient-credits")
        # Credits arriving later do not change the answer of that key (the draft).
        await services.grant_credits(g.hub, tenant_id=poor.tenant_id, amount=1_000, grant_id="late")
        again = await poor.create("k-1")
        assert again.status_code == 402 and again.content == first.content
        assert again.headers["idempotent-replayed"] == "true"
        assert await poor.tasks() == 0 and await poor.reservations() == 0
        [row] = await poor.key_rows()
        assert row.status == "done" and row.response_status == 402
        assert (await poor.create("k-2")).status_code == 201


async def test_an_expired_key_is_taken_again_by_a_new_create(api: Api) -> None:
    who = await tenancy.authenticate(api.g.hub.engine, api.key)
    assert who is not None and who.tenant_id is not None
    now = api.g.clock.now_ms()
    async with api.g.hub.engine.begin() as conn:
        # A key another request used a day ago, not yet deleted by the scanner.
        await conn.execute(
            tables.idempotency_keys.insert().values(
                tenant_id=who.tenant_id,
                key="old",
                fingerprint="0" * 64,
                status="done",
                response_status=201,
                response_headers={},
                response_body=b"{}",
                created_at=now - DAY_S * 1000 - 1,
                expires_at=now - 1,
            )
        )
    created = await api.create("old")
    assert created.status_code == 201 and "idempotent-replayed" not in created.headers
    [row] = await api.key_rows()
    assert row.created_at == now and bytes(row.response_body) == created.content
    assert await api.tasks() == 1 and await api.reservations() == 1


async def test_a_retry_after_its_key_expired_answers_the_same_task(api: Api) -> None:
    first = await api.create("k-1")
    await api.g.clock.advance(DAY_S + 1)
    # The key is free again, but the task table still knows the key: no second task.
    again = await api.create("k-1")
    assert again.status_code == 201 and "idempotent-replayed" not in again.headers
    assert again.json()["task_id"] == first.json()["task_id"]
    assert await api.tasks() == 1 and await api.reservations() == 1
    [row] = await api.key_rows()
    assert row.created_at == api.g.clock.now_ms() and bytes(row.response_body) == again.content


async def test_a_failure_after_the_hook_leaves_neither_task_nor_key(api: Api) -> None:
    api.g.hub.failpoints = Failpoints()

    def fail() -> None:
        raise RuntimeError("the transaction fails after the answer was written")

    api.g.hub.failpoints.arm(services.AFTER_HOOK, fail)
    failed = await api.create("k-1")
    assert failed.status_code == 500
    assert api.g.hub.failpoints.hits[services.AFTER_HOOK] == 1
    assert await api.tasks() == 0 and await api.reservations() == 0
    assert await api.key_rows() == []
    api.g.hub.failpoints.disarm(services.AFTER_HOOK)
    retry = await api.create("k-1")
    assert retry.status_code == 201 and "idempotent-replayed" not in retry.headers
    assert await api.tasks() == 1 and await api.reservations() == 1


@pytest.mark.postgres
async def test_two_concurrent_identical_creates_make_one_task_on_postgres(
    pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with fake_generation(pg_url, tmp_path) as g, _api(g, credits=1_000) as api:
        # Hold the first create's transaction open after its writes until the second
        # waits on the unique index, so both really overlap.
        reached, release = asyncio.Event(), asyncio.Event()
        real_insert = idempotency_rows.insert_answer
        calls = 0

        async def insert_held(*args: Any) -> None:
            nonlocal calls
            calls += 1
            if calls == 1:
                reached.set()
                await release.wait()
            await real_insert(*args)

        monkeypatch.setattr(idempotency_rows, "insert_answer", insert_held)
        first = asyncio.create_task(api.create("same"))
        async with asyncio.timeout(10):
            await reached.wait()  # the first create is in its hook, its rows written
        second = asyncio.create_task(api.create("same"))
        await _until_a_backend_waits_on_a_lock(g)
        release.set()
        answers = await asyncio.gather(first, second)

    assert [a.status_code for a in answers] == [201, 201], [a.text for a in answers]
    assert answers[0].content == answers[1].content
    assert [a.headers.get("idempotent-replayed") for a in answers] == [None, "true"]
    # The second's task insert conflicted, so it never reached the hook; the route class
    # tried to store its answer alone, met the first's key and replayed it.
    assert calls == 2


async def _until_a_backend_waits_on_a_lock(g: FakeGeneration) -> None:
    waiting = sa.text(
        "SELECT count(*) FROM pg_stat_activity"
        " WHERE datname = current_database() AND wait_event_type = 'Lock'"
    )
    async with asyncio.timeout(10):
        while True:
            async with reader(g.hub.engine) as conn:
                if (await conn.execute(waiting)).scalar_one():
                    return
            await asyncio.sleep(0.01)
