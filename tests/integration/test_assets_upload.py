"""Direct upload on the local blob engine, through the real API on loopback: presigned parts
served by the hub's ``/blobs`` route, complete's checks (size, sha256, magic number), the
asynchronous probe to READY or REJECTED, per-tenant limits, tenant isolation, tampered and
expired URLs, and reference assets in task creation (SQLite and PostgreSQL)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import httpx
import pytest
import sqlalchemy as sa

from aigc_hub.core.clock import ManualClock
from aigc_hub.pipelines.generation.models import assets, credit_ledger, generation_tasks
from aigc_hub.store.engine import reader
from aigc_hub.testing import FAKE_MODEL
from tests.support import uploads
from tests.support.provider import require_ffmpeg
from tests.support.uploads import MiB, asset_stack

pytestmark = pytest.mark.ffmpeg


@pytest.fixture(scope="module")
def clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real 2 s H.264 MP4 (tens of kB)."""
    require_ffmpeg()
    return uploads.make_video(tmp_path_factory.mktemp("clip") / "clip.mp4")


@pytest.fixture(scope="module")
def big_clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same kind of MP4 grown to 12 MiB (three 5 MiB parts, the last shorter)."""
    require_ffmpeg()
    return uploads.make_video(tmp_path_factory.mktemp("big") / "big.mp4", 12 * MiB)


def _start_body(path: Path, **changes: object) -> dict[str, object]:
    body: dict[str, object] = {
        "filename": path.name,
        "content_type": "video/mp4",
        "size_bytes": path.stat().st_size,
        "sha256": uploads.sha256_of(path),
    }
    return body | changes


async def test_parts_upload_completes_and_the_probe_makes_it_ready(
    db_url: str, tmp_path: Path, big_clip: Path
) -> None:
    async with (
        asset_stack(db_url, tmp_path) as stack,
        stack.client(await stack.tenant("acme")) as api,
    ):
        done = await uploads.upload(api, big_clip, part_size=5 * MiB, fail_part=2)
        assert sorted(done.etags) == [1, 2, 3] and done.resent == [2]
        completed = await uploads.complete(api, done)
        assert completed.status_code == 200, completed.text
        assert completed.json()["status"] == "PROCESSING"
        assert completed.json()["content_type"] == "video/mp4"
        ready = await uploads.settled(api, done.asset_id)
        again = await uploads.complete(api, done)  # repeating complete: same asset
    assert ready["status"] == "READY", ready
    assert (ready["codec"], ready["width"], ready["height"]) == ("h264", 320, 180)
    assert ready["duration_ms"] == 2000 and ready["size_bytes"] == 12 * MiB
    assert ready["sha256"] == uploads.sha256_of(big_clip)
    assert again.status_code == 200 and again.json()["status"] == "READY"


async def test_a_wrong_checksum_is_rejected_at_complete(
    db_url: str, tmp_path: Path, clip: Path
) -> None:
    async with (
        asset_stack(db_url, tmp_path) as stack,
        stack.client(await stack.tenant("acme")) as api,
    ):
        done = await uploads.upload(api, clip, sha256="0" * 64)
        completed = await uploads.complete(api, done)
    assert completed.status_code == 200
    assert completed.json()["status"] == "REJECTED"
    assert completed.json()["status_reason"] == "checksum_mismatch"


async def test_the_probe_verifies_the_checksum_where_the_store_has_none(
    db_url: str, tmp_path: Path, clip: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """S3 keeps no whole-object sha256 after multipart: the probe handler checks it."""
    async with asset_stack(db_url, tmp_path) as stack:
        real_complete = stack.store.complete_multipart

        async def no_sha(*args: object, **kwargs: object) -> object:
            import dataclasses

            info = await real_complete(*args, **kwargs)  # type: ignore[arg-type]
            return dataclasses.replace(info, sha256=None)

        monkeypatch.setattr(stack.store, "complete_multipart", no_sha)
        async with stack.client(await stack.tenant("acme")) as api:
            done = await uploads.upload(api, clip, sha256="1" * 64)
            completed = await uploads.complete(api, done)
            assert completed.json()["status"] == "PROCESSING"
            settled = await uploads.settled(api, done.asset_id)
    assert (settled["status"], settled["status_reason"]) == ("REJECTED", "checksum_mismatch")


async def test_wrong_size_and_unknown_format_are_rejected_with_reasons(
    db_url: str, tmp_path: Path, clip: Path
) -> None:
    text = tmp_path / "notes.mp4"  # named like a video, bytes of a text file
    text.write_bytes(b"#EXTM3U\n#EXT-X-TARGETDURATION:1\nfile:///etc/passwd\n")
    async with (
        asset_stack(db_url, tmp_path) as stack,
        stack.client(await stack.tenant("acme")) as api,
    ):
        # declared one byte larger than what is sent
        started = await api.post(
            "/v1/assets/uploads", json=_start_body(clip, size_bytes=uploads.size_of(clip) + 1)
        )
        plan = started.json()
        part = plan["upload"]["parts"][0]
        async with httpx.AsyncClient(trust_env=False) as http:
            etag = await uploads.put_part(http, part, uploads.read(clip))
        sized = await api.post(
            f"/v1/assets/{plan['asset_id']}/complete",
            json={"parts": [{"part_no": 1, "etag": etag}]},
        )
        done = await uploads.upload(api, text)
        sniffed = await uploads.complete(api, done)
        fake = tmp_path / "fake.mp4"  # the MP4 magic number, no readable video behind it
        fake.write_bytes(b"\x00\x00\x00\x18ftypmp42" + b"\x00" * 4000)
        faked = await uploads.upload(api, fake)
        probed = await uploads.complete(api, faked)
        assert probed.json()["status"] == "PROCESSING"
        unreadable = await uploads.settled(api, faked.asset_id)
    assert sized.json()["status"] == "REJECTED"
    assert sized.json()["status_reason"].startswith("size_mismatch")
    assert sniffed.json()["status"] == "REJECTED"
    assert sniffed.json()["status_reason"].startswith("unknown_format")
    assert unreadable["status"] == "REJECTED"
    assert unreadable["status_reason"].startswith("unreadable")


async def test_refused_parts_keep_the_upload_open_and_a_skipped_part_is_rejected(
    db_url: str, tmp_path: Path, big_clip: Path
) -> None:
    async with (
        asset_stack(db_url, tmp_path) as stack,
        stack.client(await stack.tenant("acme")) as api,
    ):
        done = await uploads.upload(api, big_clip)
        wrong_etag = [{"part_no": n, "etag": "0" * 32} for n in done.etags]
        refused = await api.post(f"/v1/assets/{done.asset_id}/complete", json={"parts": wrong_etag})
        still = (await api.get(f"/v1/assets/{done.asset_id}")).json()
        outside = await api.post(f"/v1/assets/{done.asset_id}/parts", json={"part_nos": [0, 99]})
        completed = await uploads.complete(api, done)
        closed = await api.post(f"/v1/assets/{done.asset_id}/parts", json={"part_nos": [1]})
        # parts 1 and 3 alone join (a store allows gaps) into a file too short
        gap = await uploads.upload(api, big_clip)
        parts = [{"part_no": n, "etag": e} for n, e in gap.etags.items() if n != 2]
        skipped = await api.post(f"/v1/assets/{gap.asset_id}/complete", json={"parts": parts})
    assert refused.status_code == 400 and refused.json()["type"].endswith("/parts-rejected")
    assert still["status"] == "UPLOADING"
    assert outside.status_code == 422
    assert completed.json()["status"] == "PROCESSING"
    assert closed.status_code == 409 and closed.json()["type"].endswith("/upload-closed")
    assert skipped.json()["status"] == "REJECTED"
    assert skipped.json()["status_reason"].startswith("size_mismatch")


async def test_tenant_limits_refuse_with_their_own_problem_types(
    db_url: str, tmp_path: Path, clip: Path
) -> None:
    size = uploads.size_of(clip)
    limits = {
        "asset_max_bytes": size * 3,
        "asset_max_count": 2,
        "asset_max_total_bytes": int(size * 2.5),
    }
    async with (
        asset_stack(db_url, tmp_path, **limits) as stack,
        stack.client(await stack.tenant("acme")) as api,
    ):
        too_big = await api.post(
            "/v1/assets/uploads", json=_start_body(clip, size_bytes=size * 3 + 1)
        )
        first = await uploads.upload(api, clip)
        second = await uploads.upload(api, clip, sha256="0" * 64)
        over_count = await api.post("/v1/assets/uploads", json=_start_body(clip))
        # a rejected asset frees its place
        await uploads.complete(api, first)
        assert (await uploads.complete(api, second)).json()["status"] == "REJECTED"
        rows_before = await _asset_count(stack)
        over_total = await api.post(
            "/v1/assets/uploads", json=_start_body(clip, size_bytes=int(size * 1.6))
        )
        fits = await api.post("/v1/assets/uploads", json=_start_body(clip, size_bytes=size))
    assert too_big.status_code == 413 and too_big.json()["type"].endswith("/asset-too-large")
    assert over_count.status_code == 409
    assert over_count.json()["type"].endswith("/asset-count-limit")
    assert over_total.status_code == 429
    assert over_total.json()["type"].endswith("/asset-storage-quota")
    assert fits.status_code == 201
    assert rows_before == 2  # refused uploads wrote no row


async def _asset_count(stack: uploads.AssetStack) -> int:
    async with reader(stack.hub.engine) as conn:
        return int((await conn.execute(sa.select(sa.func.count()).select_from(assets))).scalar())


async def test_another_tenants_asset_is_not_found_everywhere(
    db_url: str, tmp_path: Path, clip: Path
) -> None:
    async with (
        asset_stack(db_url, tmp_path) as stack,
        stack.client(await stack.tenant("a")) as a,
        stack.client(await stack.tenant("b")) as b,
    ):
        done = await uploads.upload(a, clip)
        parts = [{"part_no": n, "etag": e} for n, e in done.etags.items()]
        answers = [
            await b.get(f"/v1/assets/{done.asset_id}"),
            await b.get(f"/v1/assets/{done.asset_id}/variants"),
            await b.post(f"/v1/assets/{done.asset_id}/parts", json={"part_nos": [1]}),
            await b.post(f"/v1/assets/{done.asset_id}/complete", json={"parts": parts}),
            await b.post(f"/v1/assets/{done.asset_id}/playback"),
            await b.get("/v1/assets/no-such-id"),
        ]
        mine = await a.get(f"/v1/assets/{done.asset_id}")
    assert [r.status_code for r in answers] == [404] * 6
    assert len({r.json()["detail"] for r in answers}) == 1  # unknown and foreign look alike
    assert mine.status_code == 200 and mine.json()["status"] == "UPLOADING"


def _with_query(url: str, **changes: str) -> str:
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query)) | changes
    return urlunsplit(parts._replace(query=urlencode(query)))


async def test_tampered_and_expired_local_urls_are_refused_and_fresh_ones_work(
    db_url: str, tmp_path: Path, clip: Path
) -> None:
    clock = ManualClock()
    data = uploads.read(clip)
    async with (
        asset_stack(db_url, tmp_path, clock=clock) as stack,
        stack.client(await stack.tenant("acme")) as api,
    ):
        started = await api.post("/v1/assets/uploads", json=_start_body(clip))
        plan = started.json()
        url = plan["upload"]["parts"][0]["url"]
        async with httpx.AsyncClient(trust_env=False) as http:
            tampered = [
                await http.put(_with_query(url, part="2"), content=data),
                await http.put(_with_query(url, sig="0" * 64), content=data),
                await http.put(_with_query(url, op="get"), content=data),
                await http.put(url.replace("/clip.mp4", "/other.mp4"), content=data),
                await http.get(url),  # signed for a part PUT, not a GET
            ]
            await clock.advance(3600 + 1)  # the part URLs' life (asset_upload_url_s)
            expired = await http.put(url, content=data)
            fresh = await api.post(f"/v1/assets/{plan['asset_id']}/parts", json={"part_nos": [1]})
            part = fresh.json()["parts"][0]
            resent = await http.put(part["url"], content=data)
    assert [r.status_code for r in tampered] == [403] * 5
    assert all(r.json()["type"].endswith("/signature-refused") for r in tampered)
    assert expired.status_code == 403 and expired.json()["type"].endswith("/signature-expired")
    assert resent.status_code == 200
    assert resent.headers["etag"].strip('"') == hashlib.md5(data).hexdigest()


async def test_bad_upload_requests_are_422_problems(
    db_url: str, tmp_path: Path, clip: Path
) -> None:
    async with (
        asset_stack(db_url, tmp_path) as stack,
        stack.client(await stack.tenant("acme")) as api,
    ):
        answers = [
            await api.post("/v1/assets/uploads", json=_start_body(clip, sha256="xyz")),
            await api.post("/v1/assets/uploads", json=_start_body(clip, size_bytes=0)),
            await api.post("/v1/assets/uploads", json=_start_body(clip, part_size=1024 * 1024)
                           | {"size_bytes": 20 * MiB}),
            await api.post("/v1/assets/uploads", json=_start_body(clip, filename="")),
            await api.post("/v1/assets/uploads", json=_start_body(clip, extra=1)),
        ]  # fmt: skip
    assert [r.status_code for r in answers] == [422] * 5
    assert all(r.headers["content-type"] == "application/problem+json" for r in answers)


async def _ready_asset(stack: uploads.AssetStack, api: httpx.AsyncClient, clip: Path) -> str:
    done = await uploads.upload(api, clip)
    await uploads.complete(api, done)
    assert (await uploads.settled(api, done.asset_id))["status"] == "READY"
    return done.asset_id


async def test_tasks_take_only_ready_reference_assets_of_their_tenant(
    db_url: str, tmp_path: Path, clip: Path
) -> None:
    task = {"model": FAKE_MODEL, "prompt": "a boat", "duration_s": 2, "resolution": "320x180"}
    async with (
        asset_stack(db_url, tmp_path) as stack,
        stack.client(await stack.tenant("a")) as a,
        stack.client(await stack.tenant("b")) as b,
    ):
        ready = await _ready_asset(stack, a, clip)
        theirs = await _ready_asset(stack, b, clip)
        pending = (await uploads.upload(a, clip)).asset_id  # still UPLOADING
        refused = {
            name: await a.post(
                "/v1/generation-tasks",
                json=task | {"reference_asset_ids": [ready, bad]},
                headers={"Idempotency-Key": f"k-{name}"},
            )
            for name, bad in (("unknown", "no-such"), ("foreign", theirs), ("pending", pending))
        }
        async with reader(stack.hub.engine) as conn:
            ledger_rows = (
                await conn.execute(sa.select(sa.func.count()).select_from(credit_ledger))
            ).scalar()
        created = await a.post(
            "/v1/generation-tasks",
            json=task | {"reference_asset_ids": [ready]},
            headers={"Idempotency-Key": "k-ok"},
        )
        async with reader(stack.hub.engine) as conn:
            params = (
                await conn.execute(sa.select(generation_tasks.c.normalized_params))
            ).scalar_one()
    for name, answer in refused.items():
        assert answer.status_code == 422, name
        (error,) = answer.json()["errors"]
        assert error["field"] == "body.reference_asset_ids", name
    assert "unknown asset id" in refused["foreign"].json()["errors"][0]["message"]
    assert "UPLOADING" in refused["pending"].json()["errors"][0]["message"]
    assert ledger_rows == 2  # the two grants: no task held credits
    assert created.status_code == 201, created.text
    assert params["reference_asset_ids"] == [ready]
