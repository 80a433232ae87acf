"""The generation pipeline's topics (seed 004 §3.5.3) and versioned event payloads; envelopes
carry ids, never media or URLs.

The seed names the topics without numbers: 12 partitions and 7 days each. Render, billing
and reconcile are the seed's names for the next steps; ``output.fetch.urgent`` is ours (the
seed's high-priority queue for expiring URLs).
"""

from __future__ import annotations

import pydantic

from aigc_hub.messaging.catalog import DAY_MS, TopicSpec
from aigc_hub.pipeline import PipelineBase
from aigc_hub.pipelines.generation.adapters.base import ProviderResult

DISPATCH = "generation.dispatch"
OBSERVE = "provider.status.observe"
POLL = "provider.poll"
FETCH = "output.fetch"
#: Outputs whose URL expires soon: their own queue and consumer group, so a backlog of
#: ordinary fetches never makes one miss its window (seed 004 §3.9.3-4).
FETCH_URGENT = "output.fetch.urgent"
MEDIA = "media.process"
#: Exports for the render worker pool (seed 004 §3.3.3 item 10), apart from the media worker.
RENDER = "render.execute"
RECONCILE = "reconcile.command"

TASK_QUEUED = "generation.task.queued"
ATTEMPT_DISPATCHED = "generation.attempt.dispatched"
CANCEL_REQUESTED = "generation.cancel.requested"
STATUS_OBSERVED = "generation.provider.status_observed"
POLL_REQUESTED = "generation.poll.requested"
FETCH_REQUESTED = "generation.output.fetch_requested"
FETCH_URGENT_REQUESTED = "generation.output.fetch_urgent"
MEDIA_PROCESS_REQUESTED = "generation.media.process_requested"
ORPHAN_OBJECT_FOUND = "generation.reconcile.orphan_object"
MISSING_OBJECT_FOUND = "generation.reconcile.missing_object"
UPLOAD_ABANDONED = "generation.reconcile.upload_abandoned"
SLOT_FREED = "generation.slot.freed"
ASSET_UPLOADED = "asset.uploaded"
RENDER_REQUESTED = "generation.render.requested"
EXPORT_RENDERED = "generation.export.rendered"

TOPIC_NAMES = (
    DISPATCH,
    OBSERVE,
    POLL,
    FETCH,
    FETCH_URGENT,
    MEDIA,
    RENDER,
    "billing.command",
    RECONCILE,
)


class TaskQueued(pydantic.BaseModel):
    """A task waits for a slot: wakes the scheduler."""

    task_id: str
    priority: int


class AttemptDispatched(pydantic.BaseModel):
    """The scheduler gave a task a slot and a provider: submit it."""

    task_id: str
    attempt_id: str
    provider: str
    model: str
    request_key: str


class SlotFreed(pydantic.BaseModel):
    """A provider job of this tenant ended: the scheduler may dispatch another task."""

    tenant_id: str


class CancelRequested(pydantic.BaseModel):
    """A tenant asked to stop a task that may be at a provider."""

    task_id: str


class StatusObserved(pydantic.BaseModel):
    """What a callback, a poll or a submit answer told us about a provider job."""

    @classmethod
    def of(
        cls,
        result: ProviderResult,
        *,
        task_id: str,
        attempt_id: str,
        provider: str,
        source: str,
        callback_id: int | None = None,
    ) -> StatusObserved:
        """The observation an adapter's normalized result makes (the one way to build it)."""
        return cls(
            task_id=task_id,
            attempt_id=attempt_id,
            provider=provider,
            provider_job_id=result.provider_job_id,
            normalized_status=result.normalized_status.value,
            progress=result.progress,
            provider_error_code=result.provider_error_code,
            retry_class=result.retry_class.value,
            actual_cost=result.actual_cost,
            output_count=len(result.output_assets),
            output_expires_at_ms=(
                result.output_assets[0].expires_at_ms if result.output_assets else None
            ),
            observed_at_ms=result.observed_at_ms,
            source=source,
            callback_id=callback_id,
        )

    task_id: str
    attempt_id: str
    provider: str
    provider_job_id: str | None
    normalized_status: str
    progress: float | None = None
    provider_error_code: str | None = None
    retry_class: str = "none"
    actual_cost: int | None = None
    output_count: int = 0
    #: When the first output's URL stops working, where the provider says (not the URL).
    output_expires_at_ms: int | None = None
    observed_at_ms: int | None = None
    source: str  # "callback" | "poll" | "submit" | "reconcile"
    #: The archived webhook this came from (``callback_events.id``): its body names the
    #: outputs, so a fetch can start without asking the provider again.
    callback_id: int | None = None


class PollRequested(pydantic.BaseModel):
    """Time to ask the provider about a job (no reliable callback, or silence)."""

    task_id: str
    attempt_id: str


class FetchRequested(pydantic.BaseModel):
    """The provider finished: download its output into our storage."""

    task_id: str
    attempt_id: str
    #: The archived webhook that reported the success, when one did (its body names the
    #: outputs; the URL itself never travels in an event).
    callback_id: int | None = None


class MediaProcessRequested(pydantic.BaseModel):
    """A task's output is stored as ``source_asset_id``: make its variants and review it."""

    task_id: str
    source_asset_id: str


class OrphanObjectFound(pydantic.BaseModel):
    """The orphan scanner found an object no asset row names: delete it if still so."""

    key: str


class MissingObjectFound(pydantic.BaseModel):
    """The orphan scanner found a READY asset whose object is gone: mark it if still so."""

    asset_id: str


class AssetUploaded(pydantic.BaseModel):
    """A tenant completed an upload (size and magic number checked): verify and probe it."""

    asset_id: str
    tenant_id: str


_NOTES = {
    FETCH_URGENT: "not named by the seed: its high-priority queue for expiring output URLs "
    "(§3.9.3-4); partitions and retention not given by the seed",
}


class RenderRequested(pydantic.BaseModel):
    """A tenant requested an export: render its job's revision."""

    job_id: str


class ExportRendered(pydantic.BaseModel):
    """An export's file is stored as ``asset_id``: make its playback variants, end it."""

    job_id: str
    asset_id: str


class UploadAbandoned(pydantic.BaseModel):
    """An upload stayed UPLOADING past its URLs' life: abort it and refuse the asset."""

    asset_id: str


def register(pipeline: PipelineBase) -> None:
    """Declare every generation topic on ``pipeline``, and every payload with its topic."""
    for name in TOPIC_NAMES:
        pipeline.topic(
            TopicSpec(
                name,
                12,
                7 * DAY_MS,
                pipeline=pipeline.name,
                note=_NOTES.get(name, "partitions and retention not given by the seed"),
            )
        )
    pipeline.event(TASK_QUEUED, topic=DISPATCH)(TaskQueued)
    pipeline.event(ATTEMPT_DISPATCHED, topic=DISPATCH)(AttemptDispatched)
    pipeline.event(CANCEL_REQUESTED, topic=DISPATCH)(CancelRequested)
    pipeline.event(SLOT_FREED, topic=DISPATCH)(SlotFreed)
    pipeline.event(STATUS_OBSERVED, topic=OBSERVE)(StatusObserved)
    pipeline.event(POLL_REQUESTED, topic=POLL)(PollRequested)
    pipeline.event(FETCH_REQUESTED, topic=FETCH)(FetchRequested)
    pipeline.event(FETCH_URGENT_REQUESTED, topic=FETCH_URGENT)(FetchRequested)
    pipeline.event(MEDIA_PROCESS_REQUESTED, topic=MEDIA)(MediaProcessRequested)
    pipeline.event(ORPHAN_OBJECT_FOUND, topic=RECONCILE)(OrphanObjectFound)
    pipeline.event(MISSING_OBJECT_FOUND, topic=RECONCILE)(MissingObjectFound)
    pipeline.event(UPLOAD_ABANDONED, topic=RECONCILE)(UploadAbandoned)
    pipeline.event(ASSET_UPLOADED, topic=MEDIA)(AssetUploaded)
    pipeline.event(RENDER_REQUESTED, topic=RENDER)(RenderRequested)
    pipeline.event(EXPORT_RENDERED, topic=MEDIA)(ExportRendered)
