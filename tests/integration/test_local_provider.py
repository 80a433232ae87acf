"""The local provider's own behaviour: webhook faults, failures, idempotency, renders, CLI."""

from __future__ import annotations

import asyncio
import hashlib
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from aigc_hub.pipelines.generation.adapters.base import (
    GenerationRequest,
    NormalizedStatus,
    RetryClass,
)
from aigc_hub.pipelines.generation.adapters.local import LocalProviderAdapter
from aigc_hub.providers.local import renderer
from tests.support import provider as support
from tests.support.provider import ProviderServer, WebhookReceiver

pytestmark = pytest.mark.ffmpeg


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProviderServer]:
    support.require_ffmpeg()
    tmp = tmp_path_factory.mktemp("instant")
    with support.provider_server(tmp / "provider", "--render-mode", "instant") as running:
        yield running


@pytest.fixture
def api(server: ProviderServer) -> Iterator[httpx.Client]:
    server.reset_faults()
    with server.http() as client:
        yield client
    server.reset_faults()


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    with support.webhook_receiver() as running:
        yield running


def job_body(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "request_key": f"rk-{uuid.uuid4().hex}",
        "model": "local-v1",
        "mode": "text_to_video",
        "prompt": "gulls over a harbour",
        "duration_s": 1,
        "width": 160,
        "height": 90,
    }
    body.update(overrides)
    return body


def run_job(api: httpx.Client, receiver: WebhookReceiver, **overrides: Any) -> str:
    """Submit a job reporting to ``receiver``; return its id once its final webhook is in."""
    created = api.post("/v1/jobs", json=job_body(callback_url=receiver.url, **overrides))
    assert created.status_code == 201, created.text
    job_id: str = created.json()["id"]
    receiver.final_for(job_id)
    return job_id


def test_every_change_is_a_signed_webhook_in_sequence_order(
    api: httpx.Client, receiver: WebhookReceiver
) -> None:
    job_id = run_job(api, receiver)
    support.wait_until(lambda: len(receiver.for_job(job_id)) >= 6, 5, "six webhooks")
    got = receiver.for_job(job_id)
    assert [r.job["status"] for r in got] == ["queued", "running"] + ["running"] * 3 + ["succeeded"]
    assert [r.job["progress"] for r in got[1:5]] == [0.0, 0.25, 0.5, 0.75]
    assert [r.job["sequence"] for r in got] == sorted(r.job["sequence"] for r in got)
    ids = [receiver.verify(r).id for r in got]
    assert len(set(ids)) == len(ids)


def test_duplicate_webhooks_repeat_the_same_webhook_id(
    api: httpx.Client, server: ProviderServer, receiver: WebhookReceiver
) -> None:
    server.faults(duplicate_webhooks=True)
    job_id = run_job(api, receiver)
    support.wait_until(lambda: len(receiver.for_job(job_id)) >= 12, 5, "twelve webhooks")
    ids = [r.headers["webhook-id"] for r in receiver.for_job(job_id)]
    assert all(ids.count(i) == 2 for i in ids)


def test_reordered_webhooks_deliver_progress_after_the_final_one(
    api: httpx.Client, server: ProviderServer, receiver: WebhookReceiver
) -> None:
    server.faults(reorder_webhooks=True)
    job_id = run_job(api, receiver)
    support.wait_until(lambda: len(receiver.for_job(job_id)) >= 6, 5, "six webhooks")
    got = [r.job for r in receiver.for_job(job_id)]
    assert got[0]["status"] == "succeeded"
    assert all(later["sequence"] < got[0]["sequence"] for later in got[1:])


def test_dropped_webhooks_never_arrive_but_the_job_still_finishes(
    api: httpx.Client, server: ProviderServer, receiver: WebhookReceiver
) -> None:
    server.faults(drop_webhooks=True)
    before = server.stats()["webhooks_dropped"]
    created = api.post("/v1/jobs", json=job_body(callback_url=receiver.url)).json()
    done = support.wait_until(
        lambda: api.get(f"/v1/jobs/{created['id']}").json()["status"] == "succeeded", 10, "done"
    )
    assert done
    support.wait_until(lambda: server.stats()["webhooks_dropped"] >= before + 6, 5, "drops")
    assert receiver.for_job(created["id"]) == []


def test_drop_a_counted_number_of_webhooks(
    api: httpx.Client, server: ProviderServer, receiver: WebhookReceiver
) -> None:
    server.faults(drop_webhooks=2)
    job_id = run_job(api, receiver)
    support.wait_until(lambda: len(receiver.for_job(job_id)) >= 4, 5, "four webhooks")
    assert receiver.for_job(job_id)[0].job["sequence"] == 3


def test_a_failing_receiver_gets_the_event_again_with_the_same_id(
    api: httpx.Client, receiver: WebhookReceiver
) -> None:
    receiver.fail_first = 2
    job_id = run_job(api, receiver)
    first = receiver.for_job(job_id)[0]
    assert first.job["sequence"] == 1
    assert receiver.requests >= 3


@pytest.mark.parametrize(
    ("code", "retry"),
    [("internal_error", RetryClass.RETRYABLE), ("content_rejected", RetryClass.PERMANENT)],
)
async def test_fail_next_ends_jobs_failed_with_the_provider_code(
    api: httpx.Client, server: ProviderServer, code: str, retry: RetryClass
) -> None:
    server.faults(fail_next=1, fail_code=code)
    adapter = LocalProviderAdapter(server.base_url)
    try:

        async def submit() -> str:
            request = GenerationRequest(task_id="t", **job_body())
            result = await adapter.submit(await adapter.prepare_input(request))
            assert result.provider_job_id
            return result.provider_job_id

        created = await submit()
        after = await submit()  # the fault is used up

        async def final(job_id: str) -> Any:
            for _ in range(400):
                result = await adapter.query(provider_job_id=job_id, request_key="x")
                if result.normalized_status.terminal:
                    return result
                await asyncio.sleep(0.025)
            raise AssertionError("job never finished")

        failed = await final(created)
        assert failed.normalized_status is NormalizedStatus.FAILED
        assert (failed.provider_error_code, failed.retry_class) == (code, retry)
        assert failed.actual_cost is None and not failed.output_assets
        assert (await final(after)).normalized_status is NormalizedStatus.SUCCEEDED
    finally:
        await adapter.close()


def test_a_reused_request_key_with_other_parameters_is_a_conflict(api: httpx.Client) -> None:
    body = job_body()
    assert api.post("/v1/jobs", json=body).status_code == 201
    assert api.post("/v1/jobs", json=body).status_code == 200
    clash = api.post("/v1/jobs", json={**body, "prompt": "something else"})
    assert clash.status_code == 409
    assert clash.json()["error"]["code"] == "idempotency_key_reused"
    mismatch = api.post("/v1/jobs", json=job_body(), headers={"Idempotency-Key": "other"})
    assert mismatch.status_code == 400


def test_stats_count_submits_and_jobs_per_request_key(
    api: httpx.Client, server: ProviderServer
) -> None:
    before = server.stats()
    body = job_body()
    server.faults(server_error_next=1)
    assert api.post("/v1/jobs", json=body).status_code == 503
    assert api.post("/v1/jobs", json=body).status_code == 201
    assert api.post("/v1/jobs", json=body).status_code == 200
    after = server.stats()
    assert after["submits"] - before["submits"] == 3
    assert after["jobs"] - before["jobs"] == 1
    assert after["jobs_by_request_key"][body["request_key"]] == 1


def test_latency_and_rate_limit_apply_to_every_api_call(
    api: httpx.Client, server: ProviderServer
) -> None:
    server.faults(rate_limit_next=2, retry_after_s=3)
    assert api.get("/v1/jobs", params={"request_key": "k"}).status_code == 429
    limited = api.get("/v1/jobs/nope")
    assert (limited.status_code, limited.headers["retry-after"]) == (429, "3")
    assert api.get("/v1/jobs/nope").status_code == 404


def test_output_urls_refuse_forgery_and_expire(api: httpx.Client, server: ProviderServer) -> None:
    body = job_body()
    job_id = api.post("/v1/jobs", json=body).json()["id"]
    job = support.wait_until(
        lambda: (j := api.get(f"/v1/jobs/{job_id}").json())["status"] == "succeeded" and j,
        10,
        "success",
    )
    url = job["output"]["url"]
    assert api.get(url).status_code == 200
    assert api.get(url.replace("sig=", "sig=0")).status_code == 403
    server.faults(expire_outputs=True)
    expired = api.get(f"/v1/jobs/{job_id}").json()["output"]["url"]
    assert api.get(expired).status_code == 410


def test_instant_mode_serves_one_cached_clip_per_size(api: httpx.Client) -> None:
    digests = set()
    for _ in range(2):
        job_id = api.post("/v1/jobs", json=job_body(prompt=uuid.uuid4().hex)).json()["id"]
        job = support.wait_until(
            lambda job_id=job_id: (j := api.get(f"/v1/jobs/{job_id}").json())["output"] and j,
            10,
            "output",
        )
        digests.add(hashlib.sha256(api.get(job["output"]["url"]).content).hexdigest())
    assert len(digests) == 1


def _prompt_for_source(index: int) -> str:
    return next(
        p
        for p in (f"prompt {n}" for n in range(1000))
        if hashlib.sha256(p.encode()).digest()[0] % 3 == index
    )


@pytest.mark.parametrize("index", [0, 1, 2])
@pytest.mark.parametrize("prompt_suffix", ["", " 一只狐狸 🦊 100% 'q' : \\ {x}"])
async def test_every_look_renders_a_valid_clip_whatever_the_prompt(
    tmp_path: Path, index: int, prompt_suffix: str
) -> None:
    support.require_ffmpeg()
    clips = renderer.Renderer(tmp_path)
    progress: list[float] = []
    prompt = _prompt_for_source(index) + prompt_suffix
    out = await clips.render(prompt, 160, 90, 1, tmp_path / "c.mp4", progress.append)
    stream = support.ffprobe(out)
    assert (stream["codec_name"], stream["width"], stream["height"]) == ("h264", 160, 90)
    assert abs(float(stream["duration"]) - 1.0) <= 0.2
    assert progress and progress == sorted(progress)
    assert await asyncio.to_thread(os.listdir, tmp_path) == ["c.mp4"]  # no leftovers


def test_provider_serve_help_names_its_options() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "aigc_hub", "provider", "serve", "--help"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
        env={"COLUMNS": "200", "PYTHONPATH": ":".join(sys.path)},
    ).stdout
    for option in ("--port", "--webhook-secret", "--render-mode", "--max-concurrent", "--faults"):
        assert option in out


def test_provider_serve_refuses_a_garbage_webhook_secret_in_one_line_before_listening() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "aigc_hub", "provider", "serve", "--webhook-secret", "whsec_x y!"],
        capture_output=True,
        text=True,
        timeout=30,
        env={"COLUMNS": "200", "PYTHONPATH": ":".join(sys.path)},
    )
    assert done.returncode == 2  # ExitCode.USAGE
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert lines[0].startswith("error: --webhook-secret (AIGC_HUB_PROVIDER_WEBHOOK_SECRET): ")
    assert "x y!" not in done.stderr  # the secret itself is never echoed
