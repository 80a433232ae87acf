"""The provider adapter contract: one suite, every adapter (seed 004 §3.2.6, §3.7.1).

Join it by adding a param to ``harness``: a :class:`Harness` that builds the adapter, makes a
request the provider accepts, and injects faults by name (``rate_limit_next``,
``server_error_next``, ``accept_then_timeout_next``, ``expire_outputs``, ``render_seconds``).
An adapter tested against recorded responses injects them by serving the recorded 429 /
503 / hang; a harness that cannot inject one names it in ``unsupported`` and that test skips.

``unsupported`` also names what a provider honestly cannot do: ``idempotent_submit`` (no
idempotency key) and ``lookup_by_request_key`` (no way to find a job by a key of ours). Such
a provider is then held to the weaker promise: a key is never claimed NOT_FOUND (UNKNOWN).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from aigc_hub.pipelines.generation.adapters import fetch
from aigc_hub.pipelines.generation.adapters.base import (
    CapabilityError,
    GenerationRequest,
    NormalizedStatus,
    OutputAsset,
    ProviderAdapter,
    ProviderError,
    ProviderResult,
    RetryClass,
)
from aigc_hub.pipelines.generation.adapters.fal import FalAdapter
from aigc_hub.pipelines.generation.adapters.local import LocalProviderAdapter
from aigc_hub.pipelines.generation.adapters.replicate import ReplicateAdapter
from aigc_hub.pipelines.generation.adapters.runway import RunwayAdapter
from tests.support import provider as support
from tests.support import vendor_routes

pytestmark = pytest.mark.ffmpeg


@dataclasses.dataclass
class Harness:
    """How the suite drives one adapter and its provider."""

    name: str
    make_adapter: Callable[..., ProviderAdapter]  # kwargs: submit_timeout_s
    base_url: str
    webhook_secret: str
    inject: Callable[..., object]  # inject(**faults)
    reset: Callable[[], None]
    count_jobs: Callable[[str], int] | None = None  # jobs the provider holds for a request key
    unsupported: frozenset[str] = frozenset()
    #: a request the provider accepts (model, size, duration), and another size for the MP4
    defaults: dict[str, Any] = dataclasses.field(default_factory=dict)
    sized: dict[str, Any] = dataclasses.field(
        default_factory=lambda: {"duration_s": 2, "width": 320, "height": 180}
    )
    webhook_job: Callable[[support.Received], dict[str, Any]] = support.local_job
    reports_cost: bool = True  # does a finished job say what it cost?

    def request(self, **overrides: Any) -> GenerationRequest:
        values: dict[str, Any] = {
            "task_id": str(uuid.uuid4()),
            "request_key": f"rk-{uuid.uuid4().hex}",
            "mode": "text_to_video",
            "model": "local-v1",
            "prompt": "a paper boat on a rainy street",
            "duration_s": 1,
            "width": 160,
            "height": 90,
        }
        values.update(self.defaults)
        values.update(overrides)
        return GenerationRequest(**values)

    def needs(self, fault: str) -> None:
        if fault in self.unsupported:
            pytest.skip(f"{self.name} cannot do {fault}")

    def can(self, ability: str) -> bool:
        return ability not in self.unsupported


@contextlib.contextmanager
def _local(tmp: Path) -> Iterator[Harness]:
    support.require_ffmpeg()
    with support.provider_server(tmp / "provider") as server:

        def make(**kwargs: Any) -> ProviderAdapter:
            kwargs.setdefault("submit_timeout_s", 5.0)
            return LocalProviderAdapter(server.base_url, query_timeout_s=5.0, **kwargs)

        yield Harness(
            name="local",
            make_adapter=make,
            base_url=server.base_url,
            webhook_secret=server.secret,
            inject=server.faults,
            reset=server.reset_faults,
            count_jobs=lambda key: server.stats()["jobs_by_request_key"].get(key, 0),
        )


#: What the hosted vendors cannot do (see each adapter's module docstring).
NO_IDEMPOTENCY = frozenset({"idempotent_submit"})
NO_LOOKUP = NO_IDEMPOTENCY | {"lookup_by_request_key"}
KLING = {"duration_s": 5, "width": 1280, "height": 720}
PORTRAIT = {"duration_s": 5, "width": 720, "height": 1280}


@contextlib.contextmanager
def _replicate(tmp: Path) -> Iterator[Harness]:
    support.require_ffmpeg()
    with vendor_routes.replicate_fake(tmp, support.SECRET) as fake:

        def make(**kwargs: Any) -> ProviderAdapter:
            kwargs.setdefault("submit_timeout_s", 5.0)
            return ReplicateAdapter(
                fake.base_url, "r8_test", query_timeout_s=5.0, output_hosts=[fake.base_url],
                output=fetch.OutputFetch(trusted_origins=(fake.base_url,)), **kwargs,
            )  # fmt: skip

        yield Harness(
            name="replicate",
            make_adapter=make,
            base_url=fake.base_url,
            webhook_secret=support.SECRET,
            inject=fake.inject,
            reset=fake.reset,
            count_jobs=fake.count_jobs,
            unsupported=NO_IDEMPOTENCY,
            # the hub always sends a callback URL, and the request key rides in it: a dead
            # loopback one here (the fake's deliveries to it fail, as a refused webhook would)
            defaults={
                "model": "kwaivgi/kling-v1.6-standard",
                "callback_url": "http://127.0.0.1:9/v1/callbacks/replicate",
                **KLING,
            },
            sized=PORTRAIT,
            webhook_job=lambda received: received.event,  # the body is the prediction
        )


@contextlib.contextmanager
def _fal(tmp: Path) -> Iterator[Harness]:
    support.require_ffmpeg()
    with vendor_routes.fal_fake(tmp) as fake:

        def make(**kwargs: Any) -> ProviderAdapter:
            kwargs.setdefault("submit_timeout_s", 5.0)
            return FalAdapter(
                fake.base_url, "fal_test", query_timeout_s=5.0, output_hosts=[fake.base_url],
                output=fetch.OutputFetch(trusted_origins=(fake.base_url,)), **kwargs,
            )  # fmt: skip

        yield Harness(
            name="fal",
            make_adapter=make,
            base_url=fake.base_url,
            webhook_secret="",
            inject=fake.inject,
            reset=fake.reset,
            unsupported=NO_LOOKUP,
            defaults={"model": "fal-ai/kling-video/v1.6/standard", **KLING},
            sized=PORTRAIT,
            reports_cost=False,
        )


@contextlib.contextmanager
def _runway(tmp: Path) -> Iterator[Harness]:
    support.require_ffmpeg()
    with vendor_routes.runway_fake(tmp) as fake:

        def make(**kwargs: Any) -> ProviderAdapter:
            kwargs.setdefault("submit_timeout_s", 5.0)
            return RunwayAdapter(
                fake.base_url, "key_test", query_timeout_s=5.0, output_hosts=[fake.base_url],
                output=fetch.OutputFetch(trusted_origins=(fake.base_url,)), **kwargs,
            )  # fmt: skip

        yield Harness(
            name="runway",
            make_adapter=make,
            base_url=fake.base_url,
            webhook_secret="",
            inject=fake.inject,
            reset=fake.reset,
            unsupported=NO_LOOKUP,
            defaults={"model": "gen4.5", **KLING},
            sized=PORTRAIT,
            reports_cost=False,
        )


HARNESSES = {"local": _local, "replicate": _replicate, "fal": _fal, "runway": _runway}


@pytest.fixture(scope="module", params=sorted(HARNESSES))
def harness(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Harness]:
    with HARNESSES[request.param](tmp_path_factory.mktemp(request.param)) as h:
        yield h


@pytest.fixture
async def adapter(harness: Harness) -> AsyncIterator[ProviderAdapter]:
    harness.reset()
    made = harness.make_adapter()
    yield made
    await made.close()
    harness.reset()


async def submit(adapter: ProviderAdapter, request: GenerationRequest) -> ProviderResult:
    return await adapter.submit(await adapter.prepare_input(request))


async def until_terminal(
    adapter: ProviderAdapter, result: ProviderResult, request: GenerationRequest
) -> ProviderResult:
    deadline = time.monotonic() + 20
    while not result.normalized_status.terminal:
        assert time.monotonic() < deadline, f"job stuck in {result.normalized_status}"
        await asyncio.sleep(0.05)
        result = await adapter.query(
            provider_job_id=result.provider_job_id, request_key=request.request_key
        )
    return result


# --- pure parts ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"model": "no-such-model"}, "model"),
        ({"mode": "audio_to_video"}, "mode"),
        ({"duration_s": 0}, "duration_s"),
        ({"duration_s": 3600}, "duration_s"),
        ({"width": 161}, "resolution"),
    ],
)
async def test_capability_errors_name_the_field(
    adapter: ProviderAdapter, harness: Harness, overrides: dict[str, Any], field: str
) -> None:
    with pytest.raises(CapabilityError) as info:
        adapter.validate_capability(harness.request(**overrides))
    assert info.value.field == field


async def test_capabilities_list_models_and_cost_is_positive(
    adapter: ProviderAdapter, harness: Harness
) -> None:
    models = adapter.capabilities()
    assert models and all(m.max_duration_s > 0 and m.resolutions for m in models)
    request = harness.request()
    adapter.validate_capability(request)
    assert adapter.estimate_cost(request) > 0


# --- submit and query ---------------------------------------------------------------------


async def test_submit_then_query_by_id_and_by_request_key_agree(
    adapter: ProviderAdapter, harness: Harness
) -> None:
    request = harness.request()
    submitted = await submit(adapter, request)
    assert submitted.provider_job_id
    assert submitted.normalized_status in (NormalizedStatus.ACCEPTED, NormalizedStatus.RUNNING)
    assert submitted.estimated_cost == adapter.estimate_cost(request)
    by_id = await adapter.query(provider_job_id=submitted.provider_job_id, request_key="x")
    assert by_id.provider_job_id == submitted.provider_job_id
    assert by_id.raw_response_ref is None or "://" not in by_id.raw_response_ref
    by_key = await adapter.query(provider_job_id=None, request_key=request.request_key)
    if harness.can("lookup_by_request_key"):
        assert by_key.provider_job_id == submitted.provider_job_id
        assert by_key.raw_response_ref is None or "://" not in by_key.raw_response_ref
    else:  # it cannot tell, and must not pretend
        assert (by_key.normalized_status, by_key.provider_job_id) == (
            NormalizedStatus.UNKNOWN,
            None,
        )


async def test_the_same_request_key_twice_makes_one_job(
    adapter: ProviderAdapter, harness: Harness
) -> None:
    harness.needs("idempotent_submit")
    request = harness.request()
    first = await submit(adapter, request)
    second = await submit(adapter, request)
    assert first.provider_job_id == second.provider_job_id
    if harness.count_jobs is not None:
        assert harness.count_jobs(request.request_key) == 1


async def test_an_unknown_request_key_is_confirmed_not_found(
    adapter: ProviderAdapter, harness: Harness
) -> None:
    result = await adapter.query(provider_job_id=None, request_key=f"never-{uuid.uuid4().hex}")
    expected = NormalizedStatus.NOT_FOUND
    if not harness.can("lookup_by_request_key"):
        expected = NormalizedStatus.UNKNOWN  # never confirmed: the hub waits, then gives up
    assert result.normalized_status is expected
    assert result.provider_job_id is None


async def test_a_job_succeeds_and_its_output_is_the_requested_mp4(
    adapter: ProviderAdapter, harness: Harness, tmp_path: Path
) -> None:
    request = harness.request(**harness.sized, prompt="海上的纸船 at dusk")
    done = await until_terminal(adapter, await submit(adapter, request), request)
    assert done.normalized_status is NormalizedStatus.SUCCEEDED
    assert done.actual_cost == (adapter.estimate_cost(request) if harness.reports_cost else None)
    assert done.progress == 1.0 and done.observed_at_ms
    (asset,) = done.output_assets
    fetched = await adapter.fetch_output(asset, tmp_path / "out.mp4", max_bytes=50_000_000)
    assert fetched.size_bytes == fetched.path.stat().st_size > 0
    assert fetched.content_type == "video/mp4"
    assert fetched.sha256 == hashlib.sha256(fetched.path.read_bytes()).hexdigest()
    stream = support.ffprobe(fetched.path)
    size = (request.width, request.height)
    assert (stream["codec_name"], stream["width"], stream["height"]) == ("h264", *size)
    assert stream["pix_fmt"] == "yuv420p"
    assert abs(float(stream["duration"]) - request.duration_s) <= 0.2


async def test_a_signed_webhook_parses_to_the_job_state(
    adapter: ProviderAdapter, harness: Harness
) -> None:
    if not any(m.callbacks for m in adapter.capabilities()):
        pytest.skip(f"{harness.name} sends no callbacks we accept: its jobs are polled")
    with support.webhook_receiver(harness.webhook_job) as receiver:
        request = harness.request(callback_url=receiver.url)
        job_id = (await submit(adapter, request)).provider_job_id
        assert job_id
        final = receiver.final_for(job_id)
        verified = receiver.verify(final, harness.webhook_secret)
        assert verified.id
        result = adapter.parse_callback(final.body, final.headers)
        assert result.provider_job_id == job_id
        assert result.normalized_status is NormalizedStatus.SUCCEEDED
        assert result.actual_cost == adapter.estimate_cost(request)
        assert result.output_assets and result.observed_at_ms
        seen = [adapter.parse_callback(r.body, r.headers) for r in receiver.for_job(job_id)]
        times = [r.observed_at_ms or 0 for r in seen]
        assert times == sorted(times)  # later observations carry later provider times
        assert any(r.normalized_status is NormalizedStatus.RUNNING for r in seen)


async def test_parse_callback_refuses_a_malformed_body(adapter: ProviderAdapter) -> None:
    with pytest.raises(ProviderError) as info:
        adapter.parse_callback(b'{"type": "something.else"}', {})
    assert info.value.retry_class is RetryClass.PERMANENT


async def test_without_callbacks_every_callback_is_refused(
    adapter: ProviderAdapter, harness: Harness
) -> None:
    if any(m.callbacks for m in adapter.capabilities()):
        pytest.skip(f"{harness.name} sends callbacks")
    body = b'{"id": "x", "request_id": "x", "status": "SUCCEEDED"}'
    with pytest.raises(ProviderError) as info:
        adapter.parse_callback(body, {})
    assert info.value.retry_class is RetryClass.PERMANENT


async def test_cancel_stops_a_running_job(adapter: ProviderAdapter, harness: Harness) -> None:
    harness.needs("render_seconds")
    harness.inject(render_seconds=5)
    request = harness.request()
    submitted = await submit(adapter, request)
    assert submitted.provider_job_id
    answer = await adapter.cancel(submitted.provider_job_id)
    assert answer.normalized_status in (NormalizedStatus.CANCELED, NormalizedStatus.RUNNING)
    assert (await until_terminal(adapter, answer, request)).normalized_status is (
        NormalizedStatus.CANCELED
    )


# --- faults and their retry classes --------------------------------------------------------


async def test_429_is_rate_limited_with_retry_after(
    adapter: ProviderAdapter, harness: Harness
) -> None:
    harness.needs("rate_limit_next")
    harness.inject(rate_limit_next=1, retry_after_s=7)
    with pytest.raises(ProviderError) as info:
        await submit(adapter, harness.request())
    assert info.value.retry_class is RetryClass.RATE_LIMITED
    assert info.value.retry_after_s == 7


async def test_503_is_retryable(adapter: ProviderAdapter, harness: Harness) -> None:
    harness.needs("server_error_next")
    submitted = await submit(adapter, harness.request())
    harness.inject(server_error_next=1)
    with pytest.raises(ProviderError) as info:
        await adapter.query(provider_job_id=submitted.provider_job_id, request_key="any")
    assert info.value.retry_class is RetryClass.RETRYABLE


async def test_a_submit_taken_but_unanswered_is_unknown_then_found_by_request_key(
    harness: Harness,
) -> None:
    harness.needs("accept_then_timeout_next")
    harness.reset()
    harness.inject(accept_then_timeout_next=1, hang_s=1.5)
    adapter = harness.make_adapter(submit_timeout_s=0.3)
    try:
        request = harness.request()
        with pytest.raises(ProviderError) as info:
            await submit(adapter, request)
        assert info.value.retry_class is RetryClass.UNKNOWN_OUTCOME
        found = await adapter.query(provider_job_id=None, request_key=request.request_key)
        assert found.normalized_status is not NormalizedStatus.NOT_FOUND
        if not harness.can("lookup_by_request_key"):
            return  # UNKNOWN until the hub's give-up deadline: all it may honestly say
        assert found.provider_job_id
        if harness.count_jobs is not None:
            assert harness.count_jobs(request.request_key) == 1
    finally:
        await adapter.close()
        harness.reset()


async def test_an_expired_output_url_is_a_retryable_provider_error(
    adapter: ProviderAdapter, harness: Harness, tmp_path: Path
) -> None:
    harness.needs("expire_outputs")
    request = harness.request()
    done = await until_terminal(adapter, await submit(adapter, request), request)
    harness.inject(expire_outputs=True)
    stale = await adapter.query(provider_job_id=done.provider_job_id, request_key="x")
    with pytest.raises(ProviderError) as info:
        await adapter.fetch_output(stale.output_assets[0], tmp_path / "o.mp4", max_bytes=10**8)
    assert info.value.retry_class is RetryClass.RETRYABLE
    assert info.value.code == "output_expired"
    assert not (tmp_path / "o.mp4").exists()


@pytest.mark.parametrize(
    "swap",
    [
        lambda url, base: url.replace(base, "http://127.0.0.2:" + base.rsplit(":", 1)[1]),
        lambda url, base: url.replace(base, base.rsplit(":", 1)[0] + ":1"),
        lambda url, base: url.replace(base, base.replace("http://", "https://")),
        lambda url, base: url.replace(base, "http://169.254.169.254"),
        lambda url, base: "file:///etc/passwd",
        lambda url, base: url.replace("://", "://user:pass@", 1),
        lambda url, base: url.replace("://", "://user@", 1),
    ],
)
async def test_fetch_output_refuses_any_other_origin(
    adapter: ProviderAdapter,
    harness: Harness,
    tmp_path: Path,
    swap: Callable[[str, str], str],
) -> None:
    genuine = f"{harness.base_url}/outputs/job_x.mp4?expires=1&sig=0"
    asset = OutputAsset(url=swap(genuine, harness.base_url))
    with pytest.raises(ProviderError) as info:
        await adapter.fetch_output(asset, tmp_path / "o.mp4", max_bytes=10**6)
    assert info.value.retry_class is RetryClass.PERMANENT
    assert not (tmp_path / "o.mp4").exists()


async def test_fetch_output_enforces_max_bytes(
    adapter: ProviderAdapter, harness: Harness, tmp_path: Path
) -> None:
    request = harness.request()
    done = await until_terminal(adapter, await submit(adapter, request), request)
    with pytest.raises(ProviderError) as info:
        await adapter.fetch_output(done.output_assets[0], tmp_path / "o.mp4", max_bytes=100)
    assert info.value.code == "output_too_large"
    assert not (tmp_path / "o.mp4").exists()
