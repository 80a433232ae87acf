"""The web console in headless Chromium against a real server (uvicorn on loopback).

Must show: a dead letter appears in the list, is replayed from the page, leaves the list,
and its effect happens exactly once; the dashboard's lag equals ``GET /admin/lag``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from playwright.sync_api import expect

from aigc_hub import tenancy
from aigc_hub.bootstrap import Hub
from aigc_hub.core.envelope import Envelope
from aigc_hub.messaging import headers as h
from aigc_hub.pipeline import Pipeline, TimelineEntry
from aigc_hub.reliability.dlq import DeadLetterDraft, DeadLetterFilter
from aigc_hub.store import tables
from tests.browser.harness import ConsoleServer, log_in
from tests.support import effects as fx

pytestmark = pytest.mark.browser

PROMPT = "生成一段视频：一只熊猫在竹林里弹吉他"


def eventually(check: Callable[[], bool], timeout: float = 30.0) -> None:
    """Poll ``check`` (a query on the server) until it holds."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not reached in time")
        time.sleep(0.05)


async def publish(hub: Hub, *envelopes: Envelope) -> None:
    async with hub.transaction() as conn:
        await hub.outbox.add(conn, list(envelopes))


async def effects_of(hub: Hub) -> list[tuple[int, str, str, int]]:
    return await fx.effect_rows(hub.engine)


async def pending_ids(hub: Hub) -> list[int]:
    return [d.id for d in await hub.dlq.list(DeadLetterFilter())]


async def add_dead_letter(hub: Hub, key: str, n: int, note: str = "") -> int:
    env = fx.request(key, n, note)
    draft = DeadLetterDraft(
        topic=fx.TOPIC,
        partition=0,
        offset=n,
        key=key,
        consumer=fx.GROUP,
        pipeline="effects",
        value=env.to_bytes(),
        headers={h.EVENT_ID: env.event_id, h.EVENT_TYPE: env.event_type},
        error_class="PermanentError",
        error_message=f"content rejected: {note or n}",
        attempts=1,
        first_failure_at=hub.clock.now_ms(),
        last_failure_at=hub.clock.now_ms(),
        envelope=env,
        history=[{"attempt": 1, "error": "PermanentError"}],
    )
    async with hub.transaction() as conn:
        return await hub.dlq.add(conn, draft)


def fails_once(key: str) -> fx.Behaviour:
    """A handler behaviour that rejects ``key`` permanently on its first delivery only."""
    b = fx.Behaviour(permanent={key})

    def on_call(called: str, n: int) -> None:
        if called == key and sum(1 for k, _ in b.calls if k == key) > 1:
            b.permanent.discard(key)

    b.on_call = on_call
    return b


def test_dead_letter_replayed_from_the_page_takes_effect_once(page: Any, db_url: str) -> None:
    behaviour = fails_once("task-1")
    with ConsoleServer(db_url, [fx.make_pipeline(behaviour)]) as server:
        original = fx.request("task-1", 1, PROMPT)
        server.call(lambda hub: publish(hub, original))
        eventually(lambda: len(server.call(pending_ids)) == 1)
        [letter_id] = server.call(pending_ids)
        assert server.call(effects_of) == []

        log_in(page, server)
        page.goto(f"{server.url}/console/dlq")
        row = page.get_by_test_id(f"dlq-row-{letter_id}")
        expect(row).to_be_visible()
        expect(row).to_contain_text("PermanentError")
        expect(row).to_contain_text("task-1")

        page.get_by_test_id(f"replay-{letter_id}").click()
        expect(page.get_by_role("status")).to_contain_text(f"Dead letter {letter_id} replayed")
        expect(page.get_by_test_id(f"dlq-row-{letter_id}")).to_have_count(0)
        expect(page.get_by_test_id("dlq-empty")).to_be_visible()

        eventually(lambda: len(server.call(effects_of)) >= 1)
        eventually(lambda: server.call(settled))
        rows = server.call(effects_of)
        assert [(event_id, key, n) for _, event_id, key, n in rows] == [
            (original.event_id, "task-1", 1)
        ]
        assert [c for c in behaviour.calls if c[0] == "task-1"] == [("task-1", 1)] * 2
        replayed = server.call(lambda hub: hub.dlq.get(letter_id))
        assert replayed.status == "replayed"
        actions = server.call(replay_audit)
        who = server.call(lambda hub: tenancy.authenticate(hub.engine, server.admin_key))
        assert who is not None
        assert actions == [(str(letter_id), "ok", f"admin:{who.key_id}")]


async def settled(hub: Hub) -> bool:
    """Nothing left to publish and the effect group has consumed everything."""
    o = tables.outbox
    async with hub.engine.connect() as conn:
        backlog = (
            await conn.execute(
                sa.select(sa.func.count()).select_from(o).where(o.c.published_at.is_(None))
            )
        ).scalar_one()
    lag = await hub.broker.lag(fx.GROUP, [fx.TOPIC])
    return backlog == 0 and sum(r.lag for r in lag) == 0


async def replay_audit(hub: Hub) -> list[tuple[str, str, str]]:
    a = tables.audit_log
    async with hub.engine.connect() as conn:
        rows = await conn.execute(
            sa.select(a.c.target, a.c.result, a.c.actor).where(a.c.action == "dlq.replay")
        )
        return [tuple(r) for r in rows]  # type: ignore[misc]


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_dashboard_lag_matches_the_admin_api(page: Any, db_url: str) -> None:
    # No consumer runs: the relay publishes, so the group's lag is exactly what was sent.
    with ConsoleServer(db_url, [fx.make_pipeline()], groups=[]) as server:
        server.call(lambda hub: publish(hub, *(fx.request(f"k{i}", i) for i in range(7))))
        auth = {"Authorization": f"Bearer {server.admin_key}"}

        def admin_lag() -> int:
            body = httpx.get(f"{server.url}/admin/lag", headers=auth).json()
            [item] = [x for x in body["items"] if (x["group"], x["topic"]) == (fx.GROUP, fx.TOPIC)]
            return int(item["lag"])

        eventually(lambda: admin_lag() == 7)
        log_in(page, server)
        page.goto(f"{server.url}/console/dashboard")
        cell = page.get_by_test_id(f"lag-{fx.GROUP}-{fx.TOPIC}")
        expect(cell).to_have_text(str(admin_lag()))
        expect(page.get_by_test_id("lag-total")).to_have_text("7")
        # After the page has polled twice (a rate exists), it still agrees with the API.
        expect(page.get_by_test_id("consumed-rate")).not_to_have_text("—", timeout=10_000)
        expect(cell).to_have_text(str(admin_lag()))
        expect(page.get_by_test_id("outbox-backlog")).to_have_text("0")


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_login_refuses_a_wrong_key(page: Any, db_url: str) -> None:
    # A tenant's key opens a tenant session (its gallery only): tests/browser/test_gallery.py.
    with ConsoleServer(db_url, [fx.make_pipeline()], groups=[]) as server:
        page.goto(f"{server.url}/console/dlq")
        assert "/console/login" in page.url
        log_in(page, server, key="ak_not-a-real-key")
        expect(page.get_by_test_id("login-error")).to_contain_text("not a live API key")
        assert not page.context.cookies()
        page.goto(f"{server.url}/console/dashboard")
        assert "/console/login" in page.url
        response = page.request.get(f"{server.url}/console/stats.json")
        assert response.status == 401

        log_in(page, server)
        assert page.url.endswith("/console/dlq")
        [cookie] = page.context.cookies()
        assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
        assert cookie["path"] == "/console"


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_posts_without_the_csrf_token_are_refused(page: Any, db_url: str) -> None:
    with ConsoleServer(db_url, [fx.make_pipeline()], groups=[]) as server:
        letter_id = server.call(lambda hub: add_dead_letter(hub, "k1", 1))
        log_in(page, server)
        for form in ({}, {"csrf": "forged"}):
            for action in ("replay", "dismiss"):
                response = page.request.post(
                    f"{server.url}/console/dlq/{letter_id}/{action}", form=form, max_redirects=0
                )
                assert response.status == 403, (action, form)
            bulk = page.request.post(f"{server.url}/console/dlq/replay", form=form)
            assert bulk.status == 403
        assert server.call(pending_ids) == [letter_id]


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_detail_page_shows_chinese_payload_and_dismisses(page: Any, db_url: str) -> None:
    with ConsoleServer(db_url, [fx.make_pipeline()], groups=[]) as server:
        letter_id = server.call(lambda hub: add_dead_letter(hub, "task-zh", 3, PROMPT))
        log_in(page, server)
        page.goto(f"{server.url}/console/dlq/{letter_id}")
        assert page.evaluate("document.characterSet") == "UTF-8"
        expect(page.get_by_test_id("envelope")).to_contain_text(f'"note": "{PROMPT}"')
        expect(page.locator("dl.facts")).to_contain_text(f"content rejected: {PROMPT}")
        expect(page.get_by_test_id("history")).to_contain_text("PermanentError")
        page.on("dialog", lambda dialog: dialog.accept())
        page.get_by_test_id("dismiss").click()
        expect(page.get_by_role("status")).to_contain_text(f"Dead letter {letter_id} dismissed")
        assert server.call(pending_ids) == []


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_bulk_replay_by_filter_shows_progress(page: Any, db_url: str) -> None:
    with ConsoleServer(db_url, [fx.make_pipeline()], groups=[]) as server:
        for n in range(4):
            server.call(lambda hub, n=n: add_dead_letter(hub, f"k{n}", n))
        log_in(page, server)
        page.goto(f"{server.url}/console/dlq?topic={fx.TOPIC}")
        page.on("dialog", lambda dialog: dialog.accept())
        page.get_by_test_id("bulk-replay").click()
        expect(page.get_by_test_id("job-status")).to_have_text("done")
        progress = page.get_by_test_id("job-progress")
        assert progress.evaluate("p => [p.value, p.max]") == [4, 4]
        assert server.call(pending_ids) == []


def explorer_pipeline() -> Pipeline:
    """The effects pipeline plus a timeline source that knows subjects named ``task-…``."""
    p = fx.make_pipeline()

    @p.timeline
    async def task_history(hub: Hub, subject_id: str) -> list[TimelineEntry] | None:
        if not subject_id.startswith("task-"):
            return None
        return [
            TimelineEntry(1_000, "effects", "QUEUED", {"prompt": PROMPT}),
            TimelineEntry(2_000, "effects", "QUEUED → RUNNING"),
        ]

    return p


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_task_explorer_merges_sources(page: Any, db_url: str) -> None:
    with ConsoleServer(db_url, [explorer_pipeline()], groups=[]) as server:
        letter_id = server.call(lambda hub: add_dead_letter(hub, "task-7", 7))
        log_in(page, server)
        page.goto(f"{server.url}/console/tasks")
        page.get_by_test_id("task-id").fill("task-7")
        page.get_by_test_id("task-search").click()
        timeline = page.get_by_test_id("timeline")
        items = timeline.locator("li")
        # pipeline entries (oldest), then the dead letter, then its announcement on the DLQ topic
        expect(items).to_have_count(4)
        expect(items.nth(0)).to_contain_text("QUEUED")
        expect(items.nth(1)).to_contain_text("QUEUED → RUNNING")
        expect(items.nth(2)).to_contain_text("PermanentError")
        expect(items.nth(2).get_by_role("link")).to_have_attribute(
            "href", f"/console/dlq/{letter_id}"
        )
        expect(items.nth(3)).to_contain_text("outbox")
        items.nth(0).locator("summary").click()
        expect(items.nth(0)).to_contain_text(PROMPT)

        page.get_by_test_id("task-id").fill("nothing-here")
        page.get_by_test_id("task-search").click()
        expect(page.get_by_test_id("task-not-found")).to_be_visible()
