"""The routes of the Replicate, fal and Runway fakes, answering with recorded bodies.

Each route checks the vendor's auth header, applies the injected faults to API calls (the
recorded 429 with ``Retry-After``, the recorded 503, a create answered only after
``hang_s``), keeps jobs in :class:`~tests.support.vendor_fakes.VendorFake` and answers the
fixture of the job's current recorded state.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.support.vendor_fakes import FakeJob, Reply, Request, VendorFake, new_id, running

SIZES = {"16:9": (1280, 720), "9:16": (720, 1280), "1:1": (720, 720)}
PAGE = 10


def _faults(fake: VendorFake, request: Request, auth: str) -> Reply | None:
    if not request.headers.get("authorization", "").startswith(auth):
        return Reply(401, fake.fixture("error_401"))
    if fake.take("rate_limit_next"):
        after = fake.switches["retry_after_s"]
        return Reply(429, fake.fixture("error_429", retry_after=after), {"retry-after": str(after)})
    if fake.take("server_error_next"):
        return Reply(503, fake.fixture("error_503"))
    return None


def _created(fake: VendorFake, job: FakeJob) -> None:
    fake.add(job)
    if fake.take("accept_then_timeout_next"):
        time.sleep(float(fake.switches["hang_s"]))  # taken, but the answer comes too late


def _job(fake: VendorFake, job_id: str) -> FakeJob | None:
    with fake.lock:
        return fake.jobs.get(job_id)


# --- Replicate ----------------------------------------------------------------------------

REPLICATE_MODELS = {"kwaivgi/kling-v1.6-standard", "minimax/video-01"}


def replicate_prediction(fake: VendorFake, job: FakeJob, state: str | None = None) -> Any:
    state = state or fake.step(job)
    return fake.fixture(
        state, id=job.id, model=job.model, input=job.body["input"], webhook=job.webhook,
        output_url=fake.output_url(job), **fake.times(job),
    )  # fmt: skip


def replicate_route(fake: VendorFake, request: Request) -> Reply:
    parts = request.path.strip("/").split("/")
    if parts[0] == "outputs":
        return fake.serve_output(parts[1].removesuffix(".mp4"))
    if (refused := _faults(fake, request, "Bearer ")) is not None:
        return refused
    if request.method == "POST" and parts[:2] == ["v1", "models"] and parts[-1] == "predictions":
        model = "/".join(parts[2:-1])
        inputs = (request.body or {}).get("input") or {}
        if model not in REPLICATE_MODELS:
            return Reply(404, fake.fixture("error_404"))
        if inputs.get("duration", 5) not in (5, 10):
            return Reply(422, fake.fixture("error_422"))
        webhook = request.body.get("webhook")
        key = parse_qs(urlsplit(webhook).query).get("request_key", [None])[0] if webhook else None
        width, height = SIZES[inputs.get("aspect_ratio", "16:9")]
        job = FakeJob(new_id(), model, request.body, (width, height, inputs.get("duration", 6)))
        job.webhook, job.request_key = webhook, key
        _created(fake, job)
        return Reply(201, replicate_prediction(fake, job))
    if parts == ["v1", "predictions"] and request.method == "GET":
        return _replicate_list(fake, int(request.query.get("cursor", ["0"])[0]))
    job = _job(fake, parts[2]) if parts[:2] == ["v1", "predictions"] and len(parts) > 2 else None
    if job is None:
        return Reply(404, fake.fixture("error_404"))
    cancelable = fake.step(job) in fake.sequence[:-1]
    if request.method == "POST" and parts[-1] == "cancel" and cancelable:
        job.canceled_at = time.time()
    return Reply(200, replicate_prediction(fake, job))


def _replicate_list(fake: VendorFake, cursor: int) -> Reply:
    with fake.lock:
        jobs = sorted(fake.jobs.values(), key=lambda j: j.created, reverse=True)
    page = jobs[cursor : cursor + PAGE]
    items = [
        fake.fixture("list_item", id=j.id, model=j.model, status=fake.step(j).split("_")[-1],
                     **fake.times(j))
        for j in page
    ]  # fmt: skip
    body = fake.fixture("list", results=items)
    if cursor + PAGE < len(jobs):
        body["next"] = f"{fake.base_url}/v1/predictions?cursor={cursor + PAGE}"
    return Reply(200, body)


# --- fal ----------------------------------------------------------------------------------

FAL_ENDPOINTS = {
    "fal-ai/kling-video/v1.6/standard/text-to-video",
    "fal-ai/kling-video/v1.6/standard/image-to-video",
    "fal-ai/minimax/video-01",
    "fal-ai/minimax/video-01/image-to-video",
}


def fal_route(fake: VendorFake, request: Request) -> Reply:
    path = request.path.strip("/")
    parts = path.split("/")
    if parts[0] == "outputs":
        return fake.serve_output(parts[1].removesuffix(".mp4"))
    if (refused := _faults(fake, request, "Key ")) is not None:
        return refused
    if request.method == "POST" and path in FAL_ENDPOINTS:
        body = request.body or {}
        if body.get("duration", "5") not in ("5", "10"):
            return Reply(422, fake.fixture("error_422"))
        width, height = SIZES[body.get("aspect_ratio", "16:9")]
        job = FakeJob(
            new_id(), path, {"input": body}, (width, height, int(body.get("duration", 6)))
        )
        _created(fake, job)
        return Reply(200, fake.fixture("submit", id=job.id, app="/".join(parts[:2])))
    job = _job(fake, parts[3]) if len(parts) >= 4 and parts[2] == "requests" else None
    if job is None:
        return Reply(404, fake.fixture("error_404"))
    state, values = fake.step(job), {"id": job.id, "app": "/".join(parts[:2])}
    if parts[-1] == "status":
        return Reply(200, fake.fixture(state, **values))
    if parts[-1] == "cancel" and request.method == "PUT":
        if state == fake.sequence[-1]:
            return Reply(400, fake.fixture("cancel_already_completed"))
        job.canceled_at = time.time()
        return Reply(202, fake.fixture("cancel_requested"))
    if state != fake.sequence[-1]:
        return Reply(400, {"detail": "Request is still in progress"})
    size = fake.render(job.size).stat().st_size
    return Reply(200, fake.fixture("result", output_url=fake.output_url(job), file_size=size))


# --- Runway -------------------------------------------------------------------------------

RUNWAY_RATIOS = {"1280:720", "720:1280", "1104:832", "832:1104", "960:960", "1584:672"}


def runway_route(fake: VendorFake, request: Request) -> Reply:
    parts = request.path.strip("/").split("/")
    if parts[0] == "outputs":
        return fake.serve_output(parts[1].removesuffix(".mp4"))
    if (refused := _faults(fake, request, "Bearer ")) is not None:
        return refused
    if "x-runway-version" not in request.headers:
        return Reply(400, fake.fixture("error_400"))
    if request.method == "POST" and parts in (["v1", "image_to_video"], ["v1", "text_to_video"]):
        body = request.body or {}
        if body.get("ratio") not in RUNWAY_RATIOS or body.get("duration") not in (5, 10):
            return Reply(400, fake.fixture("error_400"))
        width, height = (int(n) for n in body["ratio"].split(":"))
        job = FakeJob(
            new_id(), str(body.get("model")), {"input": body}, (width, height, body["duration"])
        )
        _created(fake, job)
        return Reply(200, fake.fixture("create", id=job.id))
    job = _job(fake, parts[2]) if parts[:2] == ["v1", "tasks"] and len(parts) == 3 else None
    if job is None:
        return Reply(404, fake.fixture("error_404"))
    if request.method == "DELETE":
        if fake.step(job) == fake.sequence[-1]:
            with fake.lock:
                fake.jobs.pop(job.id, None)  # a finished task is deleted
        else:
            job.canceled_at = time.time()
        return Reply(204)
    values = {"id": job.id, "output_url": fake.output_url(job), **fake.times(job)}
    return Reply(200, fake.fixture(fake.step(job), **values))


# --- factories ----------------------------------------------------------------------------


@contextlib.contextmanager
def replicate_fake(tmp: Path, secret: str) -> Iterator[VendorFake]:
    sequence = ("prediction_starting", "prediction_processing", "prediction_succeeded")
    fake = VendorFake("replicate", replicate_route, tmp, sequence=sequence,
                      canceled="prediction_canceled", secret=secret)  # fmt: skip
    with running(fake, lambda: fake.send_webhooks(lambda j, s: replicate_prediction(fake, j, s))):
        yield fake


@contextlib.contextmanager
def fal_fake(tmp: Path) -> Iterator[VendorFake]:
    sequence = ("status_in_queue", "status_in_progress", "status_completed")
    fake = VendorFake("fal", fal_route, tmp, sequence=sequence, canceled="status_canceled")
    with running(fake):
        yield fake


@contextlib.contextmanager
def runway_fake(tmp: Path) -> Iterator[VendorFake]:
    sequence = ("task_pending", "task_running", "task_succeeded")
    fake = VendorFake("runway", runway_route, tmp, sequence=sequence, canceled="task_cancelled")
    with running(fake):
        yield fake
