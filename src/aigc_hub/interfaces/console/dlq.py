"""DLQ pages: list with filters and cursor pages, one letter's envelope, replay, dismiss, bulk.

Every action goes through the same :class:`DeadLetterStore` and :class:`ReplayJobs` as the
admin API, with the same audit actor (``admin:<key id>``), so the console adds no second way
to change a dead letter. Actions answer with a redirect (POST/redirect/GET), carrying a short
notice in the query string.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
from dataclasses import dataclass
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, Form, Path, Query, Request, Response
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse

from aigc_hub.bootstrap import Hub
from aigc_hub.interfaces.console.auth import CheckedDep, ConsoleRoute, OperatorDep
from aigc_hub.interfaces.console.rendering import PREFIX, page
from aigc_hub.interfaces.http.admin import JobOut, replay_jobs
from aigc_hub.interfaces.http.auth import hub_of
from aigc_hub.reliability.dlq import (
    STATUS_CHOICES,
    DeadLetterFilter,
    DeadLetterNotFound,
    DeadLetterNotReplayable,
    DeadLetterStatus,
    status_filter,
)
from aigc_hub.reliability.replay_jobs import ReplayJobs

PAGE_SIZE = 50
STATUSES = STATUS_CHOICES
PENDING = DeadLetterStatus.PENDING.value
DeadLetterId = Annotated[int, Path(ge=1, le=2**63 - 1)]
HubDep = Annotated[Hub, Depends(hub_of)]
JobsDep = Annotated[ReplayJobs, Depends(replay_jobs)]

router = APIRouter(route_class=ConsoleRoute)


def _parse_time(text: str) -> int | None:
    """A ``datetime-local`` value (read as UTC) or epoch milliseconds; None when empty/bad."""
    text = text.strip()
    if not text:
        return None
    if text.isdigit():
        return int(text)
    try:
        at = dt.datetime.fromisoformat(text)
    except ValueError:
        return None
    return int(at.replace(tzinfo=at.tzinfo or dt.UTC).timestamp() * 1000)


@dataclass(frozen=True)
class Filters:
    """The DLQ filter as the form sends it (empty strings mean any)."""

    topic: str = ""
    consumer: str = ""
    pipeline: str = ""
    error_class: str = ""
    status: str = PENDING
    since: str = ""
    until: str = ""

    def to_filter(self, *, status: str | None = None) -> DeadLetterFilter:
        """The store's filter; ``status`` overrides the form's."""
        wanted = status or self.status
        return DeadLetterFilter(
            status=status_filter(wanted),
            topic=self.topic or None,
            consumer=self.consumer or None,
            pipeline=self.pipeline or None,
            error_class=self.error_class or None,
            since_ms=_parse_time(self.since),
            until_ms=_parse_time(self.until),
        )

    def query(self, **extra: str) -> str:
        """The filter as a query string (non-empty fields only), plus ``extra``."""
        fields = {k: v for k, v in vars(self).items() if v} | extra
        return urlencode(fields)

    @property
    def active(self) -> bool:
        """True when anything narrows the list beyond the status."""
        return any(v for k, v in vars(self).items() if k != "status")


def _filters(
    topic: Annotated[str, Query(max_length=200)] = "",
    consumer: Annotated[str, Query(max_length=200)] = "",
    pipeline: Annotated[str, Query(max_length=200)] = "",
    error_class: Annotated[str, Query(max_length=200)] = "",
    status: Annotated[str, Query(pattern=f"^({'|'.join(STATUSES)})$")] = PENDING,
    since: Annotated[str, Query(max_length=40)] = "",
    until: Annotated[str, Query(max_length=40)] = "",
) -> Filters:
    return Filters(topic, consumer, pipeline, error_class, status, since, until)


def _form_filters(
    topic: Annotated[str, Form(max_length=200)] = "",
    consumer: Annotated[str, Form(max_length=200)] = "",
    pipeline: Annotated[str, Form(max_length=200)] = "",
    error_class: Annotated[str, Form(max_length=200)] = "",
    since: Annotated[str, Form(max_length=40)] = "",
    until: Annotated[str, Form(max_length=40)] = "",
) -> Filters:
    return Filters(topic, consumer, pipeline, error_class, PENDING, since, until)


@router.get("/dlq", response_class=HTMLResponse)
async def dlq_list(
    request: Request,
    who: OperatorDep,
    hub: HubDep,
    filters: Annotated[Filters, Depends(_filters)],
    cursor: Annotated[int | None, Query(ge=1, le=2**63 - 1)] = None,
    notice: Annotated[str, Query(max_length=300)] = "",
    error: Annotated[str, Query(max_length=300)] = "",
) -> Response:
    flt = filters.to_filter()
    found = await hub.dlq.list(flt, limit=PAGE_SIZE + 1, after_id=cursor)
    letters = found[:PAGE_SIZE]
    next_cursor = letters[-1].id if len(found) > PAGE_SIZE else None
    pending = await hub.dlq.count(filters.to_filter(status=PENDING))
    return page(
        request,
        "dlq_list.html",
        who=who,
        letters=letters,
        filters=filters,
        statuses=STATUSES,
        pending=pending,
        next_url=f"{PREFIX}/dlq?{filters.query(cursor=str(next_cursor))}" if next_cursor else None,
        first_url=f"{PREFIX}/dlq?{filters.query()}" if cursor else None,
        notice=notice,
        error=error,
    )


def _envelope_view(value: bytes, parsed: Any) -> tuple[Any, str | None]:
    """The envelope as JSON, or None plus the raw bytes (base64) when it is not one."""
    if parsed is not None:
        return json.loads(parsed.to_bytes()), None
    return None, base64.b64encode(value).decode()


@router.get("/dlq/{dead_letter_id}", response_class=HTMLResponse)
async def dlq_detail(
    request: Request,
    dead_letter_id: DeadLetterId,
    who: OperatorDep,
    hub: HubDep,
    notice: Annotated[str, Query(max_length=300)] = "",
    error: Annotated[str, Query(max_length=300)] = "",
) -> Response:
    try:
        letter = await hub.dlq.get(dead_letter_id)
    except DeadLetterNotFound:
        return page(
            request,
            "error.html",
            status_code=404,
            who=who,
            title="Not found",
            message=f"No dead letter has id {dead_letter_id}.",
        )
    envelope, raw = _envelope_view(letter.value, letter.envelope())
    return page(
        request,
        "dlq_detail.html",
        who=who,
        letter=letter,
        envelope=envelope,
        raw=raw,
        notice=notice,
        error=error,
    )


def _back(target: str, **message: str) -> RedirectResponse:
    sep = "&" if "?" in target else "?"
    query = urlencode({k: v for k, v in message.items() if v})
    return RedirectResponse(f"{target}{sep}{query}" if query else target, status_code=303)


@router.post("/dlq/{dead_letter_id}/replay")
async def dlq_replay(dead_letter_id: DeadLetterId, who: CheckedDep, hub: HubDep) -> Response:
    try:
        await hub.dlq.replay(dead_letter_id, actor=who.actor)
    except DeadLetterNotFound:
        return _back(f"{PREFIX}/dlq", error=f"No dead letter has id {dead_letter_id}.")
    except DeadLetterNotReplayable as exc:
        return _back(f"{PREFIX}/dlq/{dead_letter_id}", error=exc.message)
    return _back(f"{PREFIX}/dlq", notice=f"Dead letter {dead_letter_id} replayed.")


@router.post("/dlq/{dead_letter_id}/dismiss")
async def dlq_dismiss(
    dead_letter_id: DeadLetterId,
    who: CheckedDep,
    hub: HubDep,
    reason: Annotated[str, Form(max_length=500)] = "",
) -> Response:
    changed = await hub.dlq.dismiss([dead_letter_id], actor=who.actor, reason=reason)
    if not changed:
        return _back(
            f"{PREFIX}/dlq/{dead_letter_id}", error="Only pending letters can be dismissed."
        )
    return _back(f"{PREFIX}/dlq", notice=f"Dead letter {dead_letter_id} dismissed.")


@router.post("/dlq/replay")
async def dlq_bulk_replay(
    who: CheckedDep,
    jobs: JobsDep,
    filters: Annotated[Filters, Depends(_form_filters)],
    max: Annotated[int, Form(ge=1, le=100_000)] = 1000,
) -> Response:
    job = await jobs.start(filters.to_filter(status=PENDING), max_items=max, actor=who.actor)
    return RedirectResponse(f"{PREFIX}/jobs/{job.id}?{filters.query()}", status_code=303)


# Before "/jobs/{job_id}", which would otherwise take "x.json" as an id.
@router.get("/jobs/{job_id}.json")
async def job_json(
    who: OperatorDep, jobs: JobsDep, job_id: Annotated[str, Path(max_length=64)]
) -> Response:
    job = await jobs.get(job_id)
    if job is None:
        return JSONResponse({"detail": "no such job"}, status_code=404)
    return JSONResponse(JobOut.of(job).model_dump())


@router.get("/jobs/{job_id}", response_class=HTMLResponse)
async def job_page(
    request: Request,
    who: OperatorDep,
    jobs: JobsDep,
    filters: Annotated[Filters, Depends(_filters)],
    job_id: Annotated[str, Path(max_length=64)],
) -> Response:
    job = await jobs.get(job_id)
    if job is None:
        return page(
            request, "error.html", status_code=404, who=who, title="Not found", message="No job."
        )
    return page(
        request,
        "job.html",
        who=who,
        job=JobOut.of(job),
        back_url=f"{PREFIX}/dlq?{filters.query()}",
    )
