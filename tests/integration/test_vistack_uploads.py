"""Source videos uploaded in parts, straight to the object store (the embedded engine's
signed URLs, the same protocol as S3's): parts re-signed and re-sent, a wrong part list
refused with the session left open, the join checked (size, sha256, a video container by its
first bytes), repeats answering the same, and a video made only of a completed, accepted
upload of the caller's own tenant. And ``aigc-hub vistack upload`` doing the same from a shell."""

from __future__ import annotations

import asyncio
import hashlib
import os
from pathlib import Path
from typing import Any

import httpx
from typer.testing import CliRunner

from aigc_hub.blobs.base import MiB
from aigc_hub.cli.main import app as cli
from tests.integration.test_avcc_cli import printed_json
from tests.support.hubs import make_broker
from tests.support.vistack import VistackStack, make_clip, send_upload, vistack_stack


async def _complete(client: httpx.AsyncClient, upload_id: str, parts: Any) -> httpx.Response:
    return await client.post(f"/v1/vistack/uploads/{upload_id}/complete", json={"parts": parts})


async def _create(client: httpx.AsyncClient, upload_id: str, key: str) -> httpx.Response:
    return await client.post(
        "/v1/vistack/videos",
        json={"upload_id": upload_id, "title": "parts"},
        headers={"Idempotency-Key": key},
    )


async def _objects(stack: VistackStack, prefix: str) -> list[str]:
    assert stack.hub.blobs is not None
    return [o.key async for o in stack.hub.blobs.list_objects(prefix)]


async def test_a_video_uploaded_in_parts_is_joined_checked_and_made_once(
    sqlite_url: str, tmp_path: Path
) -> None:
    # A real MP4 first (its container is what the check reads), then padding: 11 MiB, in
    # three parts of 5 MiB.
    clip = make_clip(tmp_path / "clip.mp4").read_bytes()
    data = clip + bytes(11 * MiB - len(clip))
    async with vistack_stack(
        sqlite_url, make_broker("embedded", tmp_path), tmp_path, groups=[]
    ) as stack:
        key, other = await stack.tenant("site"), await stack.tenant("other")
        async with stack.client(key) as client, stack.client(other) as stranger:
            sent = await send_upload(client, data, part_size=5 * MiB)
            upload_id, parts = sent["upload_id"], sent["parts"]
            assert [p["part_no"] for p in parts] == [1, 2, 3]

            # A part re-sent on a fresh URL (its first one ran out, say).
            fresh = await client.post(
                f"/v1/vistack/uploads/{upload_id}/parts", json={"part_nos": [2]}
            )
            assert fresh.status_code == 200, fresh.text
            assert fresh.json()["part_size"] == 0
            [again] = fresh.json()["parts"]
            put = await client.put(again["url"], content=data[5 * MiB : 10 * MiB])
            assert put.status_code < 300, put.text
            parts[1]["etag"] = put.headers["etag"].strip('"')
            nowhere = await client.post(
                f"/v1/vistack/uploads/{upload_id}/parts", json={"part_nos": [0, 99_999]}
            )
            assert nowhere.status_code == 422, nowhere.text

            # Not complete: no video yet.
            early = await _create(client, upload_id, "early")
            assert early.status_code == 409, early.text
            assert "not complete" in early.json()["detail"]
            # A part list the store refuses leaves the session open.
            wrong = [dict(parts[0], etag="0" * 32), *parts[1:]]
            refused = await _complete(client, upload_id, wrong)
            assert refused.status_code == 422, refused.text
            assert refused.json()["errors"][0]["field"] == "parts"
            # Another tenant's id is nobody's.
            assert (await _complete(stranger, upload_id, parts)).status_code == 404
            assert (await _create(stranger, upload_id, "stranger")).status_code == 404

            done = await _complete(client, upload_id, parts)
            assert done.status_code == 200, done.text
            assert (done.json()["status"], done.json()["size_bytes"]) == ("uploaded", len(data))
            repeated = await _complete(client, upload_id, parts)
            assert repeated.json() == done.json()
            closed = await client.post(
                f"/v1/vistack/uploads/{upload_id}/parts", json={"part_nos": [1]}
            )
            assert closed.status_code == 409, closed.text

            [source] = [k for k in await _objects(stack, "t/") if "/vistack/" in k]
            assert stack.hub.blobs is not None
            assert await stack.hub.blobs.get(source) == data

            made = await _create(client, upload_id, "first")
            assert made.status_code == 202, made.text
            assert made.json()["status"] == "pending"
            twice = await _create(client, upload_id, "second")
            assert twice.status_code == 409, twice.text


async def test_uploads_that_are_not_what_was_declared_are_rejected_with_the_reason(
    sqlite_url: str, tmp_path: Path
) -> None:
    clip = make_clip(tmp_path / "clip.mp4").read_bytes()
    async with vistack_stack(
        sqlite_url, make_broker("embedded", tmp_path), tmp_path, groups=[]
    ) as stack:
        key = await stack.tenant("site")
        async with stack.client(key) as client:

            async def rejected(data: bytes, **declared: Any) -> dict[str, Any]:
                body = {"size_bytes": len(data), **declared}
                started = await client.post("/v1/vistack/uploads", json=body)
                assert started.status_code == 201, started.text
                upload_id = started.json()["upload_id"]
                [part] = started.json()["upload"]["parts"]
                put = await client.put(part["url"], content=data)
                assert put.status_code < 300, put.text
                etag = put.headers["etag"].strip('"')
                done = await _complete(client, upload_id, [{"part_no": 1, "etag": etag}])
                assert done.status_code == 200, done.text
                assert done.json()["status"] == "rejected", done.text
                refused = await _create(client, upload_id, upload_id)
                assert refused.status_code == 422, refused.text
                assert refused.json()["errors"][0]["field"] == "upload_id"
                view: dict[str, Any] = done.json()
                return view

            noise = await rejected(os.urandom(64 * 1024))
            assert noise["reason"].startswith("unknown_format")
            image = await rejected(b"\x89PNG\r\n\x1a\n" + os.urandom(4096))
            assert image["reason"].startswith("not_a_video")
            checksum = await rejected(clip, sha256=hashlib.sha256(b"another file").hexdigest())
            assert checksum["reason"] == "checksum_mismatch"
            # Rejected sources are not kept.
            assert await _objects(stack, "t/") == []

            too_big = await client.post("/v1/vistack/uploads", json={"size_bytes": 3 << 30})
            assert too_big.status_code == 422, too_big.text
            assert too_big.json()["errors"][0]["field"] == "size_bytes"
            tiny_parts = await client.post(
                "/v1/vistack/uploads", json={"size_bytes": 11 * MiB, "part_size": 1024}
            )
            assert tiny_parts.status_code == 422, tiny_parts.text
            assert tiny_parts.json()["errors"][0]["field"] == "part_size"
            nothing = await client.post("/v1/vistack/uploads", json={"size_bytes": 0})
            assert nothing.status_code == 422, nothing.text
            unknown = await _create(client, "upl_" + "0" * 32, "unknown")
            assert unknown.status_code == 404, unknown.text


async def test_the_upload_command_sends_the_parts_and_makes_the_video(
    sqlite_url: str, tmp_path: Path
) -> None:
    clip = make_clip(tmp_path / "clip.mp4")
    still, empty = tmp_path / "still.png", tmp_path / "empty.mp4"
    still.write_bytes(b"\x89PNG\r\n\x1a\n" + os.urandom(4096))
    empty.write_bytes(b"")
    runner = CliRunner()
    async with vistack_stack(
        sqlite_url, make_broker("embedded", tmp_path), tmp_path, groups=[]
    ) as stack:
        key = await stack.tenant("site")
        common = ["--url", stack.api_url, "--api-key", key]

        def run(*args: str) -> Any:
            # In a thread: the CLI's blocking HTTP calls reach the API on this event loop.
            return asyncio.to_thread(runner.invoke, cli, ["vistack", *args, *common])

        made = await run("upload", str(clip), "--title", "from the shell")
        refused = await run("upload", str(still), "--title", "a still")
        nothing = await run("upload", str(empty), "--title", "nothing")
        async with stack.client(key) as client:
            listed = (await client.get("/v1/vistack/videos")).json()["items"]
    assert made.exit_code == 0, made.output
    video = printed_json(made.stdout)
    assert (video["title"], video["status"]) == ("from the shell", "pending")
    assert [v["video_id"] for v in listed] == [video["video_id"]]
    assert refused.exit_code == 2 and "not_a_video" in refused.stderr
    assert refused.stderr.strip().count("\n") == 0
    assert nothing.exit_code == 2 and "is empty" in nothing.stderr
