"""avcc's human review queue in the console: the open queue, a work's page (facts, AI report,
preview, audit trail), **Claim** and the decision form.

Claims and decisions go through :mod:`aigc_hub.pipelines.avcc.human`, as the admin API's
``/v1/avcc/reviews`` does, with the same reviewer name (``admin:<key id>``), so a claim
made here is the same claim there. Actions answer with a redirect (POST/redirect/GET) to the
work's page, carrying a notice or the refusal's message in the query string: a refused claim
or decision is a message on the page, never an error status.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated
from urllib.parse import urlencode

import pydantic
from fastapi import APIRouter, Depends, Form, Path, Query, Request, Response
from fastapi.responses import HTMLResponse, RedirectResponse, StreamingResponse

from aigc_hub.blobs.base import BlobNotFound
from aigc_hub.bootstrap import Hub
from aigc_hub.core import errors
from aigc_hub.interfaces.console import review_facts
from aigc_hub.interfaces.console.auth import CheckedDep, ConsoleRoute, Operator, OperatorDep
from aigc_hub.interfaces.console.rendering import PREFIX, fmt_ms, page
from aigc_hub.interfaces.http.auth import hub_of
from aigc_hub.pipelines.avcc import human

#: Open works listed (the queue has no cursor: past this, decide some first).
QUEUE_LIMIT = 200
LEVELS = ("P", "G", "O")
NO_AVCC = "This hub does not run the avcc pipeline, so it has no human review queue."
#: The same bounds as the API's record ids.
RecordId = Annotated[int, Path(ge=1, le=2**62)]
HubDep = Annotated[Hub, Depends(hub_of)]

router = APIRouter(route_class=ConsoleRoute)


def _not_here(request: Request, who: Operator, message: str) -> Response:
    return page(request, "error.html", status_code=404, who=who, title="Not found", message=message)


def _work_url(record_id: int, **message: str) -> RedirectResponse:
    # Cut to what the page's query parameters accept (300 characters).
    query = urlencode({k: v[:300] for k, v in message.items() if v})
    target = f"{PREFIX}/reviews/{record_id}"
    return RedirectResponse(f"{target}?{query}" if query else target, status_code=303)


@router.get("/reviews", response_class=HTMLResponse)
async def review_queue(request: Request, who: OperatorDep, hub: HubDep) -> Response:
    avcc = review_facts.avcc_of(hub)
    if avcc is None:
        return _not_here(request, who, NO_AVCC)
    rows = await review_facts.open_queue(avcc, limit=QUEUE_LIMIT)
    return page(request, "reviews_list.html", who=who, rows=rows, limit=QUEUE_LIMIT)


@router.get("/reviews/{record_id}", response_class=HTMLResponse)
async def review_work(
    request: Request,
    record_id: RecordId,
    who: OperatorDep,
    hub: HubDep,
    notice: Annotated[str, Query(max_length=300)] = "",
    error: Annotated[str, Query(max_length=300)] = "",
) -> Response:
    avcc = review_facts.avcc_of(hub)
    if avcc is None:
        return _not_here(request, who, NO_AVCC)
    view = await review_facts.work_view(avcc, record_id)
    if view is None:
        return _not_here(request, who, f"Work {record_id} never waited for a reviewer.")
    return page(
        request,
        "review_work.html",
        who=who,
        view=view,
        mine=view.claim.held_by(who.actor),
        levels=LEVELS,
        notice=notice,
        error=error,
    )


@router.get("/reviews/{record_id}/work")
async def review_preview(
    request: Request, record_id: RecordId, who: OperatorDep, hub: HubDep
) -> Response:
    """The work's bytes with its sniffed content type, for still images only; served by the
    console itself, so the page links nothing outside the console."""
    avcc = review_facts.avcc_of(hub)
    work = await review_facts.queued_work(avcc, record_id) if avcc is not None else None
    if avcc is None or work is None or not work.previewable:
        return _not_here(request, who, f"Work {record_id} has no preview.")
    chunks = avcc.store.stream(work.object_key)
    try:
        # Read the first chunk before answering: a lost object is a 404, not a cut body.
        first = await anext(chunks, b"")
    except BlobNotFound:
        return _not_here(request, who, f"The store has lost work {record_id}.")

    async def body() -> AsyncIterator[bytes]:
        yield first
        async for chunk in chunks:
            yield chunk

    return StreamingResponse(
        body(),
        media_type=work.content_type,
        # The type was sniffed from the bytes at apply time: browsers must not guess again.
        headers={"X-Content-Type-Options": "nosniff", "Cache-Control": "private, no-store"},
    )


@router.post("/reviews/{record_id}/claim")
async def review_claim(record_id: RecordId, who: CheckedDep, hub: HubDep) -> Response:
    avcc = review_facts.avcc_of(hub)
    if avcc is None:
        return RedirectResponse(f"{PREFIX}/reviews", status_code=303)
    try:
        claimed = await human.claim(avcc, record_id=record_id, reviewer=who.actor)
    except (human.QueueEntryNotFound, human.ClaimRefused) as exc:
        return _work_url(record_id, error=_sentence(exc.message))
    until = fmt_ms(int(claimed["lease_until"]))
    return _work_url(record_id, notice=f"You hold work {record_id} until {until} UTC.")


@router.post("/reviews/{record_id}/decision")
async def review_decide(
    record_id: RecordId,
    who: CheckedDep,
    hub: HubDep,
    claim_token: Annotated[str, Form(max_length=100)] = "",
    decision: Annotated[str, Form(max_length=100)] = "",
    level: Annotated[str, Form(max_length=100)] = "",
    note: Annotated[str, Form(max_length=10_000)] = "",
) -> Response:
    avcc = review_facts.avcc_of(hub)
    if avcc is None:
        return RedirectResponse(f"{PREFIX}/reviews", status_code=303)
    if not claim_token:
        return _work_url(record_id, error=f"Claim work {record_id} before deciding it.")
    if decision not in ("approved", "rejected"):
        return _work_url(record_id, error="Approve or reject the work.")
    try:
        body = human.HumanDecision(
            claim_token=claim_token,
            decision=decision,
            # The level select is the approval's: a rejection grants none, whatever is picked.
            final_level=(level or None) if decision == "approved" else None,
            note=note,
        )
    except pydantic.ValidationError as exc:
        return _work_url(record_id, error=_invalid(exc))
    try:
        await human.decide(avcc, record_id=record_id, reviewer=who.actor, body=body)
    except (human.QueueEntryNotFound, human.ClaimRefused) as exc:
        return _work_url(record_id, error=_sentence(exc.message))
    except errors.InvalidInput as exc:
        return _work_url(record_id, error=_sentence(exc.message))
    done = f"approved at level {body.final_level}" if decision == "approved" else "rejected"
    return _work_url(record_id, notice=f"Work {record_id} {done}.")


def _sentence(message: str) -> str:
    """The domain's message as a sentence on the page (capitalised, ending with a stop)."""
    text = message.strip()
    text = text[:1].upper() + text[1:]
    return text if text.endswith((".", "!", "?")) else f"{text}."


def _invalid(exc: pydantic.ValidationError) -> str:
    """Which fields of the form were refused, and why, in one line."""
    problems = [f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()]
    return _sentence("; ".join(problems).replace("final_level", "level"))[:300]
