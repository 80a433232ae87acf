"""Generation's HTTP routes, mounted under ``/v1``: tasks and credits (seed 004 §3.6.2), and
the callback gateway ``POST /v1/callbacks/{provider}`` (§3.6.4, §3.7).

The callback gateway verifies (Standard Webhooks: id, timestamp within ±5 min, HMAC over
``id.timestamp.body``, rotatable secrets), deduplicates by webhook id, archives, and answers
202 at once. Applying is asynchronous: the archived delivery becomes one ``StatusObserved``
in the same transaction (outbox), handled by the one state handler. Anything not genuine
(including a signature header sent twice) is a 401, and a body not sent as
``application/json`` a 415, with no change.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Annotated, Any, Literal

import orjson
import pydantic
from fastapi import APIRouter, Depends, FastAPI, Query, Request, Response

from aigc_hub.interfaces.http import kit
from aigc_hub.interfaces.http.kit import FoldedIdempotency, IdempotentRoute, Problem
from aigc_hub.moderation import ModerationUnavailable
from aigc_hub.pipelines.generation import ledger, services
from aigc_hub.pipelines.generation.state import STATE, Generation
from aigc_hub.pipelines.generation.states import TaskStatus
from aigc_hub.reliability import webhooks


@contextlib.asynccontextmanager
async def _warm_prompt_review(app: FastAPI) -> AsyncIterator[None]:
    """An API process loads the prompt review's model as it starts serving (in the
    background), so its first create does not wait for it; worker processes never load it."""
    gen: Generation = app.state.hub.state_of(STATE)
    gen.warm_up_moderation()
    yield


router = APIRouter(
    prefix="/generation-tasks",
    tags=["generation"],
    route_class=IdempotentRoute,
    lifespan=_warm_prompt_review,
)
credits_router = APIRouter(prefix="/credits", tags=["generation"])


async def _generation(request: Request) -> Generation:
    """The request's hub's Generation (a dependency: routes declare :data:`GenerationState`).

    ``async`` although it never awaits: FastAPI runs a plain ``def`` dependency in its thread
    pool, a thread round trip on every request of the creating route."""
    return kit.state_of(request, STATE)


#: The pipeline's state, as a route parameter.
GenerationState = Annotated[Generation, Depends(_generation)]

_COMMON: dict[int | str, dict[str, Any]] = {
    401: {"description": "missing or unknown API key"},
    429: {"description": "rate limited (Retry-After)"},
}
_TASK_ERRORS: dict[int | str, dict[str, Any]] = {
    **_COMMON,
    404: {"description": "no such task (also for another tenant's task ids)"},
}


def _not_found() -> Problem:
    return kit.not_found("task")


@router.post(
    "",
    status_code=201,
    response_model=services.TaskSnapshot,
    summary="Create a generation task",
    description="Validates, estimates the cost, reserves credits and queues the task in one "
    "transaction; answers the task snapshot (status QUEUED). Requires Idempotency-Key.",
    dependencies=[Depends(kit.admit("generation"))],
    responses={
        400: {"description": "Idempotency-Key missing or invalid"},
        401: {"description": "missing or unknown API key"},
        402: {"description": "not enough credits for the estimated cost"},
        409: {"description": "the same Idempotency-Key is still in flight"},
        422: {
            "description": "invalid or unsupported field (named in `errors`), or the prompt "
            "review refused it (type content-rejected: verdict, policy_version, hit_rules)"
        },
        429: {"description": "rate limited or the pipeline is behind (Retry-After)"},
        503: {"description": "content review unavailable: nothing created (Retry-After)"},
    },
)
async def create_task(
    body: services.CreateTask,
    who: kit.LimitedTenant,
    idem: FoldedIdempotency,
    gen: GenerationState,
) -> Response:
    # One write transaction: the key and its answer are stored by the service's own
    # transaction (folded mode), and the answer's bytes are rendered once, by _created.
    assert who.tenant_id is not None
    try:
        task = await services.create_task(
            gen,
            tenant_id=who.tenant_id,
            body=body,
            idempotency_key=idem.key,
            user_id=who.key_id,
            before_commit=idem.hook(_created),
        )
    except services.InvalidRequest as exc:
        raise Problem(
            422,
            f"invalid fields: body.{exc.field}",
            errors=[{"field": f"body.{exc.field}", "message": str(exc)}],
        ) from None
    except services.ContentRejected as exc:
        decision = exc.decision
        raise Problem(
            422,
            decision.reason,
            slug="content-rejected",
            verdict=decision.verdict.value,
            policy_version=decision.policy_version,
            hit_rules=list(decision.hit_rules),
        ) from None
    except ModerationUnavailable:
        raise Problem(
            503,
            "content review is unavailable; no task was created, retry with the same "
            "Idempotency-Key",
            slug="moderation-unavailable",
            retry_after_s=5,
        ) from None
    except ledger.InsufficientCredits as exc:
        raise Problem(
            402,
            str(exc),
            slug="insufficient-credits",
            required=exc.required,
            available=exc.available,
        ) from None
    # Not stored yet when the task existed already: the route class stores it, or replays.
    return idem.stored if idem.stored is not None else _created(task)


def _created(task: dict[str, Any]) -> Response:
    """The 201 answer for a task snapshot (its keys are TaskSnapshot's fields, in order),
    serialized once, without FastAPI's response-model round trip."""
    return Response(
        content=orjson.dumps(task),
        status_code=201,
        media_type="application/json",
        headers={"Location": f"/v1/generation-tasks/{task['task_id']}"},
    )


@router.get(
    "/{task_id}",
    response_model=services.TaskSnapshot,
    summary="Read a task's snapshot",
    responses=_TASK_ERRORS,
)
async def get_task(task_id: str, request: Request, who: kit.LimitedTenant) -> dict[str, Any]:
    assert who.tenant_id is not None
    try:
        return await services.get_task(
            kit.hub_of(request), tenant_id=who.tenant_id, task_id=task_id
        )
    except services.TaskNotFound:
        raise _not_found() from None


@router.get(
    "",
    response_model=services.TaskPage,
    summary="List tasks, newest first",
    responses={**_COMMON, 400: {"description": "unknown cursor"}},
)
async def list_tasks(
    request: Request,
    who: kit.LimitedTenant,
    status: Annotated[TaskStatus | None, Query(description="only tasks in this status")] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    cursor: Annotated[str | None, Query(description="next_cursor of the previous page")] = None,
) -> dict[str, Any]:
    assert who.tenant_id is not None
    try:
        items, next_cursor = await services.list_tasks(
            kit.hub_of(request),
            tenant_id=who.tenant_id,
            status=status.value if status else None,
            limit=limit,
            cursor=cursor,
        )
    except services.TaskNotFound:
        raise Problem(400, "unknown cursor", slug="invalid-cursor") from None
    return {"items": items, "next_cursor": next_cursor}


@router.post(
    "/{task_id}/cancel",
    status_code=202,
    response_model=services.TaskSnapshot,
    summary="Cancel a task",
    description="A QUEUED task ends CANCELED at once; a task at a provider moves to "
    "CANCEL_REQUESTED until the provider confirms (it may still succeed). Repeatable.",
    responses={**_TASK_ERRORS, 409: {"description": "the task already finished"}},
)
async def cancel_task(task_id: str, who: kit.LimitedTenant, gen: GenerationState) -> dict[str, Any]:
    assert who.tenant_id is not None
    try:
        return await services.cancel_task(gen, tenant_id=who.tenant_id, task_id=task_id)
    except services.TaskNotFound:
        raise _not_found() from None
    except services.CannotCancel as exc:
        raise Problem(409, str(exc), slug="task-finished", status_now=exc.status) from None


@credits_router.get("", summary="The tenant's credits", responses=_COMMON)
async def get_credits(request: Request, who: kit.LimitedTenant) -> services.CreditBalance:
    assert who.tenant_id is not None
    found = await services.credit_balance(kit.hub_of(request), who.tenant_id)
    return services.CreditBalance(available=found.available, reserved=found.reserved)


# --- the callback gateway ------------------------------------------------------------------

callbacks_router = APIRouter(prefix="/callbacks", tags=["callbacks"])


class CallbackAck(pydantic.BaseModel):
    """What became of a delivery: applied later (accepted), already seen, or not matched yet."""

    status: Literal["accepted", "duplicate", "unmatched"]


#: Largest webhook body accepted (provider job JSON is small).
MAX_BODY = 256 * 1024


def _require_json(request: Request) -> None:
    """A 415 problem unless the one ``Content-Type`` is ``application/json`` (charset utf-8
    at most): the signature covers bytes, and a body sent as anything else is not the JSON
    job update it claims to be."""
    sent = request.headers.getlist("content-type")
    media, _, params = (sent[0] if len(sent) == 1 else "").partition(";")
    charset = params.strip().lower().replace(" ", "")
    if media.strip().lower() != "application/json" or charset not in ("", "charset=utf-8"):
        raise Problem(
            415,
            "a webhook must be sent with Content-Type: application/json",
            slug="unsupported-media-type",
        )


@callbacks_router.post(
    "/{provider}",
    status_code=202,
    response_model=CallbackAck,
    summary="Receive a provider webhook",
    description="Standard Webhooks signature required (webhook-id, webhook-timestamp, "
    "webhook-signature, each exactly once) and Content-Type: application/json. "
    "Duplicates are acknowledged and ignored.",
    responses={
        401: {"description": "missing, malformed, stale or forged signature"},
        404: {"description": "unknown provider"},
        413: {"description": "body too large"},
        415: {"description": "not sent as application/json"},
    },
)
async def receive(provider: str, request: Request) -> dict[str, Any]:
    gen = kit.state_of(request, STATE)
    if provider not in gen.providers.adapters:
        raise kit.not_found("provider")
    _require_json(request)
    body = await request.body()
    if len(body) > MAX_BODY:
        raise Problem(413, "webhook body too large")
    verifier = gen.webhook_verifier(provider)
    if verifier is None:
        raise Problem(401, "webhooks from this provider are not accepted", slug="bad-webhook")
    try:
        verified = verifier.verify(request.headers, body, gen.hub.clock.now_ms() / 1000)
    except webhooks.WebhookVerificationError as exc:
        raise Problem(401, f"webhook refused: {exc.reason}", slug="bad-webhook") from None
    adapter = gen.providers.get(provider)
    try:
        result = adapter.parse_callback(body, request.headers)
    except Exception:
        raise Problem(
            422, "the webhook body is not a job update", slug="bad-webhook-body"
        ) from None
    status = await services.record_callback(
        gen, provider=provider, webhook_id=verified.id, body=body, result=result
    )
    return {"status": status}
