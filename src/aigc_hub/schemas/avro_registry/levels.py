"""Compatibility levels as configured: the registry's (default BACKWARD) and subjects' own.

A subject may be given a level before it has any version (Confluent allows it), so a level
is not tied to versions; it goes when the level is deleted or the subject is permanently
deleted.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from aigc_hub.core.clock import Clock
from aigc_hub.schemas.avro_registry import compatibility, errors, rows
from aigc_hub.schemas.avro_registry import tables as t
from aigc_hub.schemas.avro_registry.compatibility import Compatibility
from aigc_hub.schemas.avro_registry.records import check_subject
from aigc_hub.store import dialects
from aigc_hub.store.engine import reader

C = t.schema_registry_config

#: The config row of the registry-wide level (no subject may be empty).
GLOBAL = ""


async def configured(conn: AsyncConnection, subject: str | None) -> dict[str, Compatibility]:
    """The levels set for ``subject`` and for the registry, by config key."""
    keys = [GLOBAL] if subject is None else [GLOBAL, subject]
    found = await conn.execute(
        sa.select(C.c.subject, C.c.compatibility).where(C.c.subject.in_(keys))
    )
    return {row.subject: Compatibility(row.compatibility) for row in found}


async def effective(conn: AsyncConnection, subject: str) -> Compatibility:
    """The level that applies to ``subject``: its own, else the registry's, else BACKWARD."""
    levels = await configured(conn, subject)
    return levels.get(subject, levels.get(GLOBAL, compatibility.DEFAULT))


class Levels:
    """Read and change the configured levels; writes are audited."""

    def __init__(self, engine: AsyncEngine, clock: Clock) -> None:
        self.engine = engine
        self.clock = clock

    async def get(
        self, subject: str | None = None, *, default_to_global: bool = False
    ) -> Compatibility:
        """The registry's level (``subject`` None), or the subject's own: without one,
        :class:`errors.SubjectConfigNotFound`, or the registry's with ``default_to_global``."""
        async with reader(self.engine) as conn:
            levels = await configured(conn, subject)
        if subject is not None and subject in levels:
            return levels[subject]
        if subject is not None and not default_to_global:
            raise errors.SubjectConfigNotFound(subject)
        return levels.get(GLOBAL, compatibility.DEFAULT)

    async def set(self, subject: str | None, level: Compatibility, *, actor: str) -> Compatibility:
        """Set the registry's level (``subject`` None) or a subject's own; returns ``level``.

        Raises :class:`errors.InvalidSubject` for a name no subject may have."""
        key = GLOBAL if subject is None else check_subject(subject)

        async def work(conn: AsyncConnection) -> Compatibility:
            values = {"compatibility": level.value, "updated_at": self.clock.now_ms()}
            upsert = dialects.dialect_of(conn).insert(C).values(subject=key, **values)
            await conn.execute(
                upsert.on_conflict_do_update(index_elements=[C.c.subject], set_=values)
            )
            await rows.record(
                conn, self.clock, actor, "schema.config", key or "*", level=level.value
            )
            return level

        return await rows.write(self.engine, key, work)

    async def delete(self, subject: str, *, actor: str) -> Compatibility:
        """Drop a subject's own level (the registry's applies again); the level it had.

        Raises :class:`errors.SubjectNotFound` when it had none (Confluent's 40401)."""

        async def work(conn: AsyncConnection) -> Compatibility:
            levels = await configured(conn, subject)
            if subject not in levels:
                raise errors.SubjectNotFound(subject)
            await conn.execute(C.delete().where(C.c.subject == subject))
            await rows.record(conn, self.clock, actor, "schema.config_delete", subject)
            return levels[subject]

        return await rows.write(self.engine, subject, work)
