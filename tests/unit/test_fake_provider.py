"""The fake provider and fake probe of ``aigc_hub.testing``: the adapter contract, scripts,
and what they record. Pure: no hub, no network, no FFmpeg."""

from __future__ import annotations

from pathlib import Path

import pytest

from aigc_hub.media.probe import InvalidMedia, probe_video
from aigc_hub.pipelines.generation.adapters.base import (
    GenerationRequest,
    NormalizedStatus,
    OutputAsset,
    ProviderAdapter,
    ProviderError,
    RetryClass,
)
from aigc_hub.pipelines.generation.state import Generation
from aigc_hub.testing import (
    FAKE_MODEL,
    Cancel,
    FakeProbe,
    FakeProvider,
    JobScript,
    Step,
    Submit,
    fake_video,
)

N = NormalizedStatus


def request(key: str = "task-1-1", prompt: str = "a boat") -> GenerationRequest:
    return GenerationRequest(
        task_id="task-1",
        request_key=key,
        mode="text_to_video",
        model=FAKE_MODEL,
        prompt=prompt,
        duration_s=3,
        width=320,
        height=180,
    )


async def submit(provider: FakeProvider, key: str = "task-1-1", prompt: str = "a boat") -> str:
    result = await provider.submit(await provider.prepare_input(request(key, prompt)))
    assert result.provider_job_id is not None
    return result.provider_job_id


def test_the_fake_is_a_provider_adapter_and_the_default_probe_is_probe_video() -> None:
    provider = FakeProvider()
    assert isinstance(provider, ProviderAdapter)
    assert provider.estimate_cost(request()) == 3
    assert Generation.probe is probe_video  # production wiring unchanged


async def test_an_idempotent_provider_keeps_one_job_per_request_key() -> None:
    provider = FakeProvider()
    first, again = await submit(provider), await submit(provider)
    assert first == again
    assert len(provider.jobs_for_key("task-1-1")) == 1
    assert [c.method for c in provider.calls] == ["submit", "submit"]


async def test_a_provider_without_idempotency_makes_a_job_per_submit() -> None:
    provider = FakeProvider(idempotent=False)
    assert await submit(provider) != await submit(provider)
    assert len(provider.jobs_for_key("task-1-1")) == 2


async def test_submit_answers_follow_the_script_and_the_last_repeats() -> None:
    provider = FakeProvider()
    provider.script("a boat", JobScript(submit=[Submit.RATE_LIMITED, Submit.TIMEOUT_AFTER_ACCEPT]))
    prepared = await provider.prepare_input(request())
    with pytest.raises(ProviderError) as limited:
        await provider.submit(prepared)
    assert (limited.value.retry_class, limited.value.retry_after_s) == (RetryClass.RATE_LIMITED, 2)
    for _ in range(2):
        with pytest.raises(ProviderError) as lost:
            await provider.submit(prepared)
        assert lost.value.retry_class is RetryClass.UNKNOWN_OUTCOME
    assert len(provider.jobs_for_key("task-1-1")) == 1  # the timed-out submits made one job
    found = await provider.query(provider_job_id=None, request_key="task-1-1")
    assert found.normalized_status is N.RUNNING  # the default script's first step


async def test_a_request_key_script_wins_over_a_prompt_script() -> None:
    provider = FakeProvider()
    provider.script("a boat", JobScript(submit=[Submit.REJECT]))
    provider.script("task-1-2", JobScript(submit=[Submit.FINISH]))
    with pytest.raises(ProviderError):
        await submit(provider, key="task-1-1")
    await submit(provider, key="task-1-2")
    assert [j.status for j in provider.jobs_for_prompt("a boat")] == [N.SUCCEEDED]


async def test_queries_walk_the_steps_and_stop_at_a_final_status() -> None:
    provider = FakeProvider()
    steps = [Step(N.RUNNING, 0.4), Step(N.FAILED, error_code="capacity"), Step(N.SUCCEEDED)]
    provider.script("a boat", JobScript(steps=steps))
    job_id = await submit(provider)
    seen = [await provider.query(provider_job_id=job_id, request_key="") for _ in range(3)]
    assert [(r.normalized_status, r.progress) for r in seen] == [
        (N.RUNNING, 0.4), (N.FAILED, None), (N.FAILED, None),
    ]  # fmt: skip
    assert seen[1].provider_error_code == "capacity"
    assert [r.observed_at_ms for r in seen] == [2, 3, 3]  # the provider's clock orders them
    missing = await provider.query(provider_job_id=None, request_key="never-sent")
    assert missing.normalized_status is N.NOT_FOUND


async def test_a_provider_that_cannot_look_up_by_key_answers_unknown_never_not_found() -> None:
    provider = FakeProvider(lookup_by_request_key=False)
    job_id = await submit(provider)
    by_key = await provider.query(provider_job_id=None, request_key="task-1-1")
    never = await provider.query(provider_job_id=None, request_key="never-sent")
    assert by_key.normalized_status is never.normalized_status is N.UNKNOWN
    by_id = await provider.query(provider_job_id=job_id, request_key="task-1-1")
    assert by_id.normalized_status is N.RUNNING


@pytest.mark.parametrize(
    ("cancel", "status"),
    [(Cancel.STOP, N.CANCELED), (Cancel.IGNORE, N.ACCEPTED), (Cancel.FINISH, N.SUCCEEDED)],
)
async def test_cancel_answers_as_scripted(cancel: Cancel, status: NormalizedStatus) -> None:
    provider = FakeProvider()
    provider.script("a boat", JobScript(cancel=cancel))
    assert (await provider.cancel(await submit(provider))).normalized_status is status


async def test_fetch_serves_the_output_after_scripted_expiries_and_refuses_the_rest(
    tmp_path: Path,
) -> None:
    provider = FakeProvider()
    provider.script("a boat", JobScript(submit=[Submit.FINISH], expired_fetches=1))
    done = await provider.query(provider_job_id=await submit(provider), request_key="")
    (asset,) = done.output_assets
    dest = tmp_path / "out.mp4"
    with pytest.raises(ProviderError) as expired:
        await provider.fetch_output(asset, dest, max_bytes=10_000)
    assert (expired.value.retry_class, expired.value.code) == (
        RetryClass.RETRYABLE,
        "output_expired",
    )
    fetched = await provider.fetch_output(asset, dest, max_bytes=10_000)
    assert dest.read_bytes() == fake_video() and fetched.size_bytes == len(fake_video())
    with pytest.raises(ProviderError) as too_large:
        await provider.fetch_output(asset, dest, max_bytes=10)
    assert too_large.value.retry_class is RetryClass.PERMANENT
    with pytest.raises(ProviderError) as foreign:
        await provider.fetch_output(OutputAsset("https://example.com/x.mp4"), dest, max_bytes=10)
    assert foreign.value.retry_class is RetryClass.PERMANENT


async def test_callbacks_round_trip_and_a_malformed_one_is_permanent() -> None:
    provider = FakeProvider()
    (job,) = [provider.jobs[await submit(provider)]]
    provider.move(job, N.RUNNING, progress=0.7)
    parsed = provider.parse_callback(provider.callback_body(job), {})
    assert (parsed.provider_job_id, parsed.normalized_status, parsed.progress) == (
        job.id, N.RUNNING, 0.7,
    )  # fmt: skip
    with pytest.raises(ProviderError) as bad:
        provider.parse_callback(b'{"status": "RUNNING"}', {})
    assert bad.value.retry_class is RetryClass.PERMANENT


async def test_wait_for_calls_returns_once_the_call_happened() -> None:
    provider = FakeProvider()
    with pytest.raises(TimeoutError):
        await provider.wait_for_calls("submit", 1, timeout_s=0.01)
    await submit(provider)
    await provider.wait_for_calls("submit", 1, timeout_s=1)


async def test_the_fake_probe_reads_fake_videos_and_refuses_anything_else(tmp_path: Path) -> None:
    probe, video, other = FakeProbe(), tmp_path / "v.mp4", tmp_path / "x.mp4"
    video.write_bytes(fake_video(width=640, height=360, duration_ms=4000, codec="hevc"))
    other.write_bytes(b"\x00\x00\x00\x18ftypmp42 but not really")
    info = await probe(video)
    assert (info.width, info.height, info.duration_ms, info.codec) == (640, 360, 4000, "hevc")
    with pytest.raises(InvalidMedia):
        await probe(other)
    assert probe.probed == [video, other]
