"""Two hundred applications from three tenants, on embedded defaults and on the scale profile
(PostgreSQL, a Kafka-protocol broker, Redis, S3): every one ends coded, rejected as a copy,
or decided by a reviewer; each coded work has exactly one code, one leaf on the log and one
report hash, and each work's moves happened in order."""

from __future__ import annotations

import asyncio
import contextlib
import io
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa
from PIL import Image

from aigc_hub.pipelines.avcc.models import (
    avcc_log_leaves,
    avcc_record_events,
    avcc_review_reports,
)
from tests.support.avcc import (
    AvccStack,
    apply,
    avcc_stack,
    noise_png,
    wait_settled,
    wait_status,
)
from tests.support.hubs import make_broker
from tests.support.redis_dbs import private_redis_url

N_TENANTS, N_ORIGINALS, N_COPIES, N_HUMAN = 3, 180, 15, 5  # 200 applications
FLOW = ["APPLIED", "APPROVED", "ANCHORING", "ANCHORED", "CODED"]
HUMAN_FLOW = ["APPLIED", "NEED_HUMAN", "APPROVED", "ANCHORING", "ANCHORED", "CODED"]


def as_jpeg(png: bytes) -> bytes:
    out = io.BytesIO()
    Image.open(io.BytesIO(png)).convert("RGB").save(out, "JPEG", quality=85)
    return out.getvalue()


@contextlib.asynccontextmanager
async def profile_stack(
    profile: str, tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[AvccStack]:
    if profile == "embedded":
        url = request.getfixturevalue("sqlite_url")
        async with avcc_stack(url, make_broker("embedded", tmp_path), tmp_path) as stack:
            yield stack
        return
    from aigc_hub.blobs.s3 import S3BlobStore
    from aigc_hub.cache.redis import RedisCache

    seaweed = request.getfixturevalue("seaweed")
    kafka = request.getfixturevalue("kafka_endpoint")
    store = S3BlobStore(
        "avcc-works",
        endpoint=seaweed.endpoint,
        access_key=seaweed.access_key,
        secret_key=seaweed.secret_key,
    )
    await store.ensure_bucket()
    cache = RedisCache.from_url(private_redis_url("avcc-stack"), prefix="avcc-test:")
    async with avcc_stack(
        request.getfixturevalue("pg_url"), kafka.broker(), tmp_path, blobs=store, cache=cache
    ) as stack:
        yield stack


async def decide_waiting(stack: AvccStack, admin: httpx.AsyncClient, ids: list[int]) -> None:
    for record_id in ids:
        claim = (await admin.post(f"/v1/avcc/reviews/{record_id}/claim")).json()
        decided = await admin.post(
            f"/v1/avcc/reviews/{record_id}/decision",
            json={"claim_token": claim["claim_token"], "decision": "approved", "final_level": "P"},
        )
        assert decided.status_code == 200, decided.text


@pytest.mark.parametrize(
    "profile",
    [
        "embedded",
        pytest.param(
            "scale",
            marks=[pytest.mark.postgres, pytest.mark.kafka, pytest.mark.redis],
        ),
    ],
)
async def test_two_hundred_applications_of_three_tenants_each_end_once_and_in_order(
    profile: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    originals = [noise_png(10_000 + i) for i in range(N_ORIGINALS)]
    async with profile_stack(profile, tmp_path, request) as stack:
        keys = [await stack.tenant(f"studio-{t}") for t in range(N_TENANTS)]
        clients = [stack.client(k) for k in keys]
        owner: dict[int, int] = {}
        try:

            async def submit(tenant: int, data: bytes, name: str) -> int:
                answer = await apply(clients[tenant], data, filename=name)
                assert answer.status_code == 201, answer.text
                record_id = int(answer.json()["avcc_record_id"])
                owner[record_id] = tenant
                return record_id

            async def settle(ids: list[int]) -> dict[int, dict[str, object]]:
                done: dict[int, dict[str, object]] = {}
                for t in range(N_TENANTS):
                    mine = [i for i in ids if owner[i] == t]
                    done |= await wait_settled(clients[t], mine, timeout_s=300)
                return done

            first = await asyncio.gather(
                *(submit(i % N_TENANTS, data, "work.png") for i, data in enumerate(originals))
            )
            stories = [
                f"Story {i}: beheading in the last scene of chapter {i}.".encode()
                for i in range(N_HUMAN)
            ]
            human = await asyncio.gather(
                *(submit(i % N_TENANTS, s, "story.txt") for i, s in enumerate(stories))
            )
            await settle([*first, *human])
            async with stack.client(await stack.admin()) as admin:
                await decide_waiting(stack, admin, list(human))
            # Copies come once their originals are coded, each from another tenant.
            copies = await asyncio.gather(
                *(
                    submit((i + 1) % N_TENANTS, as_jpeg(originals[i]), "copy.jpg")
                    for i in range(N_COPIES)
                )
            )
            everyone = [*first, *human, *copies]
            settled = await settle(everyone)
            for record_id in human:
                settled[record_id] = await wait_status(
                    clients[owner[record_id]], record_id, "CODED", timeout_s=120
                )
        finally:
            for client in clients:
                await client.aclose()
        async with stack.hub.engine.connect() as conn:
            leaves = Counter(
                (await conn.execute(sa.select(avcc_log_leaves.c.entry_key))).scalars().all()
            )
            reports = Counter(
                (await conn.execute(sa.select(avcc_review_reports.c.record_id))).scalars().all()
            )
            moves = (
                await conn.execute(sa.select(avcc_record_events).order_by(avcc_record_events.c.id))
            ).all()
        records = {r["id"]: r for r in await stack.records()}

    assert len(everyone) == 200 and len(records) == 200
    statuses = Counter(str(s["status"]) for s in settled.values())
    assert statuses == {"CODED": N_ORIGINALS + N_HUMAN, "REJECTED": N_COPIES}, statuses
    coded = [r for r in records.values() if r["status"] == "CODED"]
    assert len({r["avcc_code"] for r in coded}) == len(coded)
    assert all(leaves[f"copyright_main:{r['id']}"] == 1 for r in coded)
    assert sum(leaves.values()) == len(coded)
    assert all(str(r["report_hash"]).startswith("sha256:") for r in records.values())
    assert all(reports[i] == (2 if i in human else 1) for i in records)
    for record_id, row in records.items():
        mine = [m for m in moves if m.record_id == record_id]
        expected = HUMAN_FLOW if record_id in human else FLOW if row["status"] == "CODED" else None
        if expected is None:
            assert [m.to_status for m in mine] == ["APPLIED", "REJECTED"]
            assert str(row["status_reason"]).startswith("duplicate: of coded work")
        else:
            assert [m.to_status for m in mine] == expected
        assert [m.status_version for m in mine] == list(range(len(mine)))
