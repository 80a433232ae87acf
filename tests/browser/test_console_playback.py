"""avcc's Playback page in the console, in headless Chromium against a real server: a hub
running avcc on the embedded log, with only the playback stream groups (``avcc-sink`` into
DuckDB, ``avcc-detector`` into ``avcc_playback_anomalies``), uvicorn on loopback.

Must show: events a registered platform node posts through ``POST /v1/avcc/playback``
(with one user hash flooding a 1 s window) reach the page once stored: the nav leads there,
the chart draws one polyline per played code with a matching legend, the totals card counts
what the store holds, the sink card shows no lag and the insert rate, the top codes are
listed and the flood is in the anomalies table. A tenant's session gets the admin-only
refusal. With no playback the page says so instead of drawing an empty chart; playback
older than the page's window is counted but charted only once ``?minutes=`` takes it in; a
hub without avcc says it has no playback.

The page reloads itself every 10 s (``<meta http-equiv="refresh">``): the figures are all
stored before the page is first opened, so a reload shows the same page, and every check
is a retrying ``expect`` on a locator, which finds the element again after a reload.
"""

from __future__ import annotations

import contextlib
import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from playwright.sync_api import expect

from aigc_hub import tenancy
from aigc_hub.bootstrap import Hub
from aigc_hub.interfaces.console.rendering import fmt_ms
from aigc_hub.pipelines.avcc.handlers import detector, sink
from aigc_hub.pipelines.avcc.playback_views import sink_lag
from aigc_hub.pipelines.avcc.settlement_tables import avcc_playback_anomalies
from aigc_hub.pipelines.avcc.state import STATE
from tests.browser.harness import ConsoleServer, log_in
from tests.support.avcc import avcc_pipeline_in, coded_work
from tests.support.hubs import make_broker
from tests.support.provider import wait_until

pytestmark = pytest.mark.browser

NODE = "8361"
FLOODER = "sha256:flooder-0001"
#: The detector's flood line (``AvccSettings.flood_events``): this many events of one user
#: hash on one node inside one window.
FLOOD = 60
#: Plays of the flooded code by other viewers, and of a second code (with its completes and
#: purchases), after the flood window.
PLAYS_A, PLAYS_B, COMPLETES_B, PURCHASES_B = 20, 30, 6, 4
TOTAL = FLOOD + PLAYS_A + PLAYS_B + COMPLETES_B + PURCHASES_B


@contextlib.contextmanager
def playback_console(db_url: str, tmp_path: Path) -> Iterator[ConsoleServer]:
    """The console over a hub running avcc's sink and detector (1 s windows) on the
    embedded log; the analytics store is DuckDB under ``tmp_path``."""
    pipeline = avcc_pipeline_in(tmp_path, detector_window_s=1)
    broker = make_broker("embedded", tmp_path)
    groups = [sink.GROUP, detector.GROUP]
    with ConsoleServer(db_url, [pipeline], groups=groups, broker=broker) as server:
        yield server


def node_key(server: ConsoleServer) -> str:
    """Register platform node :data:`NODE` through the admin API; its key."""
    with api(server, server.admin_key) as admin:
        answer = admin.post("/v1/avcc/admin/nodes", json={"code": NODE, "name": "site"})
    assert answer.status_code == 201, answer.text
    key: str = answer.json()["key"]
    return key


def api(server: ConsoleServer, key: str) -> httpx.Client:
    return httpx.Client(
        base_url=server.url,
        headers={"Authorization": f"Bearer {key}"},
        trust_env=False,
        timeout=30.0,
    )


def event(
    code: str, ts: int, user: str, kind: str = "play", revenue: float = 0.0
) -> dict[str, Any]:
    """One event as a node sends it (seed 000 §9.2.4's payload in the envelope)."""
    payload = {
        "avcc_code": code,
        "platform_node": NODE,
        "user_hash": user,
        "event_type": kind,
        "duration_sec": 1800 if kind == "complete" else 0,
        "revenue_cny": revenue,
    }
    return {"event_id": str(uuid.uuid4()), "timestamp": ts, "payload": payload}


def planted_traffic(code_a: str, code_b: str, flood_start: int) -> list[dict[str, Any]]:
    """:data:`FLOOD` plays of ``code_a`` by :data:`FLOODER` inside the window starting at
    ``flood_start``, then ordinary viewers of both codes from 2 s after it (so every
    partition's event time passes the window's end plus the 1 s lateness, and it closes)."""
    flood = [event(code_a, flood_start + i * 10, FLOODER) for i in range(FLOOD)]
    later = flood_start + 2000
    ordinary = [event(code_a, later + i * 250, f"sha256:viewer-a{i}") for i in range(PLAYS_A)]
    ordinary += [event(code_b, later + i * 250, f"sha256:viewer-b{i}") for i in range(PLAYS_B)]
    ordinary += [
        event(code_b, later + i * 250 + 100, f"sha256:viewer-b{i}", "complete")
        for i in range(COMPLETES_B)
    ]
    ordinary += [
        event(code_b, later + i * 250 + 200, f"sha256:viewer-b{i}", "purchase", 2.5)
        for i in range(PURCHASES_B)
    ]
    return flood + ordinary


async def stored_and_found(hub: Hub) -> tuple[int, int | None, list[tuple[str, int]]]:
    """What the analytics store holds (events), the sink's lag, and the flood rows found."""
    avcc = hub.state_of(STATE)
    store = await avcc.analytics_for_reading()
    events = 0 if store is None else (await store.totals()).events
    query = sa.select(
        avcc_playback_anomalies.c.subject, avcc_playback_anomalies.c.window_start
    ).where(avcc_playback_anomalies.c.kind == "flood")
    async with hub.engine.connect() as conn:
        floods = [(r.subject, r.window_start) for r in (await conn.execute(query)).all()]
    return events, await sink_lag(avcc), floods


def test_stored_playback_and_a_planted_flood_are_shown_to_an_admin_and_refused_to_a_tenant(
    page: Any, db_url: str, tmp_path: Path
) -> None:
    with playback_console(db_url, tmp_path) as server:
        tenant, tenant_key = server.call(lambda hub: tenancy.create_tenant(hub.engine, "studio"))
        code_a = server.call(lambda hub: coded_work(hub, tenant.id, node=NODE))
        code_b = server.call(lambda hub: coded_work(hub, tenant.id, node=NODE))
        # Whole seconds, 30 s back: the flood fills one detector window, all of it in the
        # page's 15 minutes.
        flood_start = (int(time.time()) - 30) * 1000
        with api(server, node_key(server)) as node:
            sent = node.post(
                "/v1/avcc/playback", json={"events": planted_traffic(code_a, code_b, flood_start)}
            )
        assert sent.status_code == 202, sent.text
        assert sent.json() == {"accepted": TOTAL, "purchases": PURCHASES_B}

        def settled() -> tuple[int, int | None, list[tuple[str, int]]] | None:
            state = server.call(stored_and_found)
            events, lag, floods = state
            return state if events == TOTAL and lag == 0 and floods else None

        _, _, floods = wait_until(settled, 60.0, f"{TOTAL} events stored, no lag, a flood")
        assert floods == [(FLOODER, flood_start)]

        log_in(page, server)
        page.get_by_test_id("nav-playback").click()
        expect(page).to_have_url(f"{server.url}/console/playback")
        expect(page.get_by_test_id("nav-playback")).to_have_class("on")
        expect(page.locator('meta[http-equiv="refresh"]')).to_have_attribute("content", "10")

        # One polyline per played code, in the legend's (text) order; the flooded code's
        # bucket is the chart's busiest, drawn at the top (y = 0).
        codes = sorted([code_a, code_b])
        chart = page.get_by_test_id("plays-chart")
        expect(chart.locator("polyline")).to_have_count(2)
        expect(page.get_by_test_id("chart-code")).to_have_text(codes)
        for code in codes:
            expect(chart.locator(f'polyline[data-code="{code}"]')).to_have_count(1)
        at_top = re.compile(r"(^| )[0-9.]+,0\.0( |$)")
        expect(chart.locator(f'polyline[data-code="{code_a}"]')).to_have_attribute("points", at_top)
        expect(chart.locator(f'polyline[data-code="{code_b}"]')).not_to_have_attribute(
            "points", at_top
        )
        legend = page.locator("ul.legend li")
        expect(legend.filter(has_text=code_a)).to_contain_text(f"{FLOOD + PLAYS_A} plays")
        expect(legend.filter(has_text=code_b)).to_contain_text(f"{PLAYS_B} plays")
        expect(page.get_by_test_id("chart-empty")).to_have_count(0)

        expect(page.get_by_test_id("total-events")).to_have_text(str(TOTAL))
        expect(page.get_by_test_id("totals-card")).to_contain_text(
            f"{FLOOD + PLAYS_A + PLAYS_B} plays · {COMPLETES_B} completes · "
            f"{PURCHASES_B} purchases · ¥10.00"
        )
        expect(page.get_by_test_id("sink-lag")).to_have_text("0")
        # Every row was stored within the last minute: the rate is the count over 60 s.
        expect(page.get_by_test_id("sink-rate")).to_have_text(f"{TOTAL / 60:.1f}")
        expect(page.get_by_test_id("sink-card")).to_contain_text("last write")
        expect(page.get_by_test_id("sink-behind")).to_have_count(0)
        expect(page.get_by_test_id("store-note")).to_have_count(0)

        top = page.get_by_test_id("top-codes").locator("tbody tr")
        expect(top).to_have_count(2)
        expect(top.nth(0).locator("td")).to_have_text(
            [code_a, str(FLOOD + PLAYS_A), "0", "0", "0.00"]
        )
        expect(top.nth(1).locator("td")).to_have_text(
            [code_b, str(PLAYS_B), str(COMPLETES_B), str(PURCHASES_B), "10.00"]
        )

        flood = page.get_by_test_id("anomaly-flood")
        expect(flood).to_have_count(1)
        expect(flood.locator("td").nth(1)).to_have_text(FLOODER)
        expect(flood.locator("td").nth(2)).to_have_text(fmt_ms(flood_start))
        expect(flood.locator("td").nth(3)).to_have_text(f"{FLOOD:.2f}")
        expect(flood.locator("td").nth(5)).to_have_text("1.0")  # FLOOD / the line of 60
        expect(page.get_by_test_id("anomalies").locator("tbody tr")).to_have_count(1)
        expect(page.get_by_test_id("anomalies-empty")).to_have_count(0)

        # The page reloads itself (its meta refresh, at most 10 s away): the figures stay.
        with page.expect_event("load", timeout=15_000):
            pass
        expect(page.get_by_test_id("total-events")).to_have_text(str(TOTAL))
        expect(page.get_by_test_id("anomaly-flood")).to_contain_text(FLOODER)

        # A tenant's session: no link, and the admin-only refusal instead of the figures.
        page.get_by_role("button", name="Log out").click()
        log_in(page, server, key=tenant_key)
        expect(page.get_by_test_id("nav-playback")).to_have_count(0)
        refused = page.goto(f"{server.url}/console/playback")
        assert refused is not None and refused.status == 403
        expect(page.get_by_test_id("error-message")).to_contain_text("needs an admin key")
        expect(page.get_by_test_id("plays-chart")).to_have_count(0)
        expect(page.get_by_test_id("anomalies")).to_have_count(0)


def test_with_no_playback_the_page_shows_the_empty_chart_and_no_anomaly(
    page: Any, sqlite_url: str, tmp_path: Path
) -> None:
    with playback_console(sqlite_url, tmp_path) as server:
        log_in(page, server)
        page.get_by_test_id("nav-playback").click()
        expect(page).to_have_url(f"{server.url}/console/playback")
        expect(page.get_by_test_id("chart-empty")).to_have_text(
            "No play stored in the last 15 minutes."
        )
        expect(page.get_by_test_id("plays-chart")).to_have_count(0)
        expect(page.get_by_test_id("anomalies-empty")).to_have_text("No anomaly found.")
        expect(page.get_by_test_id("anomalies")).to_have_count(0)
        expect(page.get_by_test_id("top-codes")).to_have_count(0)
        expect(page.get_by_test_id("sink-lag")).to_have_text("0")
        expect(page.get_by_test_id("sink-rate")).to_have_text("—")
        expect(page.get_by_test_id("store-note")).to_contain_text("has stored nothing yet")
        expect(page.get_by_test_id("totals-card")).to_have_count(0)


def test_playback_older_than_the_window_is_counted_but_charted_only_in_a_wider_window(
    page: Any, sqlite_url: str, tmp_path: Path
) -> None:
    with playback_console(sqlite_url, tmp_path) as server:
        tenant, _ = server.call(lambda hub: tenancy.create_tenant(hub.engine, "studio"))
        code = server.call(lambda hub: coded_work(hub, tenant.id, node=NODE))
        an_hour_ago = (int(time.time()) - 3600) * 1000
        plays = [event(code, an_hour_ago + i * 1000, f"sha256:viewer-{i}") for i in range(30)]
        with api(server, node_key(server)) as node:
            sent = node.post("/v1/avcc/playback", json={"events": plays})
        assert sent.status_code == 202, sent.text

        def stored() -> bool:
            events, lag, _ = server.call(stored_and_found)
            return events == len(plays) and lag == 0

        wait_until(stored, 60.0, f"{len(plays)} events stored")
        log_in(page, server)
        page.goto(f"{server.url}/console/playback")
        expect(page.get_by_test_id("total-events")).to_have_text(str(len(plays)))
        # 30 rows in the last minute: 0.5 rows/s, not rounded away to "0".
        expect(page.get_by_test_id("sink-rate")).to_have_text("0.5")
        expect(page.get_by_test_id("chart-empty")).to_have_text(
            "No play stored in the last 15 minutes."
        )
        expect(page.get_by_test_id("top-codes")).to_have_count(0)
        expect(page.get_by_test_id("anomalies-empty")).to_have_text("No anomaly found.")

        page.goto(f"{server.url}/console/playback?minutes=120")
        expect(page.locator("h1")).to_contain_text("last 120 min")
        chart = page.get_by_test_id("plays-chart")
        expect(chart.locator("polyline")).to_have_count(1)
        expect(chart.locator(f'polyline[data-code="{code}"]')).to_have_count(1)
        expect(page.locator("ul.legend li")).to_have_text([f"{code} {len(plays)} plays"])
        expect(page.get_by_test_id("top-codes").locator("tbody tr")).to_have_count(1)


def test_a_hub_without_avcc_says_it_has_no_playback(page: Any, sqlite_url: str) -> None:
    with ConsoleServer(sqlite_url, [], groups=[]) as server:
        log_in(page, server)
        response = page.goto(f"{server.url}/console/playback")
        assert response is not None and response.status == 404
        expect(page.get_by_test_id("error-message")).to_contain_text("does not run the avcc")
