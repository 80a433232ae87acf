"""The local provider's HTTP API (FastAPI): jobs, signed outputs and, with faults on, ``/_*``.

Errors are ``{"error": {"code", "message"[, "field"]}}`` with a fitting status: 400 invalid
request, 404 unknown job, 409 a request key reused with other parameters, 429 (with
``Retry-After``) and 503 from faults.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import secrets
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Annotated, Any

import fastapi
import httpx
import pydantic
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse

from aigc_hub.core import errors
from aigc_hub.providers.local import catalog, outputs
from aigc_hub.providers.local.delivery import WebhookSender
from aigc_hub.providers.local.faults import FaultState
from aigc_hub.providers.local.jobs import Job, JobSpec, JobStore
from aigc_hub.providers.local.renderer import Renderer, RenderMode
from aigc_hub.providers.local.runner import JobRunner


@dataclasses.dataclass(frozen=True)
class ProviderConfig:
    """How ``aigc-hub provider serve`` runs."""

    webhook_secret: str
    data_dir: Path
    host: str = "127.0.0.1"
    port: int = 8100
    render_mode: RenderMode = "ffmpeg"
    max_concurrent: int = 2
    faults: bool = False  # expose /_faults and /_stats (tests only)
    output_ttl_s: int = 600

    @property
    def base_url(self) -> str:
        """Where clients reach this server (output URLs point here)."""
        # a wildcard bind is not an address a client can use: point URLs at loopback
        host = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(self.host, self.host)
        host = f"[{host}]" if ":" in host else host
        return f"http://{host}:{self.port}"


class JobCreate(pydantic.BaseModel):
    """``POST /v1/jobs`` body."""

    request_key: str = pydantic.Field(min_length=1, max_length=200)
    model: str
    mode: str
    prompt: str = pydantic.Field(max_length=catalog.MAX_PROMPT_CHARS)
    duration_s: int
    width: int
    height: int
    callback_url: pydantic.AnyHttpUrl | None = None


class ApiError(errors.HubError):
    """An error answer of the API."""

    def __init__(self, status: int, code: str, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status, self.code, self.extra = status, code, extra
        self.headers: dict[str, str] = {}


def _error_response(exc: ApiError) -> JSONResponse:
    body = {"error": {"code": exc.code, "message": str(exc), **exc.extra}}
    return JSONResponse(body, status_code=exc.status, headers=exc.headers)


class Provider:
    """The server's parts, built at start-up and closed at shutdown."""

    def __init__(self, config: ProviderConfig, http: httpx.AsyncClient) -> None:
        self.config = config
        self.faults = FaultState()
        self.signer = outputs.OutputSigner(
            secrets.token_bytes(32), config.base_url, config.output_ttl_s
        )
        self.sender = WebhookSender(config.webhook_secret, self.faults, http)
        self.store = JobStore(on_change=self._announce)
        renderer = Renderer(
            config.data_dir, mode=config.render_mode, max_concurrent=config.max_concurrent
        )
        self.runner = JobRunner(
            self.store, renderer, self.faults, config.data_dir / "outputs", config.max_concurrent
        )

    def show(self, job: Job) -> dict[str, Any]:
        """The job's JSON (output URL minted now)."""
        return outputs.job_json(job, self.signer, expire_outputs=self.faults.faults.expire_outputs)

    def _announce(self, job: Job) -> None:
        if job.spec.callback_url:
            self.sender.publish(
                job.id, job.spec.callback_url, job.sequence, self.show(job), final=job.terminal
            )

    async def close(self) -> None:
        """Stop jobs, then deliveries."""
        await self.runner.close()
        await self.sender.close()


def _provider(request: fastapi.Request) -> Provider:
    provider: Provider = request.app.state.provider
    return provider


ProviderDep = Annotated[Provider, fastapi.Depends(_provider)]


async def _api_faults(request: fastapi.Request, provider: ProviderDep) -> None:
    """Injected latency, 429 and 503 for every API call (all off unless a test set them)."""
    state = provider.faults
    if request.method == "POST" and request.url.path == "/v1/jobs":
        state.submits += 1
    if state.faults.latency_ms:
        await asyncio.sleep(state.faults.latency_ms / 1000)
    if state.take("rate_limit_next"):
        error = ApiError(429, "rate_limited", "too many requests")
        error.headers["Retry-After"] = str(state.faults.retry_after_s)
        raise error
    if state.take("server_error_next"):
        raise ApiError(503, "unavailable", "the service is overloaded")


api = fastapi.APIRouter(prefix="/v1", dependencies=[fastapi.Depends(_api_faults)])


def _job_or_404(provider: Provider, job_id: str) -> Job:
    job = provider.store.get(job_id)
    if job is None:
        raise ApiError(404, "job_not_found", f"no job {job_id!r}")
    return job


@api.post("/jobs", status_code=201)
async def submit(
    body: JobCreate,
    provider: ProviderDep,
    response: fastapi.Response,
    idempotency_key: Annotated[str | None, fastapi.Header()] = None,
) -> dict[str, Any]:
    """Create a job, or return the one already taken under ``request_key`` (200)."""
    if idempotency_key is not None and idempotency_key != body.request_key:
        raise ApiError(400, "idempotency_key_mismatch", "Idempotency-Key differs from request_key")
    bad = catalog.invalid_field(body.model, body.mode, body.duration_s, body.width, body.height)
    if bad is not None:
        raise ApiError(400, "unsupported_parameter", bad[1], field=bad[0])
    spec = JobSpec(
        request_key=body.request_key,
        model=body.model,
        mode=body.mode,
        prompt=body.prompt,
        duration_s=body.duration_s,
        width=body.width,
        height=body.height,
        callback_url=str(body.callback_url) if body.callback_url else None,
    )
    job, created = provider.store.create_or_get(spec)
    if not created:
        if job.spec != spec:
            raise ApiError(
                409, "idempotency_key_reused", "this request_key was used with other parameters"
            )
        response.status_code = 200
        return provider.show(job)
    provider.runner.start(
        job, fail=provider.faults.take("fail_next"), black=provider.faults.take("black_next")
    )
    if provider.faults.take("accept_then_timeout_next"):
        await asyncio.sleep(provider.faults.faults.hang_s)  # taken, but the answer is late
    return provider.show(job)


@api.get("/jobs/{job_id}")
async def get_job(job_id: str, provider: ProviderDep) -> dict[str, Any]:
    """The job's current state."""
    return provider.show(_job_or_404(provider, job_id))


@api.get("/jobs")
async def list_jobs(provider: ProviderDep, request_key: str | None = None) -> dict[str, Any]:
    """``{"jobs": [...]}``: the job of ``request_key`` (empty: never taken), or the last 100."""
    if request_key is not None:
        jobs = provider.store.by_request_key(request_key)
    else:
        jobs = [j for j in (provider.store.get(i) for i in provider.store.ids()[-100:]) if j]
    return {"jobs": [provider.show(job) for job in jobs]}


@api.post("/jobs/{job_id}/cancel")
async def cancel_job(job_id: str, provider: ProviderDep) -> dict[str, Any]:
    """Cancel a queued or running job; a finished job is returned unchanged."""
    job = _job_or_404(provider, job_id)
    provider.runner.cancel(job)
    return provider.show(job)


outputs_router = fastapi.APIRouter()


@outputs_router.get("/outputs/{name}", response_model=None)
async def get_output(
    name: str, provider: ProviderDep, expires: str = "", sig: str = ""
) -> FileResponse | JSONResponse:
    """The clip behind a signed URL: 403 when forged, 410 when expired."""
    job_id = name.removesuffix(".mp4")
    try:
        provider.signer.check(job_id, expires, sig)
    except outputs.OutputRefused as exc:
        return _error_response(ApiError(exc.status, exc.code, "output URL refused"))
    job = provider.store.get(job_id)
    if job is None or job.output_path is None or not name.endswith(".mp4"):
        return _error_response(ApiError(404, "output_not_found", "no such output"))
    return FileResponse(job.output_path, media_type=outputs.CONTENT_TYPE)


faults_router = fastapi.APIRouter(prefix="/_faults")


@faults_router.post("")
async def set_faults(changes: dict[str, Any], provider: ProviderDep) -> dict[str, Any]:
    """Merge fault switches; answers the switches now in force."""
    try:
        return provider.faults.merge(changes).model_dump()
    except pydantic.ValidationError as exc:
        raise ApiError(400, "invalid_faults", str(exc.errors(include_url=False))) from None


@faults_router.get("")
async def get_faults(provider: ProviderDep) -> dict[str, Any]:
    """The switches now in force."""
    return provider.faults.faults.model_dump()


async def stats(provider: ProviderDep) -> dict[str, Any]:
    """Counters for tests: jobs, jobs per request key, submits, webhooks."""
    state = provider.faults
    return {
        "jobs": len(provider.store),
        "jobs_by_request_key": provider.store.counts_by_request_key(),
        "submits": state.submits,
        "webhooks_sent": state.webhooks_sent,
        "webhooks_failed": state.webhooks_failed,
        "webhooks_dropped": state.webhooks_dropped,
    }


def create_app(config: ProviderConfig) -> fastapi.FastAPI:
    """The provider's ASGI app; its parts start with the app's lifespan."""

    @contextlib.asynccontextmanager
    async def lifespan(app: fastapi.FastAPI) -> AsyncIterator[None]:
        async with httpx.AsyncClient(trust_env=False, follow_redirects=False) as http:
            provider = Provider(config, http)
            app.state.provider = provider
            try:
                yield
            finally:
                await provider.close()

    app = fastapi.FastAPI(title="aigc-hub local provider", lifespan=lifespan)

    @app.exception_handler(ApiError)
    async def _api_error(request: fastapi.Request, exc: ApiError) -> JSONResponse:
        return _error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: fastapi.Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        field = ".".join(str(p) for p in first.get("loc", ())[1:]) or "$"
        error = ApiError(
            400, "invalid_request", f"{field}: {first.get('msg', 'invalid')}", field=field
        )
        return _error_response(error)

    @app.get("/healthz")
    async def healthz() -> dict[str, bool]:
        return {"ok": True}

    app.include_router(api)
    app.include_router(outputs_router)
    if config.faults:
        app.include_router(faults_router)
        app.add_api_route("/_stats", stats, methods=["GET"])
    return app
