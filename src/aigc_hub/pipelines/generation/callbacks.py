"""The callback gateway: ``POST /v1/callbacks/{provider}`` (seed 004 §3.6.4, §3.7).

Verify (Standard Webhooks: id, timestamp within ±5 min, HMAC over ``id.timestamp.body``,
rotatable secrets), deduplicate by webhook id, archive, answer 202 at once. Applying is
asynchronous: the archived delivery becomes one ``StatusObserved`` in the same transaction
(outbox), handled by the one state handler. Anything not genuine (including a signature
header sent twice) is a 401, and a body not sent as ``application/json`` a 415, with no change.
"""

from __future__ import annotations

from typing import Any, Literal

import pydantic
import sqlalchemy as sa
from fastapi import APIRouter, Request

from aigc_hub.core.envelope import Envelope
from aigc_hub.interfaces.http import kit
from aigc_hub.interfaces.http.kit import Problem
from aigc_hub.pipelines.generation import events
from aigc_hub.pipelines.generation.models import callback_events, provider_jobs
from aigc_hub.pipelines.generation.state import STATE
from aigc_hub.reliability import webhooks
from aigc_hub.store.dialects import dialect_of

router = APIRouter(prefix="/callbacks", tags=["callbacks"])


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


@router.post(
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
    hub = gen.hub
    secrets = gen.settings.webhook_secrets(provider)
    if provider not in gen.providers.adapters:
        raise kit.not_found("provider")
    _require_json(request)
    body = await request.body()
    if len(body) > MAX_BODY:
        raise Problem(413, "webhook body too large")
    if not secrets:
        raise Problem(401, "webhooks from this provider are not accepted", slug="bad-webhook")
    try:
        verifier: webhooks.WebhookVerifier = webhooks.StandardWebhooks(secrets)
        verified = verifier.verify(request.headers, body, hub.clock.now_ms() / 1000)
    except webhooks.WebhookVerificationError as exc:
        raise Problem(401, f"webhook refused: {exc.reason}", slug="bad-webhook") from None
    adapter = gen.providers.get(provider)
    try:
        result = adapter.parse_callback(body, request.headers)
    except Exception:
        raise Problem(
            422, "the webhook body is not a job update", slug="bad-webhook-body"
        ) from None
    now = hub.clock.now_ms()
    async with hub.transaction() as conn:
        archived = (
            await conn.execute(
                dialect_of(conn)
                .insert(callback_events)
                .values(
                    provider=provider,
                    webhook_id=verified.id,
                    provider_job_id=result.provider_job_id,
                    body=body,
                    received_at=now,
                    status="received",
                )
                .on_conflict_do_nothing()
                .returning(callback_events.c.id)
            )
        ).scalar_one_or_none()
        if archived is None:
            return {"status": "duplicate"}
        job = (
            await conn.execute(
                sa.select(provider_jobs).where(
                    provider_jobs.c.provider == provider,
                    provider_jobs.c.provider_job_id == result.provider_job_id,
                )
            )
        ).first()
        if job is None:
            # Before our submit answer was recorded: polling and reconciliation catch up.
            await conn.execute(
                sa.update(callback_events)
                .where(callback_events.c.id == archived)
                .values(status="unmatched")
            )
            return {"status": "unmatched"}
        observation = events.StatusObserved.of(
            result,
            task_id=job.task_id,
            attempt_id=job.attempt_id,
            provider=provider,
            source="callback",
        )
        observed = Envelope.new(
            events.STATUS_OBSERVED,
            observation.model_dump(),
            key=job.task_id,
            source="generation.callbacks",
            tenant_id=job.tenant_id,
            correlation_id=job.task_id,
        )
        await hub.outbox.add(conn, [observed])
        await conn.execute(
            sa.update(callback_events)
            .where(callback_events.c.id == archived)
            .values(status="applied")
        )
    return {"status": "accepted"}
