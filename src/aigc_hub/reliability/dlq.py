"""The dead-letter store: one table and one topic for every consumer of every pipeline.

A dead letter keeps the original bytes and its reason (topic, partition, offset, consumer,
error class and message, attempts, first and last failure). People list, inspect, replay or
dismiss them; every such action writes an audit row in the same transaction. Replay puts the
original envelope back into the outbox for its original topic, with the same event id, so
consumers that already applied it skip it and the failed one applies it once.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from aigc_hub.core.clock import Clock
from aigc_hub.core.envelope import Envelope
from aigc_hub.core.errors import EnvelopeError, HubError
from aigc_hub.messaging import headers as h
from aigc_hub.messaging.catalog import DLQ_TOPIC
from aigc_hub.observability import metrics
from aigc_hub.reliability import audit
from aigc_hub.reliability.outbox import OutboxWriter, Routed
from aigc_hub.store import tables

D = tables.dead_letters


class DeadLetterStatus(enum.StrEnum):
    """Where a dead letter stands; the value is the string stored in ``dead_letters.status``."""

    PENDING = "pending"
    REPLAYED = "replayed"
    DISMISSED = "dismissed"


#: The status filter that lists dead letters of every status (admin API, CLI, console).
ANY_STATUS = "any"
#: Every status filter a person may pass, in display order.
STATUS_CHOICES: tuple[str, ...] = (*(s.value for s in DeadLetterStatus), ANY_STATUS)


def status_filter(choice: str) -> DeadLetterStatus | None:
    """The status a filter choice selects (None for ``any``); ValueError for an unknown one."""
    if choice == ANY_STATUS:
        return None
    try:
        return DeadLetterStatus(choice)
    except ValueError:
        raise ValueError(
            f"unknown status {choice!r}: use {', '.join(STATUS_CHOICES[:-1])} or {ANY_STATUS}"
        ) from None


class DeadLetterNotFound(HubError):
    """No dead letter has that id."""


class DeadLetterNotReplayable(HubError):
    """The dead letter cannot be replayed."""


@dataclass(frozen=True)
class DeadLetterDraft:
    """What the runtime knows when it gives up on a record."""

    topic: str
    partition: int | None
    offset: int | None
    key: str | None
    consumer: str
    pipeline: str
    value: bytes
    headers: Mapping[str, str]
    error_class: str
    error_message: str
    attempts: int
    first_failure_at: int
    last_failure_at: int
    envelope: Envelope | None = None
    history: Sequence[Mapping[str, Any]] = ()

    def reason_headers(self) -> dict[str, str]:
        """The reason as headers, so tools can list and replay without parsing payloads."""
        return {
            h.DLQ_REASON: f"{self.error_class}: {self.error_message}"[:500],
            h.DLQ_ORIGINAL_TOPIC: self.topic,
            h.DLQ_ORIGINAL_PARTITION: "" if self.partition is None else str(self.partition),
            h.DLQ_ORIGINAL_OFFSET: "" if self.offset is None else str(self.offset),
            h.DLQ_CONSUMER: self.consumer,
            h.DLQ_ERROR_CLASS: self.error_class,
            h.DLQ_ERROR_MESSAGE: self.error_message[:1000],
            h.DLQ_ATTEMPTS: str(self.attempts),
            h.DLQ_FIRST_FAILURE: str(self.first_failure_at),
            h.DLQ_LAST_FAILURE: str(self.last_failure_at),
        }


@dataclass(frozen=True)
class DeadLetter:
    """A stored dead letter."""

    id: int
    event_id: str | None
    event_type: str | None
    tenant_id: str | None
    topic: str
    partition: int | None
    offset: int | None
    key: str | None
    consumer: str
    pipeline: str
    value: bytes
    headers: Mapping[str, str]
    error_class: str
    error_message: str
    attempts: int
    first_failure_at: int
    last_failure_at: int
    history: Sequence[Mapping[str, Any]]
    status: DeadLetterStatus
    created_at: int
    resolved_at: int | None

    def envelope(self) -> Envelope | None:
        """The original envelope, or None when the bytes were never a valid envelope."""
        try:
            return Envelope.from_bytes(self.value)
        except EnvelopeError:
            return None


@dataclass(frozen=True)
class DeadLetterFilter:
    """Which dead letters to list; None means any."""

    status: DeadLetterStatus | None = DeadLetterStatus.PENDING
    topic: str | None = None
    consumer: str | None = None
    pipeline: str | None = None
    error_class: str | None = None
    since_ms: int | None = None
    until_ms: int | None = None
    ids: Sequence[int] | None = field(default=None)

    def where(self) -> list[sa.ColumnElement[bool]]:
        """SQL conditions for this filter."""
        conds: list[sa.ColumnElement[bool]] = []
        for column, value in (
            (D.c.status, self.status),
            (D.c.topic, self.topic),
            (D.c.consumer, self.consumer),
            (D.c.pipeline, self.pipeline),
            (D.c.error_class, self.error_class),
        ):
            if value is not None:
                conds.append(column == value)
        if self.since_ms is not None:
            conds.append(D.c.created_at >= self.since_ms)
        if self.until_ms is not None:
            conds.append(D.c.created_at < self.until_ms)
        if self.ids is not None:
            conds.append(D.c.id.in_(list(self.ids)))
        return conds


class DeadLetterStore:
    """Writes, lists and resolves dead letters; each resolution is audited."""

    def __init__(self, engine: AsyncEngine, outbox: OutboxWriter, clock: Clock) -> None:
        self.engine = engine
        self.outbox = outbox
        self.clock = clock
        self._gauged: set[tuple[str, str]] = set()

    async def add(self, conn: AsyncConnection, draft: DeadLetterDraft) -> int:
        """Store a dead letter and announce it on the DLQ topic, in ``conn``'s transaction."""
        now = self.clock.now_ms()
        env = draft.envelope
        row = (
            await conn.execute(
                D.insert()
                .values(
                    event_id=env.event_id if env else draft.headers.get(h.EVENT_ID),
                    event_type=env.event_type if env else draft.headers.get(h.EVENT_TYPE),
                    tenant_id=env.tenant_id if env else None,
                    topic=draft.topic,
                    partition=draft.partition,
                    offset=draft.offset,
                    key=draft.key,
                    consumer=draft.consumer,
                    pipeline=draft.pipeline,
                    value=draft.value,
                    headers=dict(draft.headers),
                    error_class=draft.error_class,
                    error_message=draft.error_message,
                    attempts=draft.attempts,
                    first_failure_at=draft.first_failure_at,
                    last_failure_at=draft.last_failure_at,
                    history=[dict(x) for x in draft.history],
                    status=DeadLetterStatus.PENDING,
                    created_at=now,
                )
                .returning(D.c.id)
            )
        ).one()
        announce = {**dict(draft.headers), **draft.reason_headers()}
        await self.outbox.add_raw(conn, DLQ_TOPIC, draft.key, draft.value, announce)
        return int(row[0])

    async def list(
        self,
        flt: DeadLetterFilter | None = None,
        *,
        limit: int = 50,
        after_id: int | None = None,
        offset: int = 0,
    ) -> list[DeadLetter]:
        """Dead letters matching ``flt``, newest first; pass the last id as ``after_id`` to page
        (or skip ``offset`` of them, for APIs that page by number)."""
        flt = flt or DeadLetterFilter()
        stmt = sa.select(D).where(*flt.where()).order_by(D.c.id.desc()).limit(limit)
        if offset:
            stmt = stmt.offset(offset)
        if after_id is not None:
            stmt = stmt.where(D.c.id < after_id)
        async with self.engine.connect() as conn:
            return [_row(r) for r in (await conn.execute(stmt)).all()]

    async def count(self, flt: DeadLetterFilter | None = None) -> int:
        """How many dead letters match ``flt``."""
        flt = flt or DeadLetterFilter()
        async with self.engine.connect() as conn:
            return int(
                (
                    await conn.execute(
                        sa.select(sa.func.count()).select_from(D).where(*flt.where())
                    )
                ).scalar_one()
            )

    async def refresh_pending_gauge(self) -> dict[tuple[str, str], int]:
        """Set ``aigc_hub_dead_letters_pending`` per (consumer, original topic); returns it."""
        async with self.engine.connect() as conn:
            rows = await conn.execute(
                sa.select(D.c.consumer, D.c.topic, sa.func.count())
                .where(D.c.status == DeadLetterStatus.PENDING)
                .group_by(D.c.consumer, D.c.topic)
            )
            counts = {(c, t): int(n) for c, t, n in rows}
        for labels in set(self._gauged) - set(counts):
            metrics.DEAD_LETTERS_PENDING.labels(*labels).set(0)
        for (consumer, topic), n in counts.items():
            metrics.DEAD_LETTERS_PENDING.labels(consumer, topic).set(n)
        self._gauged = set(counts) | self._gauged
        return counts

    async def get(self, dead_letter_id: int) -> DeadLetter:
        """One dead letter; DeadLetterNotFound when the id is unknown."""
        async with self.engine.connect() as conn:
            row = (await conn.execute(sa.select(D).where(D.c.id == dead_letter_id))).first()
        if row is None:
            raise DeadLetterNotFound(f"no dead letter with id {dead_letter_id}")
        return _row(row)

    async def replay(self, dead_letter_id: int, *, actor: str) -> DeadLetter:
        """Put a pending dead letter back on its original topic; audited, once."""
        now = self.clock.now_ms()
        async with self.engine.begin() as conn:
            row = (await conn.execute(sa.select(D).where(D.c.id == dead_letter_id))).first()
            if row is None:
                raise DeadLetterNotFound(f"no dead letter with id {dead_letter_id}")
            letter = _row(row)
            problem = _replay_problem(letter)
            if problem:
                # The refusal is recorded (and committed) even though the call fails.
                await audit.record(
                    conn,
                    at=now,
                    actor=actor,
                    action="dlq.replay",
                    target=str(dead_letter_id),
                    result="refused",
                    detail={"reason": problem},
                )
            else:
                await self._requeue(conn, letter, actor, now)
        if problem:
            raise DeadLetterNotReplayable(f"dead letter {dead_letter_id}: {problem}")
        return letter

    async def _requeue(
        self, conn: AsyncConnection, letter: DeadLetter, actor: str, now: int
    ) -> None:
        """Write the letter's envelope to the outbox for its topic and mark it replayed."""
        env = letter.envelope()
        assert env is not None
        await self.outbox.add(
            conn, [Routed(letter.topic, env.with_attempt(0), {h.REPLAYED_FROM_DLQ: str(letter.id)})]
        )
        await conn.execute(
            sa.update(D)
            .where(D.c.id == letter.id)
            .values(status=DeadLetterStatus.REPLAYED, resolved_at=now)
        )
        await audit.record(
            conn,
            at=now,
            actor=actor,
            action="dlq.replay",
            target=str(letter.id),
            result="ok",
            detail={"topic": letter.topic, "event_id": letter.event_id},
        )

    async def dismiss(self, dead_letter_ids: Sequence[int], *, actor: str, reason: str = "") -> int:
        """Mark pending dead letters dismissed; returns how many changed. Audited per id."""
        now = self.clock.now_ms()
        changed = 0
        async with self.engine.begin() as conn:
            for dl_id in dead_letter_ids:
                result = await conn.execute(
                    sa.update(D)
                    .where(D.c.id == dl_id, D.c.status == DeadLetterStatus.PENDING)
                    .values(status=DeadLetterStatus.DISMISSED, resolved_at=now)
                    .returning(D.c.id)
                )
                ok = result.first() is not None
                changed += int(ok)
                await audit.record(
                    conn,
                    at=now,
                    actor=actor,
                    action="dlq.dismiss",
                    target=str(dl_id),
                    result="ok" if ok else "not-pending",
                    detail={"reason": reason},
                )
        return changed


def _replay_problem(letter: DeadLetter) -> str | None:
    if letter.status is not DeadLetterStatus.PENDING:
        return f"it is {letter.status}, only pending dead letters can be replayed"
    if letter.envelope() is None:
        return "its bytes are not a valid envelope; dismiss it and fix the producer"
    return None


def _row(r: sa.Row[Any]) -> DeadLetter:
    # Columns and fields share names; only the JSON/BLOB columns need normalising.
    fields = dict(r._mapping)
    fields.update(
        value=bytes(r.value),
        headers=r.headers or {},
        history=r.history or [],
        status=DeadLetterStatus(r.status),
    )
    return DeadLetter(**fields)
