"""The outbox writer: events join the caller's transaction, so facts and events commit together."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncConnection

from aigc_hub.core.clock import Clock, SystemClock
from aigc_hub.core.envelope import Envelope
from aigc_hub.core.errors import ConfigurationError
from aigc_hub.messaging import headers as h
from aigc_hub.store import tables
from aigc_hub.store.grouped import insert_rows


@dataclass(frozen=True)
class Routed:
    """An envelope bound for a topic, with extra headers (e.g. dead-letter reasons)."""

    topic: str
    envelope: Envelope
    headers: Mapping[str, str] | None = None


class EventRoutes:
    """Which topic each event type is published to."""

    def __init__(self, routes: Mapping[str, str] | None = None) -> None:
        self._routes: dict[str, str] = dict(routes or {})

    def add(self, event_type: str, topic: str) -> None:
        """Route ``event_type`` to ``topic``; a second, different route is an error."""
        existing = self._routes.get(event_type)
        if existing is not None and existing != topic:
            raise ConfigurationError(f"event {event_type!r} routed to {existing!r} and {topic!r}")
        self._routes[event_type] = topic

    def topic_for(self, event_type: str) -> str:
        """The topic of ``event_type``; ConfigurationError when it has no route."""
        try:
            return self._routes[event_type]
        except KeyError:
            raise ConfigurationError(f"no topic routes event type {event_type!r}") from None


class OutboxWriter:
    """Adds outbox rows inside the caller's transaction; the relay publishes them later."""

    def __init__(self, routes: EventRoutes, clock: Clock | None = None) -> None:
        self.routes = routes
        self.clock = clock or SystemClock()

    def route(self, envelopes: Sequence[Envelope | Routed]) -> list[Routed]:
        """Resolve each envelope's topic from its event type (a Routed keeps its own)."""
        return [
            item
            if isinstance(item, Routed)
            else Routed(self.routes.topic_for(item.event_type), item)
            for item in envelopes
        ]

    async def add(self, conn: AsyncConnection, envelopes: Sequence[Envelope | Routed]) -> int:
        """Insert one outbox row per event in ``conn``'s transaction; returns the count.

        In a grouped service call the rows are inserted with the group's others at its end.
        """
        if not envelopes:
            return 0
        now = self.clock.now_ms()
        rows = []
        for item in self.route(envelopes):
            env = item.envelope
            hdrs = h.for_envelope(
                env.event_id, env.event_type, env.schema_version, env.trace_id, env.tenant_id
            )
            if item.headers:
                hdrs.update(item.headers)
            rows.append(
                {
                    "event_id": env.event_id,
                    "topic": item.topic,
                    "key": env.key,
                    "event_type": env.event_type,
                    "schema_version": env.schema_version,
                    "tenant_id": env.tenant_id,
                    "value": env.to_bytes(),
                    "headers": hdrs,
                    "created_at": now,
                    "attempt_count": 0,
                }
            )
        await insert_rows(conn, tables.outbox, rows)
        return len(rows)

    async def add_raw(
        self,
        conn: AsyncConnection,
        topic: str,
        key: str | None,
        value: bytes,
        headers: Mapping[str, str],
    ) -> None:
        """Insert a row carrying bytes that are not (or need not be) a valid envelope."""
        await conn.execute(
            tables.outbox.insert().values(
                event_id=headers.get(h.EVENT_ID, ""),
                topic=topic,
                key=key or "",
                event_type=headers.get(h.EVENT_TYPE),
                schema_version=None,
                tenant_id=headers.get(h.TENANT_ID),
                value=value,
                headers=dict(headers),
                created_at=self.clock.now_ms(),
                attempt_count=0,
            )
        )
