"""Notifications: hints that a subject (a task…) changed, published like any other event.

A pipeline builds a :class:`Notification` when a fact changes (a status transition, a
progress step) and returns :func:`notification_envelope` from its handler, or adds it to the
outbox in its service transaction, so a notification is published only if its fact
committed. The SSE route streams them to the tenant. They are hints, never facts: a client
that missed some re-reads the subject's snapshot.

The backbone declares the event through :data:`pipeline`, a ``Pipeline("notifications")``
that the hub always includes, so no business pipeline is needed to know the schema.
"""

from __future__ import annotations

from typing import Any, Literal

import pydantic

from aigc_hub.core.envelope import Envelope
from aigc_hub.messaging.catalog import NOTIFICATION_TOPIC, backbone_catalog
from aigc_hub.pipeline import Pipeline

#: The topic notifications travel on (one of the backbone's own).
TOPIC = NOTIFICATION_TOPIC
#: The envelope event type; envelope types are dotted, so it is not the bare SSE name.
EVENT_TYPE = "notification.event"
#: Schema version of :class:`Notification`.
VERSION = 1
#: Where an envelope built without a cause says it came from.
SOURCE = "notifications"

#: The backbone's own pipeline: the notification topic and event schema, nothing else.
pipeline: Pipeline[None] = Pipeline("notifications")
pipeline.topic(backbone_catalog().get(TOPIC))


@pipeline.event(EVENT_TYPE, VERSION, topic=TOPIC)
class Notification(pydantic.BaseModel):
    """Something about one subject of one tenant changed; small, no secrets, no URLs."""

    tenant_id: str = pydantic.Field(min_length=1)
    subject_type: str = pydantic.Field(min_length=1, description="e.g. 'generation_task'")
    subject_id: str = pydantic.Field(min_length=1)
    #: ``status``/``progress``: the subject moved; ``messages``: items were added to it (a
    #: video's danmaku, in ``data``), for live feeds.
    kind: Literal["status", "progress", "messages"]
    status: str | None = None
    stage: str | None = None
    progress: float | None = pydantic.Field(default=None, ge=0.0, le=1.0)
    status_version: int | None = None
    occurred_at_ms: int = pydantic.Field(ge=0)
    data: dict[str, Any] = pydantic.Field(default_factory=dict)


def notification_envelope(
    notification: Notification, *, cause: Envelope | None = None, source: str | None = None
) -> Envelope:
    """The envelope announcing ``notification``, keyed by its subject id.

    With ``cause`` (the event being handled) trace and correlation ids carry over and the
    causation id is the cause's; its tenant, when set, must be the notification's
    (ValueError otherwise), so one tenant's work never notifies another.
    """
    if cause is not None and cause.tenant_id not in (None, notification.tenant_id):
        raise ValueError("a notification's tenant must be the tenant of its cause")
    return Envelope.new(
        EVENT_TYPE,
        notification.model_dump(mode="json"),
        key=notification.subject_id,
        source=source or (cause.source if cause is not None else SOURCE),
        schema_version=VERSION,
        tenant_id=notification.tenant_id,
        trace_id=cause.trace_id if cause is not None else None,
        correlation_id=(cause.correlation_id or cause.key) if cause is not None else None,
        causation_id=cause.event_id if cause is not None else None,
    )
