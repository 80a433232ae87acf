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
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

from sqlalchemy.ext.asyncio import AsyncConnection

from aigc_hub.cache.base import Lease
from aigc_hub.core import errors
from aigc_hub.core.envelope import Envelope
from aigc_hub.core.errors import StaleTransition
from aigc_hub.messaging import headers
from aigc_hub.reliability import audit
from aigc_hub.reliability.outbox import Routed
from aigc_hub.runtime.context import HandlerContext
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
    video = await _startable(vs, ctx, message.videoId)
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
        await _run(vs, ctx, video, message, lease)
    finally:
        with contextlib.suppress(Exception):  # expired or taken over: nothing to give back
            await hub.cache.leases.release(lease)
    return []


async def _startable(vs: Vistack, ctx: HandlerContext, video_id: str) -> Video | None:
    """The video if this message has work to do: pending or processing, or failed and
    replayed from the DLQ (then back to pending in a new retry epoch); else None."""
    async with ctx.read() as conn:
        video = await records.load(conn, video_id)
    if video is None or video.status is VideoStatus.PUBLISHED:
        return None
    if video.status is not VideoStatus.FAILED:
        return video
    if headers.REPLAYED_FROM_DLQ not in ctx.record.headers:
        return None

    async def reopen(conn: AsyncConnection) -> Video:
        return await records.move_video(
            conn,
            video,
            VideoStatus.PENDING,
            cause="replayed from the DLQ",
            at=vs.hub.clock.now_ms(),
            outbox=vs.hub.outbox,
            values={"retry_epoch": video.retry_epoch + 1, "attempts": 0, "retry_at": None},
        )

    return await ctx.checkpoint("a replayed video counts its attempts afresh", reopen)


async def _run(
    vs: Vistack, ctx: HandlerContext, video: Video, message: events.TranscodeV2, lease: Lease
) -> None:
    """One attempt under ``lease``: count it, claim the video (committed before the call),
    call the transcoder, and stage the outcome for the record's commit."""
    # Imported here: hubs that never transcode (an API process) need no gRPC.
    from ..adapters.transcoder import TranscodeRefused, TranscoderUnavailable

    hub, s = vs.hub, vs.settings
    attempt = await hub.cache.timers.attempts(
        rules.attempts_key(video.id, video.retry_epoch), int(s.attempts_ttl_s * 1000)
    )
    if attempt > s.max_attempts:
        raise AttemptsExhausted(video.id, attempt - 1, video.row.get("error_message") or "")

    async def claim(conn: AsyncConnection) -> Video | None:
        current = await records.load(conn, video.id)
        if current is None or current.status not in (VideoStatus.PENDING, VideoStatus.PROCESSING):
            return None
        return await records.move_video(
            conn,
            current,
            VideoStatus.PROCESSING,
            cause=f"attempt {attempt}",
            at=hub.clock.now_ms(),
            outbox=hub.outbox,
            token=lease.token,
            values={"attempts": attempt, "stage": "queued", "progress": 0.0, "retry_at": None},
        )

    claimed = await ctx.checkpoint("the attempt, before the transcoder is called", claim)
    if claimed is None:
        metrics.TRANSCODES.labels("skipped").inc()
        return
    try:
        async with _renewing(vs, lease):
            result = await _transcode(vs, ctx, claimed, message, lease)
    except TranscodeRefused as exc:
        metrics.TRANSCODES.labels("refused").inc()
        raise SourceRefused(exc.code, exc.reason) from None
    except TranscoderUnavailable as exc:
        if attempt >= s.max_attempts:
            raise AttemptsExhausted(video.id, attempt, str(exc)) from None
        await _retry_later(vs, ctx, video.id, message, lease, attempt, str(exc))
        metrics.TRANSCODES.labels("retry").inc()
        return
    hub.failpoints.hit(BEFORE_PUBLISH)
    # Committed now, not staged: the run that took over may have come by another record (a
    # watchdog re-queue, a dispatcher retry) or by this one redelivered, and the inbox would
    # silently drop this result in the second case only. The fence decides in both, and its
    # refusal is audited either way.
    await ctx.checkpoint(
        "the result of the transcoder's run, fenced", _publish(vs, video.id, result, lease)
    )


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
    vs: Vistack, ctx: HandlerContext, video: Video, message: events.TranscodeV2, lease: Lease
) -> TranscodeResult:
    """The ProcessVideo call, its progress committed (fenced) and announced as it comes.

    The run's outputs go under ``dash/{videoID}/<token>/``: a run never overwrites another's
    files, and the row names the manifest of the run that published.
    """
    hub = vs.hub

    async def on_progress(stage: str, fraction: float) -> None:
        async def note(conn: AsyncConnection) -> bool:
            return await records.set_progress(
                conn,
                video.id,
                hub.clock.now_ms(),
                stage=stage,
                progress=fraction,
                token=lease.token,
                outbox=hub.outbox,
            )

        await ctx.checkpoint("the transcoder's progress, as it comes", note)

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


def _publish(
    vs: Vistack, video_id: str, result: TranscodeResult, lease: Lease
) -> Callable[[AsyncConnection], Awaitable[None]]:
    """The seed's "事务写库 → published" in one fenced transaction: a run whose lease a
    newer one took has its result refused (and audited) instead."""

    async def write(conn: AsyncConnection) -> None:
        hub = vs.hub
        now = hub.clock.now_ms()
        current = await records.load(conn, video_id)
        if current is None:  # deleted while it was transcoding
            return
        try:
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
        except FencedOut as exc:  # refused before anything was written
            metrics.TRANSCODES.labels("fenced").inc()
            log.warning("transcode of %s fenced out: %s", video_id, exc)
            await audit.record(
                conn,
                at=now,
                actor=vs.owner,
                action="vistack.transcode.fenced_out",
                target=video_id,
                result="refused",
                detail={"token": lease.token, "newer": exc.newer},
            )
            return
        except StaleTransition:  # another run published it first (same token cannot race)
            return
        metrics.TRANSCODES.labels("published").inc()

    return write


async def _retry_later(
    vs: Vistack,
    ctx: HandlerContext,
    video_id: str,
    message: events.TranscodeV2,
    lease: Lease,
    attempt: int,
    error: str,
) -> None:
    """The message into the ZSET at the seed's delay, and the video back to ``pending``
    until then (staged, fenced). The timer first: if the commit is lost the record comes
    back and schedules it again (a member is replaced, never doubled); a timer lost with the
    cache leaves a pending video whose retry_at passed, which the watchdog re-queues."""
    hub, s = vs.hub, vs.settings
    now = hub.clock.now_ms()
    delay_s = rules.retry_delay_s(
        attempt, base_s=s.retry_base_s, cap_s=s.retry_cap_s, jitter=s.retry_jitter
    )
    due = now + int(delay_s * 1000)
    retry = services.transcode_envelope(message, source=events.DISPATCHER_SVC)
    await hub.cache.timers.schedule(rules.RETRY_QUEUE, video_id, due, retry.to_bytes())

    async def wait(conn: AsyncConnection) -> list[Envelope | Routed] | None:
        current = await records.load(conn, video_id)
        if current is None or current.status is not VideoStatus.PROCESSING:
            return None
        with contextlib.suppress(FencedOut, StaleTransition):
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
        return None

    ctx.write(wait)


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
