"""A scriptable, in-memory generation provider: the real ``ProviderAdapter`` contract, no
network, no threads, no sleeps.

Each task's prompt (or an attempt's request key) picks a :class:`JobScript`: what submit
answers, the statuses later queries walk through, what a cancel does, and the output bytes
served. The provider keeps one job per request key (submit is idempotent unless
``idempotent=False``) and records every call in :attr:`FakeProvider.calls`, so a test can
assert what the hub asked, e.g. that a timed-out submit was reconciled and not resent::

    provider = FakeProvider()
    provider.script("boat", JobScript(submit=[Submit.TIMEOUT_AFTER_ACCEPT]))
    ...
    assert len(provider.jobs_for_prompt("boat")) == 1
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
from collections.abc import Mapping
from pathlib import Path

from aigc_hub.pipelines.generation.adapters import base
from aigc_hub.pipelines.generation.adapters.base import (
    CapabilityError,
    FetchedFile,
    GenerationRequest,
    ModelCapability,
    NormalizedStatus,
    OutputAsset,
    PreparedInput,
    ProviderError,
    ProviderResult,
    RetryClass,
)
from aigc_hub.testing.scripts import Call, Cancel, FakeJob, JobScript, Submit

N = NormalizedStatus

#: The one model the fake serves (text and image to video, 1..60 s, these frame sizes).
FAKE_MODEL = "fake-v1"
FAKE_RESOLUTIONS = frozenset({(160, 90), (320, 180), (640, 360), (1280, 720)})


class FakeProvider:
    """:class:`~aigc_hub.pipelines.generation.adapters.base.ProviderAdapter` held in memory."""

    def __init__(
        self,
        name: str = "fake",
        *,
        default: JobScript | None = None,
        idempotent: bool = True,
        lookup_by_request_key: bool = True,
        credits_per_second: int = 1,
    ) -> None:
        self.name = name
        self.default = default or JobScript()
        self.idempotent = idempotent
        #: False: like a vendor that cannot search by request key, a lookup without a job id
        #: answers UNKNOWN (never a false NOT_FOUND).
        self.lookup_by_request_key = lookup_by_request_key
        self.credits_per_second = credits_per_second
        #: Every call received, oldest first.
        self.calls: list[Call] = []
        self.jobs: dict[str, FakeJob] = {}
        self._scripts: dict[str, JobScript] = {}
        self._submits: dict[str, int] = {}  # submit calls per script key
        self._called = asyncio.Condition()
        self._ids = itertools.count(1)  # never reused, even after forget()
        self.closed = False

    # -- scripting and inspection ----------------------------------------------------------

    def script(self, key: str, script: JobScript) -> None:
        """Use ``script`` for requests whose request key or prompt is ``key``."""
        self._scripts[key] = script

    def jobs_for_prompt(self, prompt: str) -> list[FakeJob]:
        """The jobs created for ``prompt``, oldest first."""
        return [j for j in self.jobs.values() if j.prompt == prompt]

    def jobs_for_key(self, request_key: str) -> list[FakeJob]:
        """The jobs created under ``request_key`` (one, unless the provider is not idempotent)."""
        return [j for j in self.jobs.values() if j.request_key == request_key]

    def calls_of(self, method: str) -> list[Call]:
        """The calls of one method, oldest first."""
        return [c for c in self.calls if c.method == method]

    def move(
        self,
        job: FakeJob,
        status: NormalizedStatus,
        *,
        progress: float | None = None,
        error_code: str | None = None,
    ) -> None:
        """Change a job as the provider would on its own (the next query or callback tells)."""
        job.status, job.progress, job.error_code = status, progress, error_code
        job.version += 1

    def forget(self, job: FakeJob) -> None:
        """Lose a job: lookups by its id or request key find nothing any more."""
        del self.jobs[job.id]

    def callback_body(self, job: FakeJob) -> bytes:
        """The webhook body the provider sends about ``job`` now (read by parse_callback)."""
        output = self._output_url(job) if job.status is N.SUCCEEDED else None
        return json.dumps(
            {"job": job.id, "status": job.status.value, "progress": job.progress,
             "error": job.error_code, "version": job.version, "output": output}
        ).encode()  # fmt: skip

    async def wait_for_calls(self, method: str, count: int, timeout_s: float = 10.0) -> None:
        """Return once ``method`` was called ``count`` times (TimeoutError after ``timeout_s``)."""
        async with asyncio.timeout(timeout_s), self._called:
            await self._called.wait_for(lambda: len(self.calls_of(method)) >= count)

    # -- the adapter contract: pure --------------------------------------------------------

    def capabilities(self) -> list[ModelCapability]:
        """The one fake model."""
        return [
            ModelCapability(
                model=FAKE_MODEL,
                modes=frozenset({"text_to_video", "image_to_video"}),
                max_duration_s=60,
                resolutions=FAKE_RESOLUTIONS,
                credits_per_second=self.credits_per_second,
            )
        ]

    def validate_capability(self, request: GenerationRequest) -> None:
        """Raise CapabilityError naming ``model``, ``duration_s`` or ``resolution``."""
        if request.model != FAKE_MODEL:
            raise CapabilityError("model", f"unknown model {request.model!r}")
        if not 1 <= request.duration_s <= 60:
            raise CapabilityError("duration_s", "must be 1..60 s")
        if (request.width, request.height) not in FAKE_RESOLUTIONS:
            raise CapabilityError("resolution", f"{request.width}x{request.height} not offered")

    def estimate_cost(self, request: GenerationRequest) -> int:
        """``credits_per_second`` × duration."""
        self.validate_capability(request)
        return request.duration_s * self.credits_per_second

    def parse_callback(self, body: bytes, headers: Mapping[str, str]) -> ProviderResult:
        """A :meth:`callback_body` as a result; anything else is PERMANENT."""
        try:
            event = json.loads(body)
            status = N(event["status"])
            progress = event.get("progress")
            return ProviderResult(
                provider_job_id=str(event["job"]),
                normalized_status=status,
                progress=float(progress) if progress is not None else None,
                provider_error_code=event.get("error"),
                observed_at_ms=int(event["version"]),
                output_assets=(
                    (OutputAsset(str(event["output"]), "video/mp4"),) if event.get("output") else ()
                ),
            )
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ProviderError(
                f"malformed callback: {exc}", retry_class=RetryClass.PERMANENT, code="malformed"
            ) from None

    def classify_error(self, error: BaseException, *, during: str) -> ProviderError:
        """A ProviderError as it is; a timeout during submit UNKNOWN_OUTCOME; else RETRYABLE."""
        if isinstance(error, ProviderError):
            return error
        if isinstance(error, TimeoutError) and during == "submit":
            return ProviderError(f"{during}: timed out", retry_class=RetryClass.UNKNOWN_OUTCOME)
        return ProviderError(f"{during}: {error}", retry_class=RetryClass.RETRYABLE)

    # -- the adapter contract: calls -------------------------------------------------------

    async def prepare_input(self, request: GenerationRequest) -> PreparedInput:
        """The request as the body (nothing to upload)."""
        self.validate_capability(request)
        return PreparedInput(request=request, body={"prompt": request.prompt})

    async def submit(self, prepared: PreparedInput) -> ProviderResult:
        """Create (or, idempotent, find) the job of the request key as the script says."""
        request = prepared.request
        await self._record(Call("submit", request_key=request.request_key))
        script, script_key = self._script_for(request.request_key, request.prompt)
        made = self._submits.get(script_key, 0)
        self._submits[script_key] = made + 1
        answer = script.submit[min(made, len(script.submit) - 1)]
        if answer is Submit.REJECT:
            raise ProviderError("rejected", retry_class=RetryClass.PERMANENT, code="invalid_input")
        if answer is Submit.RATE_LIMITED:
            raise ProviderError(
                "rate limited", retry_class=RetryClass.RATE_LIMITED, retry_after_s=2.0
            )
        if answer is Submit.UNAVAILABLE:
            raise ProviderError("unavailable", retry_class=RetryClass.RETRYABLE, code="http_503")
        if answer is Submit.TIMEOUT_BEFORE_ACCEPT:
            raise self.classify_error(TimeoutError(), during="submit")
        existing = self.jobs_for_key(request.request_key) if self.idempotent else []
        job = existing[0] if existing else self._create(request, script, answer)
        if answer is Submit.TIMEOUT_AFTER_ACCEPT:
            raise self.classify_error(TimeoutError(), during="submit")
        result = self._result(job, estimated=self.estimate_cost(request))
        if answer is Submit.UNRECOGNIZED and not existing:
            return ProviderResult(job.id, N.UNKNOWN, raw_status="warming_up")
        return result

    async def query(self, *, provider_job_id: str | None, request_key: str) -> ProviderResult:
        """The job by id, else by request key (NOT_FOUND when there is none, UNKNOWN when
        ``lookup_by_request_key`` is off); a job not finished first takes its next step."""
        await self._record(Call("query", request_key=request_key, job_id=provider_job_id))
        job = self.jobs.get(provider_job_id or "")
        if job is None and not self.lookup_by_request_key:
            return ProviderResult(None, N.UNKNOWN, raw_status="cannot_look_up")
        if job is None:
            found = self.jobs_for_key(request_key)
            if not found:
                return ProviderResult(None, N.NOT_FOUND, raw_status="absent")
            job = found[0]
        if not job.status.terminal and job.steps_taken < len(job.script.steps):
            step = job.script.steps[job.steps_taken]
            job.steps_taken += 1
            self.move(job, step.status, progress=step.progress, error_code=step.error_code)
        return self._result(job)

    async def cancel(self, provider_job_id: str) -> ProviderResult:
        """Apply the script's :class:`Cancel`; a finished job keeps its status."""
        await self._record(Call("cancel", job_id=provider_job_id))
        job = self.jobs.get(provider_job_id)
        if job is None:
            raise ProviderError("no such job", retry_class=RetryClass.PERMANENT, code="not_found")
        if not job.status.terminal:
            if job.script.cancel is Cancel.STOP:
                self.move(job, N.CANCELED, progress=job.progress)
            elif job.script.cancel is Cancel.FINISH:
                self.move(job, N.SUCCEEDED, progress=1.0)
        return self._result(job)

    async def fetch_output(self, asset: OutputAsset, dest: Path, *, max_bytes: int) -> FetchedFile:
        """Write the job's output to ``dest``; expired (RETRYABLE) as scripted; too large or
        a foreign URL PERMANENT."""
        prefix = f"fake://{self.name}/jobs/"
        job_id = asset.url.removeprefix(prefix).removesuffix("/output")
        await self._record(Call("fetch_output", job_id=job_id))
        job = self.jobs.get(job_id)
        if not asset.url.startswith(prefix) or job is None:
            raise ProviderError("not this provider's output", retry_class=RetryClass.PERMANENT)
        job.fetches += 1
        if job.fetches <= job.script.expired_fetches:
            raise ProviderError(
                "output URL expired", retry_class=RetryClass.RETRYABLE, code="output_expired"
            )
        data = job.script.output
        if len(data) > max_bytes:
            raise ProviderError(
                "output too large", retry_class=RetryClass.PERMANENT, code="too_large"
            )
        dest.write_bytes(data)  # noqa: ASYNC240 - a few bytes; no thread keeps it deterministic
        return FetchedFile(dest, len(data), hashlib.sha256(data).hexdigest(), "video/mp4")

    async def close(self) -> None:
        """Nothing to release; remembers it was called."""
        self.closed = True

    # -- internals -------------------------------------------------------------------------

    async def _record(self, call: Call) -> None:
        async with self._called:
            self.calls.append(call)
            self._called.notify_all()

    def _script_for(self, request_key: str, prompt: str) -> tuple[JobScript, str]:
        for key in (request_key, prompt):
            if key in self._scripts:
                return self._scripts[key], key
        return self.default, prompt

    def _create(self, request: GenerationRequest, script: JobScript, answer: Submit) -> FakeJob:
        status = {Submit.RUN: N.RUNNING, Submit.FINISH: N.SUCCEEDED}.get(answer, N.ACCEPTED)
        job = FakeJob(
            id=f"fake-job-{next(self._ids)}",
            request_key=request.request_key,
            prompt=request.prompt,
            script=script,
            status=status,
            progress=1.0 if status is N.SUCCEEDED else None,
            version=1,
        )
        self.jobs[job.id] = job
        return job

    def _output_url(self, job: FakeJob) -> str:
        return f"fake://{self.name}/jobs/{job.id}/output"

    def _result(self, job: FakeJob, *, estimated: int | None = None) -> ProviderResult:
        succeeded = job.status is N.SUCCEEDED
        failed = job.status is N.FAILED
        return ProviderResult(
            provider_job_id=job.id,
            normalized_status=job.status,
            progress=job.progress,
            retry_class=RetryClass.PERMANENT if failed else RetryClass.NONE,
            provider_error_code=job.error_code,
            output_assets=(OutputAsset(self._output_url(job), "video/mp4"),) if succeeded else (),
            estimated_cost=estimated,
            actual_cost=job.script.actual_cost if succeeded else None,
            raw_status=job.status.value.lower(),
            observed_at_ms=job.version,
        )


_: type[base.ProviderAdapter] = FakeProvider  # the fake satisfies the real contract
