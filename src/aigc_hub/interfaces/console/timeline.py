"""One subject's history (a task id…), merged from every place that knows about it.

Sources: each pipeline's :data:`~aigc_hub.pipeline.TimelineSource` (``None`` means "not my
subject"), the dead letters whose key is the id, and the outbox rows whose key is the id
(the events announced about it). Each store query is bounded to the newest :data:`LIMIT`
rows. A failing pipeline source is reported next to the timeline instead of failing the page.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import sqlalchemy as sa

from aigc_hub.bootstrap import Hub
from aigc_hub.core.envelope import Envelope
from aigc_hub.core.errors import EnvelopeError
from aigc_hub.pipeline import TimelineEntry
from aigc_hub.store import tables
from aigc_hub.store.engine import reader

log = logging.getLogger(__name__)

#: Rows read per store source (dead letters, outbox), newest first.
LIMIT = 200


@dataclass(frozen=True)
class Line:
    """A timeline entry and, when there is one, the console page about it."""

    entry: TimelineEntry
    link: str | None = None


@dataclass
class Timeline:
    """A subject's merged history, oldest first, and the sources that failed."""

    subject_id: str
    lines: list[Line] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def found(self) -> bool:
        """True when any source knew the subject."""
        return bool(self.lines)


async def _pipeline_lines(hub: Hub, subject_id: str, timeline: Timeline) -> None:
    for pipeline in hub.pipelines:
        for source in pipeline.timelines:
            try:
                entries = await source(hub, subject_id)
            except Exception as exc:
                log.exception("timeline source of %s failed", pipeline.name)
                timeline.errors.append(f"{pipeline.name}: {type(exc).__name__}")
                continue
            timeline.lines += [Line(e) for e in entries or []]


async def _dead_letter_lines(hub: Hub, subject_id: str, base: str) -> list[Line]:
    d = tables.dead_letters
    query = sa.select(d).where(d.c.key == subject_id).order_by(d.c.id.desc()).limit(LIMIT)
    async with reader(hub.engine) as conn:
        rows = (await conn.execute(query)).all()
    return [
        Line(
            TimelineEntry(
                at_ms=int(r.created_at),
                source="dead letter",
                title=f"{r.consumer} gave up: {r.error_class} ({r.status})",
                detail={
                    "dead_letter_id": r.id,
                    "topic": r.topic,
                    "event_type": r.event_type,
                    "error_message": r.error_message,
                    "attempts": r.attempts,
                },
            ),
            link=f"{base}/dlq/{r.id}",
        )
        for r in rows
    ]


def _payload(value: bytes) -> object:
    try:
        return Envelope.from_bytes(value).payload
    except EnvelopeError:
        return None


async def _outbox_lines(hub: Hub, subject_id: str) -> list[Line]:
    o = tables.outbox
    query = (
        sa.select(
            o.c.id,
            o.c.event_id,
            o.c.topic,
            o.c.event_type,
            o.c.value,
            o.c.created_at,
            o.c.published_at,
        )
        .where(o.c.key == subject_id)
        .order_by(o.c.id.desc())
        .limit(LIMIT)
    )
    async with reader(hub.engine) as conn:
        rows = (await conn.execute(query)).all()
    return [
        Line(
            TimelineEntry(
                at_ms=int(r.created_at),
                source="outbox",
                title=f"{r.event_type or 'record'} → {r.topic}"
                + ("" if r.published_at is not None else " (not yet published)"),
                detail={
                    "event_id": r.event_id,
                    "published_at": r.published_at,
                    "payload": _payload(bytes(r.value)),
                },
            )
        )
        for r in rows
    ]


async def subject_timeline(hub: Hub, subject_id: str, *, base: str) -> Timeline:
    """Everything the hub knows about ``subject_id``, oldest first (links under ``base``)."""
    timeline = Timeline(subject_id)
    await _pipeline_lines(hub, subject_id, timeline)
    timeline.lines += await _dead_letter_lines(hub, subject_id, base)
    timeline.lines += await _outbox_lines(hub, subject_id)
    timeline.lines.sort(key=lambda line: line.entry.at_ms)
    return timeline
