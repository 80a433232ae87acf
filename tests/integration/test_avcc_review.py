"""avcc's precheck and review on real parts: a tampered work refused before anything is
written, a copy of a coded work rejected as a duplicate, and a need_human work that waits, is
claimed, decided, audited and then coded."""

from __future__ import annotations

import io
from pathlib import Path

import sqlalchemy as sa
from PIL import Image

from aigc_hub.store.tables import audit_log, moderation_decisions
from tests.support.avcc import (
    apply,
    avcc_stack,
    noise_png,
    sha,
    upload,
    wait_settled,
    wait_status,
)
from tests.support.hubs import make_broker


def as_jpeg(png: bytes, quality: int = 70) -> bytes:
    out = io.BytesIO()
    Image.open(io.BytesIO(png)).convert("RGB").save(out, "JPEG", quality=quality)
    return out.getvalue()


async def test_a_hash_that_is_not_the_stored_bytes_is_refused_at_precheck(
    sqlite_url: str, tmp_path: Path
) -> None:
    async with avcc_stack(sqlite_url, make_broker("embedded", tmp_path), tmp_path) as stack:
        async with stack.client(await stack.tenant("studio")) as client:
            work = noise_png(1)
            tampered = sha(work[:-1] + bytes([work[-1] ^ 1]))
            answer = await apply(client, work, content_hash=tampered)
            signed = await client.post(
                "/v1/avcc/works",
                json={
                    "filename": "work.png",
                    "content_type": "image/png",
                    "size_bytes": len(work),
                    "content_hash": sha(work),
                },
            )
            upload = signed.json()["upload"]
            other_bytes = await client.put(
                upload["url"], content=work[:-1] + b"\x00", headers=upload["headers"]
            )
            missing = await client.post(
                "/v1/avcc/applications",
                json={
                    "content_url": "blob:t/someone-else/avcc-work/x/work.png",
                    "content_hash": sha(work),
                    "ai_tool_info": {"model_name": "Sora", "model_version": "1"},
                },
                headers={"Idempotency-Key": "k-missing"},
            )
        records = await stack.records()
    assert answer.status_code == 422
    assert answer.json()["errors"] == [
        {"field": "body.content_hash", "message": "does not match the stored bytes"}
    ]
    assert other_bytes.status_code in (400, 403)  # the signed upload takes these bytes only
    assert missing.status_code == 422
    assert missing.json()["errors"][0]["field"] == "body.content_url"
    assert records == []


async def test_a_copy_of_a_coded_work_is_rejected_as_its_duplicate(
    sqlite_url: str, tmp_path: Path
) -> None:
    original = noise_png(7, size=96)
    async with avcc_stack(sqlite_url, make_broker("embedded", tmp_path), tmp_path) as stack:
        async with stack.client(await stack.tenant("first")) as first:
            coded = (await apply(first, original)).json()["avcc_record_id"]
            assert (await wait_settled(first, [coded]))[coded]["status"] == "CODED"
            again = await apply(first, as_jpeg(original, 90), filename="again.jpg")
            same_bytes_url = await upload(first, original)
            live = await first.post(
                "/v1/avcc/applications",
                json={
                    "content_url": same_bytes_url,
                    "content_hash": sha(original),
                    "ai_tool_info": {"model_name": "Sora", "model_version": "1"},
                },
                headers={"Idempotency-Key": "k-same"},
            )
        async with stack.client(await stack.tenant("copier")) as copier:
            copy = (await apply(copier, as_jpeg(original), filename="copy.jpg")).json()
            copied = (await wait_settled(copier, [copy["avcc_record_id"]]))[copy["avcc_record_id"]]
    assert live.status_code == 409
    assert live.json()["avcc_record_id"] == coded
    assert again.status_code == 201
    assert copied["status"] == "REJECTED"
    assert copied["decision"] == "rejected"
    assert copied["status_reason"] == f"duplicate: of coded work {coded}"
    assert copied["avcc_code"] is None


async def test_a_need_human_work_waits_is_claimed_decided_audited_and_coded(
    sqlite_url: str, tmp_path: Path
) -> None:
    text = b"A short story: the film ends with a beheading in a dark alley."
    async with avcc_stack(sqlite_url, make_broker("embedded", tmp_path), tmp_path) as stack:
        async with stack.client(await stack.tenant("writer")) as writer:
            record_id = (await apply(writer, text, filename="story.txt")).json()["avcc_record_id"]
            waiting = (await wait_settled(writer, [record_id]))[record_id]
            async with (
                stack.client(await stack.admin()) as alice,
                stack.client(await stack.admin()) as bob,
            ):
                queue = (await alice.get("/v1/avcc/reviews")).json()["items"]
                unclaimed = await alice.post(
                    f"/v1/avcc/reviews/{record_id}/decision",
                    json={"claim_token": "nope", "decision": "approved", "final_level": "P"},
                )
                claim = (await alice.post(f"/v1/avcc/reviews/{record_id}/claim")).json()
                taken = await bob.post(f"/v1/avcc/reviews/{record_id}/claim")
                no_level = await alice.post(
                    f"/v1/avcc/reviews/{record_id}/decision",
                    json={"claim_token": claim["claim_token"], "decision": "approved"},
                )
                decided = await alice.post(
                    f"/v1/avcc/reviews/{record_id}/decision",
                    json={
                        "claim_token": claim["claim_token"],
                        "decision": "approved",
                        "final_level": "P",
                        "note": "fiction, no real person",
                    },
                )
                tenant_refused = await writer.get("/v1/avcc/reviews")
            coded = await wait_status(writer, record_id, "CODED")
        async with stack.hub.engine.connect() as conn:
            moderated = (
                await conn.execute(
                    sa.select(moderation_decisions.c.verdict, moderation_decisions.c.hit_rules)
                    .where(moderation_decisions.c.subject_id == str(record_id))
                    .where(moderation_decisions.c.subject_kind == "avcc_work")
                )
            ).all()
            trail = (
                await conn.execute(
                    sa.select(audit_log.c.action, audit_log.c.result)
                    .where(audit_log.c.target == f"avcc_record:{record_id}")
                    .order_by(audit_log.c.id)
                )
            ).all()
    assert waiting["status"] == "NEED_HUMAN" and waiting["decision"] == "need_human"
    assert [tuple(m) for m in moderated] == [("human_review", ["violence.gore.keyword"])]
    assert [q["avcc_record_id"] for q in queue] == [record_id]
    assert unclaimed.status_code == 409
    assert taken.status_code == 409
    assert no_level.status_code == 422
    assert decided.status_code == 200, decided.text
    assert tenant_refused.status_code == 403
    assert coded["final_level"] == "P" and coded["avcc_code"]
    assert coded["report_hash"] == decided.json()["report_hash"] != waiting["report_hash"]
    assert [tuple(r) for r in trail] == [
        ("avcc.review.claim", "claimed"),
        ("avcc.review.decide", "approved"),
    ]


async def test_a_work_unreadable_as_its_type_is_rejected_with_the_reason(
    sqlite_url: str, tmp_path: Path
) -> None:
    truncated = noise_png(5)[:80]  # a PNG's signature and header, then nothing
    broker = make_broker("embedded", tmp_path)
    async with (
        avcc_stack(sqlite_url, broker, tmp_path) as stack,
        stack.client(await stack.tenant("studio")) as client,
    ):
        record_id = (await apply(client, truncated)).json()["avcc_record_id"]
        settled = (await wait_settled(client, [record_id]))[record_id]
    assert settled["status"] == "REJECTED"
    assert settled["status_reason"].startswith("content: ")
    assert "not a readable image" in settled["status_reason"]
