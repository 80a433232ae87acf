"""The seed's two leader-run jobs, as scanners (each under a leader lease, audited):

* ``vistack-retry-dispatcher`` (every 5 s): claims the transcodes due in the ZSET
  ``transcode:retry:zset``, re-publishes each to ``transcode`` (through the outbox: once its
  transaction committed the message cannot be lost) and only then removes it from the ZSET
  (the seed: "投递成功才 ZRem"; a failure keeps it for the next scan). A claim hides a member
  for a minute, so two dispatchers never send one retry twice at once; one that dies after
  its commit and before the removal sends it again, and the inbox drops the copy (the
  message keeps its event id).
* ``vistack-watchdog`` (every minute): ``processing`` for 15 min with no lease (its worker
  died) and ``pending`` for 10 min (its message may be lost, or the ZSET was) go back to the
  retry ZSET, due now; the video is ``pending`` with ``retry_at`` now, so it is not re-queued
  again before another 10 min passed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import sqlalchemy as sa

from aigc_hub.cache.base import DueTimer
from aigc_hub.core.envelope import Envelope
from aigc_hub.core.errors import EnvelopeError, StaleTransition
from aigc_hub.reliability.scanners import Finding, default_owner
from aigc_hub.store.engine import reader

from . import events, metrics, records, rules, services
from .models import vistack_videos
from .state import Vistack
from .states import VideoStatus

#: How long a claimed retry stays hidden from other dispatchers.
CLAIM_VISIBILITY_MS = 60_000


@dataclass
class RetryDispatcher:
    """The seed's retry dispatcher (``retry.go``): the ZSET's due members back to Kafka."""

    vs: Vistack
    name: str = "vistack-retry-dispatcher"
    interval_s: float = 5.0
    batch: int = 200
    #: Routine delivery, not a repair: one audit row per retry would bury the repairs.
    audited: bool = False
    owner: str = field(default_factory=default_owner)
    _claimed: dict[str, DueTimer] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        self.interval_s = self.vs.settings.dispatch_interval_s

    async def find(self, now_ms: int) -> Sequence[Finding]:
        due = await self.vs.hub.cache.timers.claim(
            rules.RETRY_QUEUE, now_ms, self.batch, self.owner, CLAIM_VISIBILITY_MS
        )
        self._claimed = {t.member: t for t in due}
        return [Finding(t.member, {"due_ms": t.due_ms}) for t in due]

    async def repair(self, finding: Finding, now_ms: int) -> str:
        timers = self.vs.hub.cache.timers
        timer = self._claimed.pop(finding.target, None)
        if timer is None:
            return "skipped"
        try:
            env = Envelope.from_bytes(timer.payload)
        except EnvelopeError:  # not ours to deliver: drop it, the watchdog has the video
            await timers.complete(rules.RETRY_QUEUE, timer.member, owner=self.owner)
            return "dropped_unreadable"
        async with self.vs.hub.transaction() as conn:
            await self.vs.hub.outbox.add(conn, [env])
        await timers.complete(rules.RETRY_QUEUE, timer.member, owner=self.owner)
        metrics.RETRIES_DISPATCHED.inc()
        return "redelivered"


@dataclass
class Watchdog:
    """The seed's watchdog (``watchdog.go``): stuck videos back to the retry ZSET."""

    vs: Vistack
    name: str = "vistack-watchdog"
    interval_s: float = 60.0
    batch: int = 200

    def __post_init__(self) -> None:
        self.interval_s = self.vs.settings.watchdog_interval_s

    async def find(self, now_ms: int) -> Sequence[Finding]:
        s, t = self.vs.settings, vistack_videos
        stale_processing = now_ms - int(s.processing_timeout_s * 1000)
        stale_pending = now_ms - int(s.pending_timeout_s * 1000)
        waited_out = sa.or_(t.c.retry_at.is_(None), t.c.retry_at <= stale_pending)
        query = (
            sa.select(t.c.id, t.c.status)
            .where(
                sa.or_(
                    sa.and_(
                        t.c.status == VideoStatus.PROCESSING.value,
                        t.c.updated_at <= stale_processing,
                    ),
                    sa.and_(
                        t.c.status == VideoStatus.PENDING.value,
                        t.c.updated_at <= stale_pending,
                        waited_out,
                    ),
                )
            )
            .order_by(t.c.updated_at)
            .limit(self.batch)
        )
        async with reader(self.vs.hub.engine) as conn:
            rows = (await conn.execute(query)).all()
        leases = self.vs.hub.cache.leases
        found = []
        for r in rows:
            # The seed: processing only with no lease; a live worker's transcode may be long.
            if r.status == VideoStatus.PROCESSING.value and await leases.holder(
                rules.lease_name(r.id)
            ):
                continue
            found.append(Finding(r.id, {"status": r.status}))
        return found

    async def repair(self, finding: Finding, now_ms: int) -> str:
        hub = self.vs.hub
        async with hub.transaction() as conn:
            video = await records.load(conn, finding.target)
            if video is None or video.status.value != finding.detail["status"]:
                return "skipped"
            try:
                await records.move_video(
                    conn,
                    video,
                    VideoStatus.PENDING,
                    cause=f"watchdog: {video.status.value} too long",
                    at=now_ms,
                    outbox=hub.outbox,
                    values={"retry_at": now_ms, "stage": "re-queued by the watchdog"},
                )
            except StaleTransition:
                return "skipped"
        message = events.TranscodeV2(
            videoId=video.id,
            tenantId=video.tenant_id,
            sourceKey=video.row["source_key"],
            heights=list(video.row["heights"] or events.DEFAULT_HEIGHTS),
        )
        env = services.transcode_envelope(message, source=events.WATCHDOG_SVC)
        await hub.cache.timers.schedule(rules.RETRY_QUEUE, video.id, now_ms, env.to_bytes())
        reason = finding.detail["status"]
        metrics.WATCHDOG_REQUEUED.labels(reason).inc()
        return f"requeued_{reason}"
