"""``transcode`` in the seed's consumer group: one video through the transcoder, once.

The seed's idempotency triple, each on the backbone's primitive:

1. **the DB state machine**: a published video is skipped; a failed one is taken up again
   only by a replay from the DLQ (a new retry epoch, its attempts counted afresh);
2. **the lease** ``lease:transcode:{id}`` (SETNX, 30 min): only its holder works on the video;
   while the call runs the lease is renewed, and every write of the run carries the lease's
   fencing token, so a worker that lost its lease (paused past it) has its result refused;
3. **the attempt counter** ``attempts:transcode:{id}`` (24 h): past the last attempt the
   message goes to the DLQ with an alert (the seed's roadmap) instead of being dropped.

A transcoder that is unavailable does not fail the record: the video goes back to
``pending`` with its ``retry_at``, the message waits in the retry ZSET
(``transcode:retry:zset``) for the dispatcher, and this record is done. A refused source
(corrupt, not a video) is permanent: the DLQ, the video ``failed`` with the reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from sqlalchemy.ext.asyncio import AsyncConnection

from aigc_hub.cache.base import Lease
from aigc_hub.core import errors
from aigc_hub.core.envelope import Envelope
from aigc_hub.messaging import headers
from aigc_hub.reliability import audit
from aigc_hub.runtime.context import HandlerContext
from aigc_hub.store.engine import reader
from aigc_hub.store.fencing import FencedOut

from .. import alerts, events, metrics, records, rules, services
from ..records import Video
from ..state import Vistack
from ..states import VideoStatus
from . import consumer

if TYPE_CHECKING:
    from ..adapters.transcoder import TranscodeResult

log = logging.getLogger(__name__)
#: Where a test pauses a worker holding a finished transcode (SIGSTOP past its lease).
BEFORE_PUBLISH = "vistack.transcode.before_publish"


class AttemptsExhausted(errors.PermanentError):
    """The video used its last transcode attempt: the DLQ and an alert."""

    def __init__(self, video_id: str, attempts: int, last_error: str) -> None:
        self.attempts = attempts
        super().__init__(
            f"video {video_id}: transcode failed {attempts} times, the last: {last_error}"
        )


class SourceRefused(errors.PermanentError):
    """The transcoder refused the source (corrupt, not a video, too long)."""

    def __init__(self, code: str, reason: str) -> None:
        self.code = code
        super().__init__(f"{code}: {reason}")


@consumer.handles(events.TRANSCODE)
async def on_transcode(vs: Vistack, env: Envelope, ctx: HandlerContext) -> list[Envelope]:
    """Transcode the video of ``env`` (v1 or v2) unless it is done or taken."""
    assert ctx.payload is not None
    message = events.transcode_v2(ctx.payload)
    video = await _startable(vs, message.videoId, replayed=_replayed(ctx))
    if video is None:
        metrics.TRANSCODES.labels("skipped").inc()
        return []
    hub = vs.hub
    lease = await hub.cache.leases.acquire(
        rules.lease_name(video.id), vs.owner, int(vs.settings.lease_s * 1000)
    )
    if lease is None:  # the seed: another worker is on it; the watchdog covers its death
        metrics.TRANSCODES.labels("skipped").inc()
        return []
    try:
        await _run(vs, video, message, lease)
    finally:
        with contextlib.suppress(Exception):  # expired or taken over: nothing to give back
            await hub.cache.leases.release(lease)
    return []


def _replayed(ctx: HandlerContext) -> bool:
    return headers.REPLAYED_FROM_DLQ in ctx.record.headers


async def _startable(vs: Vistack, video_id: str, *, replayed: bool) -> Video | None:
    """The video if this message has work to do: pending or processing, or failed and
    replayed from the DLQ (then back to pending in a new retry epoch); else None."""
    async with reader(vs.hub.engine) as conn:
        video = await records.load(conn, video_id)
    if video is None or video.status is VideoStatus.PUBLISHED:
        return None
    if video.status is not VideoStatus.FAILED:
        return video
    if not replayed:
        return None
    async with vs.hub.transaction() as conn:
        return await records.move_video(
            conn,
            video,
            VideoStatus.PENDING,
            cause="replayed from the DLQ",
            at=vs.hub.clock.now_ms(),
            outbox=vs.hub.outbox,
            values={"retry_epoch": video.retry_epoch + 1, "attempts": 0, "retry_at": None},
        )


async def _run(vs: Vistack, video: Video, message: events.TranscodeV2, lease: Lease) -> None:
    """One attempt under ``lease``: count it, claim the video, call the transcoder, settle."""
    # Imported here: hubs that never transcode (an API process) need no gRPC.
    from ..adapters.transcoder import TranscodeRefused, TranscoderUnavailable

    hub, s = vs.hub, vs.settings
    attempt = await hub.cache.timers.attempts(
        rules.attempts_key(video.id, video.retry_epoch), int(s.attempts_ttl_s * 1000)
    )
    if attempt > s.max_attempts:
        raise AttemptsExhausted(video.id, attempt - 1, video.row.get("error_message") or "")
    try:
        async with hub.transaction() as conn:
            current = await records.load(conn, video.id)
            if current is None or current.status not in (
                VideoStatus.PENDING,
                VideoStatus.PROCESSING,
            ):
                metrics.TRANSCODES.labels("skipped").inc()
                return
            claimed = await records.move_video(
                conn,
                current,
                VideoStatus.PROCESSING,
                cause=f"attempt {attempt}",
                at=hub.clock.now_ms(),
                outbox=hub.outbox,
                token=lease.token,
                values={"attempts": attempt, "stage": "queued", "progress": 0.0, "retry_at": None},
            )
        async with _renewing(vs, lease):
            result = await _transcode(vs, claimed, message, lease)
        hub.failpoints.hit(BEFORE_PUBLISH)
        await _publish(vs, claimed, result, lease)
        metrics.TRANSCODES.labels("published").inc()
    except FencedOut as exc:
        await _fenced_out(vs, video.id, lease, exc)
    except TranscodeRefused as exc:
        metrics.TRANSCODES.labels("refused").inc()
        raise SourceRefused(exc.code, exc.reason) from None
    except TranscoderUnavailable as exc:
        if attempt >= s.max_attempts:
            raise AttemptsExhausted(video.id, attempt, str(exc)) from None
        await _schedule_retry(vs, video.id, message, lease, attempt, str(exc))
        metrics.TRANSCODES.labels("retry").inc()


@contextlib.asynccontextmanager
async def _renewing(vs: Vistack, lease: Lease) -> AsyncIterator[None]:
    """Renew ``lease`` every third of its ttl while the body runs. A lost lease is not
    acted on here: the fenced writes refuse whatever this run would still write."""

    async def renew() -> None:
        current: Lease | None = lease
        while current is not None:
            await asyncio.sleep(lease.ttl_ms / 3000)
            current = await vs.hub.cache.leases.renew(current)
        log.warning("transcode lease %s lost; its result will be refused", lease.name)

    task = asyncio.create_task(renew())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task


async def _transcode(
    vs: Vistack, video: Video, message: events.TranscodeV2, lease: Lease
) -> TranscodeResult:
    """The ProcessVideo call, its progress written (fenced) and announced as it comes.

    The run's outputs go under ``dash/{videoID}/<token>/``: a run never overwrites another's
    files, and the row names the manifest of the run that published.
    """
    hub = vs.hub

    async def on_progress(stage: str, fraction: float) -> None:
        async with hub.transaction() as conn:
            await records.set_progress(
                conn,
                video.id,
                hub.clock.now_ms(),
                stage=stage,
                progress=fraction,
                token=lease.token,
                outbox=hub.outbox,
            )

    return await vs.transcoder.process(
        video_id=video.id,
        tenant_id=video.tenant_id,
        source_key=message.sourceKey,
        output_prefix=f"{services.dash_prefix(video.tenant_id, video.id)}{lease.token}/",
        cover_key=services.cover_key(video.tenant_id, video.id),
        heights=message.heights,
        request_id=f"{video.id}:{lease.token}",
        deadline_s=vs.settings.transcode_deadline_s,
        on_progress=on_progress,
    )


async def _publish(vs: Vistack, video: Video, result: TranscodeResult, lease: Lease) -> None:
    """The seed's "事务写库 → published": the result in one fenced transaction."""
    hub = vs.hub
    now = hub.clock.now_ms()
    async with hub.transaction() as conn:
        current = await records.load(conn, video.id)
        if current is None:  # deleted while it was transcoding
            return
        await records.move_video(
            conn,
            current,
            VideoStatus.PUBLISHED,
            cause="transcoded",
            at=now,
            outbox=hub.outbox,
            token=lease.token,
            values={
                "stage": "published",
                "progress": 1.0,
                "manifest_key": result.manifest_key,
                "cover_key": result.cover_key,
                "duration_ms": result.duration_ms,
                "renditions": [
                    {
                        "name": r.name,
                        "width": r.width,
                        "height": r.height,
                        "bandwidth_bps": r.bandwidth_bps,
                    }
                    for r in result.renditions
                ],
                "published_at": now,
                "error_code": None,
                "error_message": None,
            },
        )


async def _schedule_retry(
    vs: Vistack,
    video_id: str,
    message: events.TranscodeV2,
    lease: Lease,
    attempt: int,
    error: str,
) -> None:
    """Back to ``pending`` until ``retry_at`` (fenced), then the message into the ZSET.

    In this order: a crash between the two leaves a pending video whose retry_at passed,
    which the watchdog re-queues.
    """
    hub, s = vs.hub, vs.settings
    now = hub.clock.now_ms()
    delay_s = rules.retry_delay_s(
        attempt, base_s=s.retry_base_s, cap_s=s.retry_cap_s, jitter=s.retry_jitter
    )
    due = now + int(delay_s * 1000)
    async with hub.transaction() as conn:
        current = await records.load(conn, video_id)
        if current is None or current.status is not VideoStatus.PROCESSING:
            return
        await records.move_video(
            conn,
            current,
            VideoStatus.PENDING,
            cause=f"attempt {attempt} failed; retry in {delay_s:.0f} s",
            at=now,
            outbox=hub.outbox,
            token=lease.token,
            values={
                "retry_at": due,
                "stage": "waiting for retry",
                "error_code": "transcoder_unavailable",
                "error_message": error[:500],
            },
        )
    retry = services.transcode_envelope(message, source=events.DISPATCHER_SVC)
    await hub.cache.timers.schedule(rules.RETRY_QUEUE, video_id, due, retry.to_bytes())


async def _fenced_out(vs: Vistack, video_id: str, lease: Lease, exc: FencedOut) -> None:
    """This run lost its lease to a newer one: its result is refused, and audited."""
    metrics.TRANSCODES.labels("fenced").inc()
    log.warning("transcode of %s fenced out: %s", video_id, exc)
    async with vs.hub.transaction() as conn:
        await audit.record(
            conn,
            at=vs.hub.clock.now_ms(),
            actor=vs.owner,
            action="vistack.transcode.fenced_out",
            target=video_id,
            result="refused",
            detail={"token": lease.token, "newer": exc.newer},
        )


@consumer.on_dead_letter_of(events.TRANSCODE)
async def on_dead_letter(
    vs: Vistack, conn: AsyncConnection, env: Envelope, error: BaseException
) -> None:
    """The video fails with the reason, in the dead letter's transaction; past the last
    attempt, the alert."""
    video_id = str(env.payload.get("videoId", ""))
    video = await records.load(conn, video_id)
    if video is None or video.status in (VideoStatus.PUBLISHED, VideoStatus.FAILED):
        return
    code = _error_code(error)
    values: dict[str, Any] = {"error_code": code, "error_message": str(error)[:500]}
    values |= {"stage": "failed", "retry_at": None}
    await records.move_video(
        conn,
        video,
        VideoStatus.FAILED,
        cause=f"dead-lettered: {code}",
        at=vs.hub.clock.now_ms(),
        outbox=vs.hub.outbox,
        values=values,
    )
    if isinstance(error, AttemptsExhausted):
        alerts.transcode_gave_up(
            vs.hub.config.alert_webhook,
            video_id=video.id,
            tenant_id=video.tenant_id,
            attempts=error.attempts,
            reason=str(error),
        )


def _error_code(error: BaseException) -> str:
    if isinstance(error, AttemptsExhausted):
        return "attempts_exhausted"
    if isinstance(error, SourceRefused):
        return error.code[:40]
    return type(error).__name__[:40]
