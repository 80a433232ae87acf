"""avcc's human review queue in the console, in headless Chromium against a real server (a hub
running avcc: every consumer group, the embedded log, local blobs; uvicorn on loopback).

Must show: a text work that moderation holds for a person (a graphic-violence keyword of
the default policy) is in the queue; an admin claims it and approves it at level P from its
page; the work is then coded (polled through the API) and its page's audit trail shows the
claim and the decision. Refusals are messages on the page, never an error page: deciding
with no claim, approving with no level, deciding after the claim ran out, claiming a work
another reviewer holds. A near copy of a coded image waits too, and the console serves its
preview with the sniffed content type; a tenant reaches neither page nor preview. What the
store lost or changed (the AI report, the work) is said on the page, and a hub without avcc
says it has no queue.
"""

from __future__ import annotations

import contextlib
import io
import mimetypes
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from PIL import Image
from playwright.sync_api import expect

from aigc_hub import tenancy
from aigc_hub.blobs.local import LocalBlobStore
from aigc_hub.bootstrap import Hub
from aigc_hub.pipelines.avcc.models import avcc_human_reviews, avcc_records, avcc_review_reports
from tests.browser.harness import ConsoleServer, log_in
from tests.support.avcc import avcc_pipeline_in, noise_png, sha
from tests.support.provider import wait_until

pytestmark = pytest.mark.browser

#: Fiction that names a keyword of the default policy's ``violence.gore.keyword`` rule
#: (verdict human_review): the AI review must hand it to a person.
GORE_STORY = (
    "The last chapter of an AI-written saga: at dawn the usurper's beheading ends the war, "
    "and the river carries the banners of both armies to the sea."
)
#: A declared tool the review knows: the score then loses only moderation's 30 points.
KNOWN_TOOL = "qwen"


@contextlib.contextmanager
def avcc_console(db_url: str, tmp_path: Path) -> Iterator[ConsoleServer]:
    """The console over a hub running avcc (reviews, chain, codes) on local blobs."""
    blobs = LocalBlobStore(tmp_path / "blobs", secret=b"test-blob-secret")
    pipeline = avcc_pipeline_in(tmp_path, batch_window_ms=50)
    with ConsoleServer(db_url, [pipeline], blobs=blobs) as server:
        yield server


def tenant_key(server: ConsoleServer, name: str = "studio") -> str:
    _tenant, key = server.call(lambda hub: tenancy.create_tenant(hub.engine, name))
    return key


def key_id(server: ConsoleServer, key: str) -> str:
    who = server.call(lambda hub: tenancy.authenticate(hub.engine, key))
    assert who is not None
    return who.key_id


def api(server: ConsoleServer, key: str) -> httpx.Client:
    return httpx.Client(
        base_url=server.url,
        headers={"Authorization": f"Bearer {key}"},
        trust_env=False,
        timeout=30.0,
    )


def apply_work(
    server: ConsoleServer, key: str, data: bytes, filename: str, model_name: str = KNOWN_TOOL
) -> int:
    """Put ``data`` into the store by a signed upload and apply for its code; the record's id."""
    content_type = mimetypes.guess_type(filename)[0] or "application/octet-stream"
    work = {
        "filename": filename,
        "content_type": content_type,
        "size_bytes": len(data),
        "content_hash": sha(data),
    }
    with api(server, key) as client:
        uploaded = client.post("/v1/avcc/works", json=work)
        assert uploaded.status_code == 201, uploaded.text
        upload = uploaded.json()["upload"]
        put = client.put(upload["url"], content=data, headers=upload["headers"])
        assert put.status_code < 300, put.text
        body = {
            "content_url": uploaded.json()["content_url"],
            "content_hash": sha(data),
            "ai_tool_info": {"model_name": model_name, "model_version": "v1.0"},
            "priority": 7,
        }
        answer = client.post(
            "/v1/avcc/applications", json=body, headers={"Idempotency-Key": str(uuid.uuid4())}
        )
    assert answer.status_code == 201, answer.text
    return int(answer.json()["avcc_record_id"])


def status_reached(
    server: ConsoleServer, key: str, record_id: int, wanted: set[str]
) -> dict[str, Any]:
    """Poll the tenant's API until the application is in one of ``wanted`` (bounded; the
    first text review loads the MiniLM model, seconds)."""
    with api(server, key) as client:

        def reached() -> dict[str, Any] | None:
            snap: dict[str, Any] = client.get(f"/v1/avcc/applications/{record_id}").json()
            return snap if snap["status"] in wanted else None

        found: dict[str, Any] = wait_until(reached, 120.0, f"work {record_id} in {wanted}")
    return found


def near_copy(data: bytes, other: bytes, rows: int) -> bytes:
    """``data``'s picture with its top ``rows`` rows taken from ``other``'s, as a PNG."""
    picture = Image.open(io.BytesIO(data))
    picture.paste(Image.open(io.BytesIO(other)).crop((0, 0, picture.width, rows)), (0, 0))
    out = io.BytesIO()
    picture.save(out, "PNG")
    return out.getvalue()


def alert(page: Any) -> Any:
    return page.locator("main p.error[role=alert]")


def test_a_need_human_text_work_is_claimed_approved_at_p_coded_and_audited(
    page: Any, db_url: str, tmp_path: Path
) -> None:
    with avcc_console(db_url, tmp_path) as server:
        key = tenant_key(server)
        record_id = apply_work(server, key, GORE_STORY.encode(), "saga.txt")
        held = status_reached(server, key, record_id, {"NEED_HUMAN", "CODED", "REJECTED"})
        assert held["status"] == "NEED_HUMAN", held

        log_in(page, server)
        page.get_by_test_id("nav-reviews").click()
        row = page.get_by_test_id(f"review-row-{record_id}")
        expect(row).to_contain_text("violence.gore.keyword")
        expect(row).to_contain_text("70.0")
        expect(row.locator("td").nth(4)).to_have_text("P")
        row.get_by_test_id(f"open-review-{record_id}").click()

        expect(page.get_by_test_id("content-type")).to_have_text("text/plain")
        expect(page.get_by_test_id("content-hash")).to_have_text(sha(GORE_STORY.encode()))
        expect(page.get_by_test_id("ai-tool")).to_have_text(f"{KNOWN_TOOL} v1.0")
        expect(page.get_by_test_id("excerpt")).to_have_text(GORE_STORY)
        expect(page.get_by_test_id("findings")).to_contain_text("violence.gore.keyword")
        expect(page.get_by_test_id("report-verified")).to_have_text("matches the stored report")
        expect(page.get_by_test_id("audit-empty")).to_be_visible()

        page.get_by_test_id("claim").click()
        expect(page.get_by_role("status")).to_contain_text(f"You hold work {record_id} until")
        page.get_by_test_id("decision-level").select_option("P")
        page.get_by_test_id("decision-note").fill("历史小说：暴力并非写实")
        page.get_by_test_id("approve").click()
        expect(page.get_by_role("status")).to_have_text(f"Work {record_id} approved at level P.")
        expect(page.get_by_test_id("decided")).to_contain_text("approved at level P")

        coded = status_reached(server, key, record_id, {"CODED"})
        assert coded["final_level"] == "P" and coded["decision"] == "approved"
        page.reload()
        expect(page.get_by_test_id("work-status")).to_have_text("CODED")
        expect(page.get_by_test_id("avcc-code")).to_have_text(coded["avcc_code"])
        reviewer = f"admin:{key_id(server, server.admin_key)}"
        expect(page.get_by_test_id("audit-trail").locator("tbody tr")).to_have_count(2)
        claimed = page.get_by_test_id("audit-avcc.review.claim")
        expect(claimed).to_contain_text(reviewer)
        expect(claimed).to_contain_text("claimed")
        decided = page.get_by_test_id("audit-avcc.review.decide")
        expect(decided).to_contain_text(reviewer)
        expect(decided).to_contain_text("approved")
        expect(decided).to_contain_text("历史小说：暴力并非写实")

        page.get_by_test_id("nav-reviews").click()
        expect(page.get_by_test_id("review-empty")).to_be_visible()


async def expire_claim(hub: Hub, record_id: int) -> None:
    """Let the work's claim run out (its lease ends a millisecond ago)."""
    async with hub.transaction() as conn:
        await conn.execute(
            sa.update(avcc_human_reviews)
            .where(avcc_human_reviews.c.record_id == record_id)
            .values(lease_until=hub.clock.now_ms() - 1)
        )


def test_refused_decisions_and_claims_are_messages_on_the_work_page(
    page: Any, sqlite_url: str, tmp_path: Path
) -> None:
    with avcc_console(sqlite_url, tmp_path) as server:
        key = tenant_key(server)
        record_id = apply_work(server, key, GORE_STORY.encode(), "saga.txt")
        assert status_reached(server, key, record_id, {"NEED_HUMAN"})
        work_url = f"{server.url}/console/reviews/{record_id}"
        log_in(page, server)
        page.goto(work_url)
        csrf = page.locator("form.logout input[name=csrf]").input_value()

        # A decision with no claim behind it (no form offers one: sent by hand).
        posted = page.request.post(
            f"{work_url}/decision", form={"csrf": csrf, "decision": "approved", "level": "P"}
        )
        assert posted.status == 200 and posted.url.startswith(work_url)
        page.goto(posted.url)
        expect(alert(page)).to_have_text(f"Claim work {record_id} before deciding it.")
        # Without the session's CSRF token the claim is refused, and nothing is claimed.
        refused = page.request.post(f"{work_url}/claim", form={"decision": "approved"})
        assert refused.status == 403

        page.get_by_test_id("claim").click()
        page.get_by_test_id("approve").click()
        expect(alert(page)).to_have_text("An approval names the level granted (P, G or O).")
        expect(page.get_by_test_id("decision-form")).to_be_visible()
        # Values no form offers, sent by hand with the live claim's token.
        token = page.locator("input[name=claim_token]").input_value()
        for fields, message in (
            ({"decision": "approved", "level": "X"}, "Level: Input should be 'P', 'G' or 'O'."),
            ({"decision": "maybe", "level": "P"}, "Approve or reject the work."),
        ):
            form = {"csrf": csrf, "claim_token": token, **fields}
            sent = page.request.post(f"{work_url}/decision", form=form)
            assert sent.status == 200
            page.goto(sent.url)
            expect(alert(page)).to_have_text(message)

        # The claim runs out while the form is open: deciding then is refused.
        server.call(lambda hub: expire_claim(hub, record_id))
        page.get_by_test_id("decision-level").select_option("P")
        page.get_by_test_id("approve").click()
        expect(alert(page)).to_have_text(f"Work {record_id}: your claim ran out; claim it again.")

        # Another reviewer takes it through the API; claiming it here is refused.
        other = server.call(lambda hub: tenancy.create_admin_key(hub.engine))
        with api(server, other) as client:
            taken = client.post(f"/v1/avcc/reviews/{record_id}/claim")
        assert taken.status_code == 200, taken.text
        page.reload()
        expect(page.get_by_test_id("claimed-by")).to_contain_text(f"admin:{key_id(server, other)}")
        expect(page.get_by_test_id("decision-form")).to_have_count(0)
        page.get_by_test_id("claim").click()
        expect(alert(page)).to_have_text(f"Work {record_id} is claimed by another reviewer.")

        expect(page.get_by_test_id("audit-avcc.review.claim")).to_have_count(2)
        expect(page.get_by_test_id("audit-avcc.review.decide")).to_have_count(0)
        assert status_reached(server, key, record_id, {"NEED_HUMAN"})
        # The queue shows who holds it.
        page.get_by_test_id("nav-reviews").click()
        expect(page.get_by_test_id(f"review-row-{record_id}")).to_contain_text(
            f"admin:{key_id(server, other)}"
        )


def test_a_near_copy_image_waits_with_its_preview_served_by_the_console(
    page: Any, sqlite_url: str, tmp_path: Path
) -> None:
    original = noise_png(1)
    # 18 of 48 rows of another picture: measured 28 hash bits from the original, between the
    # duplicate line (24) and where resemblance ends (32), so a resemblance but no duplicate.
    copy = near_copy(original, noise_png(2), rows=18)
    with avcc_console(sqlite_url, tmp_path) as server:
        key = tenant_key(server)
        first = apply_work(server, key, original, "original.png", "Stable-Diffusion-XL")
        assert status_reached(server, key, first, {"CODED", "REJECTED"})["status"] == "CODED"
        # An unknown tool and the resemblance together put its score in the human band.
        second = apply_work(server, key, copy, "copy.png", "my-own-model")
        held = status_reached(server, key, second, {"NEED_HUMAN", "CODED", "REJECTED"})
        assert held["status"] == "NEED_HUMAN", held

        log_in(page, server)
        page.goto(f"{server.url}/console/reviews/{second}")
        expect(page.get_by_test_id("content-type")).to_have_text("image/png")
        expect(page.get_by_test_id("ai-reasons")).to_contain_text(f"to coded work {first}")
        expect(page.get_by_test_id("ai-reasons")).to_contain_text("unknown AI tool")
        preview = page.get_by_test_id("preview")
        page.wait_for_function(
            "img => img.complete && img.naturalWidth === 48", arg=preview.element_handle()
        )
        served = page.request.get(f"{server.url}/console/reviews/{second}/work")
        assert served.status == 200
        assert served.headers["content-type"] == "image/png"
        assert served.headers["x-content-type-options"] == "nosniff"
        assert served.body() == copy

        # The coded original never waited for a reviewer: no page, no preview.
        missing = page.goto(f"{server.url}/console/reviews/{first}")
        assert missing is not None and missing.status == 404
        expect(page.get_by_test_id("error-message")).to_have_text(
            f"Work {first} never waited for a reviewer."
        )
        assert page.request.get(f"{server.url}/console/reviews/{first}/work").status == 404
        csrf = page.locator("form.logout input[name=csrf]").input_value()
        claimed = page.request.post(
            f"{server.url}/console/reviews/{first}/claim", form={"csrf": csrf}
        )
        assert (
            claimed.status == 404 and f"Work {first} never waited for a reviewer." in claimed.text()
        )

        # Rejected, with a note; the level picked is the approval's and is not sent.
        page.goto(f"{server.url}/console/reviews/{second}")
        page.get_by_test_id("claim").click()
        page.get_by_test_id("decision-level").select_option("G")
        page.get_by_test_id("decision-note").fill("too close to work it copies")
        page.get_by_test_id("reject").click()
        expect(page.get_by_role("status")).to_have_text(f"Work {second} rejected.")
        rejected = status_reached(server, key, second, {"REJECTED"})
        assert rejected["final_level"] is None and rejected["decision"] == "rejected"
        expect(page.get_by_test_id("audit-avcc.review.decide")).to_contain_text("rejected")

        # Bytes the store lost are a 404, never a cut body.
        server.call(lambda hub: forget(hub, work_key(second)))
        lost = page.request.get(f"{server.url}/console/reviews/{second}/work")
        assert lost.status == 404 and f"The store has lost work {second}." in lost.text()

        # A tenant's session reaches neither the page nor the work's bytes.
        page.get_by_role("button", name="Log out").click()
        log_in(page, server, key=key)
        for path in ("reviews", f"reviews/{second}", f"reviews/{second}/work"):
            response = page.goto(f"{server.url}/console/{path}")
            assert response is not None and response.status == 403, path


def work_key(record_id: int) -> Callable[[Hub], Awaitable[str]]:
    """Where the work of ``record_id`` is kept in the store (read on the server's loop)."""

    async def read(hub: Hub) -> str:
        async with hub.engine.connect() as conn:
            query = sa.select(avcc_records.c.object_key).where(avcc_records.c.id == record_id)
            return str((await conn.execute(query)).scalar_one())

    return read


def ai_report_key(record_id: int) -> Callable[[Hub], Awaitable[str]]:
    """Where the AI's report on ``record_id`` is kept in the store."""

    async def read(hub: Hub) -> str:
        async with hub.engine.connect() as conn:
            query = sa.select(avcc_review_reports.c.report_key).where(
                avcc_review_reports.c.record_id == record_id
            )
            return str((await conn.execute(query)).scalar_one())

    return read


async def forget(hub: Hub, key: Callable[[Hub], Awaitable[str]]) -> None:
    """Delete the object ``key`` names from the hub's store."""
    assert hub.blobs is not None
    await hub.blobs.delete(await key(hub))


async def overwrite(hub: Hub, key: Callable[[Hub], Awaitable[str]], data: bytes) -> None:
    """Replace the object ``key`` names with ``data``."""
    assert hub.blobs is not None
    await hub.blobs.put(await key(hub), data, "application/json")


def test_a_changed_unreadable_or_lost_report_and_a_lost_text_are_said_on_the_page(
    page: Any, sqlite_url: str, tmp_path: Path
) -> None:
    with avcc_console(sqlite_url, tmp_path) as server:
        key = tenant_key(server)
        record_id = apply_work(server, key, GORE_STORY.encode(), "saga.txt")
        assert status_reached(server, key, record_id, {"NEED_HUMAN"})
        work_url = f"{server.url}/console/reviews/{record_id}"
        report = ai_report_key(record_id)
        log_in(page, server)

        # Valid JSON, but not the bytes whose hash was recorded: its findings are still shown.
        changed = b'{"decision": "approved", "checks": {"moderation": "allow"}, "reasons": []}'
        server.call(lambda hub: overwrite(hub, report, changed))
        page.goto(work_url)
        verified = page.get_by_test_id("report-verified")
        expect(verified).to_have_text("does not match the stored report")
        expect(page.get_by_test_id("findings")).to_contain_text("allow")

        server.call(lambda hub: overwrite(hub, report, b"not json"))
        page.reload()
        expect(page.get_by_test_id("report-problem")).to_have_text("the stored report is not JSON")
        expect(page.get_by_test_id("findings")).to_have_count(0)

        server.call(lambda hub: forget(hub, report))
        server.call(lambda hub: forget(hub, work_key(record_id)))
        page.reload()
        expect(page.get_by_test_id("report-problem")).to_have_text(
            "the report is missing from the blob store"
        )
        expect(page.get_by_test_id("report-verified")).to_have_count(0)
        expect(page.get_by_test_id("work-lost")).to_be_visible()
        # The rest of the page, and the claim, still work.
        expect(page.get_by_test_id("ai-reasons")).to_contain_text("violence.gore.keyword")
        page.get_by_test_id("claim").click()
        expect(page.get_by_test_id("decision-form")).to_be_visible()


def test_a_hub_without_avcc_says_it_has_no_review_queue(page: Any, sqlite_url: str) -> None:
    with ConsoleServer(sqlite_url, [], groups=[]) as server:
        log_in(page, server)
        response = page.goto(f"{server.url}/console/reviews")
        assert response is not None and response.status == 404
        expect(page.get_by_test_id("error-message")).to_contain_text("does not run the avcc")
