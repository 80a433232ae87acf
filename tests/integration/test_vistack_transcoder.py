"""The transcoder's refusals, through its real gRPC service: a missing source, a file that is
not a video, keys outside the request's tenant and a malformed prefix each get their status
code (the client's TranscodeRefused, never retried), and nothing is written. A source that is
not a video fails its video once, with the reason, in the DLQ. And several transcoders behind
one name: the worker's calls take them in turn."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from aigc_hub.pipelines.vistack.adapters.transcoder import TranscoderClient, TranscodeRefused
from aigc_hub.reliability.dlq import DeadLetterFilter
from tests.support.hubs import make_broker, wait_until
from tests.support.vistack import (
    make_clip,
    running_transcoder,
    upload_video,
    video_moves,
    video_row,
    vistack_stack,
)

SOURCE = "t/site/vistack/upl_1/source"


async def _process(
    client: TranscoderClient,
    *,
    source_key: str = SOURCE,
    output_prefix: str = "t/site/dash/vid_1/run/",
) -> None:
    await client.process(
        video_id="vid_1",
        tenant_id="site",
        source_key=source_key,
        output_prefix=output_prefix,
        cover_key="t/site/cover/vid_1/cover.jpg",
        deadline_s=60,
    )


async def test_the_transcoder_refuses_what_it_cannot_transcode_and_writes_nothing(
    tmp_path: Path,
) -> None:
    async with running_transcoder(tmp_path) as transcoder:
        client = TranscoderClient(transcoder.address)
        try:
            with pytest.raises(TranscodeRefused) as missing:
                await _process(client)
            assert missing.value.code == "source_missing"

            await transcoder.store.put(SOURCE, os.urandom(64 * 1024))
            with pytest.raises(TranscodeRefused) as noise:
                await _process(client)
            assert noise.value.code == "media_refused"

            with pytest.raises(TranscodeRefused) as foreign:
                await _process(client, source_key="t/other/vistack/upl_1/source")
            assert foreign.value.code == "invalid_request"
            assert "not under tenant 'site'" in foreign.value.reason

            with pytest.raises(TranscodeRefused) as prefix:
                await _process(client, output_prefix="t/site/dash/vid_1/run")
            assert prefix.value.code == "invalid_request"
        finally:
            await client.close()
        assert transcoder.calls == 4
        assert [o async for o in transcoder.store.list_objects("t/site/dash/")] == []
        assert [o async for o in transcoder.store.list_objects("t/site/cover/")] == []


async def test_calls_to_one_name_of_two_transcoders_take_them_in_turn(tmp_path: Path) -> None:
    async with (
        running_transcoder(tmp_path / "a") as first,
        running_transcoder(tmp_path / "b") as second,
    ):
        client = TranscoderClient(f"ipv4:{first.address},{second.address}")
        try:
            for _ in range(10):
                with pytest.raises(TranscodeRefused):
                    await _process(client)  # no source: the cheapest whole call
        finally:
            await client.close()
        assert first.calls + second.calls == 10
        assert min(first.calls, second.calls) >= 4, (first.calls, second.calls)


async def test_a_source_that_is_not_a_video_fails_its_video_once_with_the_reason(
    sqlite_url: str, tmp_path: Path
) -> None:
    clip = make_clip(tmp_path / "ok.mp4")
    # An MP4's first box, then noise: the API's sniffing takes it for a video, FFmpeg cannot.
    broken = tmp_path / "holiday.mp4"
    broken.write_bytes(clip.read_bytes()[:32] + os.urandom(256 * 1024))
    async with (
        running_transcoder(tmp_path) as transcoder,
        vistack_stack(
            sqlite_url,
            make_broker("embedded", tmp_path),
            tmp_path,
            blobs=transcoder.store,
            transcoder_address=transcoder.address,
        ) as stack,
    ):
        hub = stack.hub
        key = await stack.tenant("site")
        async with stack.client(key) as client:
            refused = (await upload_video(client, broken, "not a video"))["video_id"]
            fine = (await upload_video(client, clip, "fine"))["video_id"]

            async def ended() -> bool:
                statuses = {(await video_row(hub, v))["status"] for v in (refused, fine)}
                return statuses <= {"failed", "published"}

            await wait_until(ended, timeout=120)
            answer = await client.get(f"/v1/vistack/videos/{refused}")
            assert answer.status_code == 200, answer.text
            shown = answer.json()
            assert shown["status"] == "failed"
            assert shown["error_code"] == "media_refused"
            assert shown["manifest_url"] is None
        assert (await video_row(hub, fine))["status"] == "published"
        moves = await video_moves(hub, refused)
        assert (moves.count("processing"), moves[-1]) == (1, "failed")
        assert transcoder.calls == 2  # refused once, not retried
        [letter] = await hub.dlq.list(DeadLetterFilter(topic="transcode"))
        assert letter.key == refused
        assert "media_refused" in letter.error_message
