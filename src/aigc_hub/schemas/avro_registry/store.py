"""The registry's operations on the hub's database (SQLite or PostgreSQL), with Confluent's
rules: what a subject, a version and an id are, and when each is found.

* **Register.** A schema already live under the subject answers with its id and version,
  unchecked. Otherwise it must pass the subject's compatibility level against the live
  versions, then gets the schema's id (the same for the same schema in any subject, see
  :mod:`.parsing`) and the subject's next version number. A refused schema writes nothing.
* **Delete.** Soft first (the version stays readable by id, hidden from listings), then
  ``permanent``; a permanently deleted subject also loses its compatibility level.
* **Races.** Writers of one subject take turns (:func:`.rows.write`), so a registration is
  checked against the version registered just before it; the same new schema registered
  under two subjects at once gets one id (the loser of the fingerprint runs again).

Writes are recorded in the audit log, in the transaction that makes them.
"""

from __future__ import annotations

import avro.schema
import sqlalchemy as sa
from cachetools import LRUCache
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from aigc_hub.core.clock import Clock, SystemClock
from aigc_hub.schemas.avro_registry import compatibility, errors, levels, parsing, rows
from aigc_hub.schemas.avro_registry import tables as t
from aigc_hub.schemas.avro_registry.records import StoredSchema, SubjectVersion, check_subject
from aigc_hub.store.engine import reader

S, V, C = t.schema_registry_schemas, t.schema_registry_versions, t.schema_registry_config

#: Parsed schemas kept by id (ids never change meaning): checks parse each one once.
PARSED_CACHE = 512


class AvroRegistry:
    """A Confluent-compatible Avro schema registry on ``engine``; safe to share between
    tasks and processes (the database holds all state; the cache holds only immutable
    parsed schemas)."""

    def __init__(self, engine: AsyncEngine, clock: Clock | None = None) -> None:
        self.engine = engine
        self.clock: Clock = clock or SystemClock()
        self._parsed: LRUCache[int, parsing.ParsedSchema] = LRUCache(maxsize=PARSED_CACHE)
        #: The compatibility levels configured (the registry's and subjects' own).
        self.levels = levels.Levels(engine, self.clock)

    # --- reads --------------------------------------------------------------------------

    async def subjects(
        self, *, deleted: bool = False, deleted_only: bool = False, prefix: str = ""
    ) -> list[str]:
        """Subject names, sorted: those with a live version, or also (``deleted``) or only
        (``deleted_only``) those whose every version is soft-deleted."""
        live = sa.func.count(V.c.deleted_at) < sa.func.count()  # some row not deleted
        query = sa.select(V.c.subject).group_by(V.c.subject).order_by(V.c.subject)
        if prefix:
            query = query.where(V.c.subject.startswith(prefix, autoescape=True))
        if deleted_only:
            query = query.having(sa.not_(live))
        elif not deleted:
            query = query.having(live)
        async with reader(self.engine) as conn:
            return list((await conn.scalars(query)).all())

    async def versions(
        self, subject: str, *, deleted: bool = False, deleted_only: bool = False
    ) -> list[int]:
        """The subject's version numbers, ascending (live ones, unless asked otherwise).

        Raises :class:`errors.SubjectNotFound` when it has none to show."""
        history = await self._read_rows(subject)
        if not [r for r in history if deleted or deleted_only or not r.deleted]:
            raise errors.SubjectNotFound(subject)
        if deleted_only:
            return [r.version for r in history if r.deleted]
        return [r.version for r in history if deleted or not r.deleted]

    async def version(
        self, subject: str, version: int | None, *, deleted: bool = False
    ) -> SubjectVersion:
        """Version ``version`` of ``subject`` (None: the newest), live unless ``deleted``.

        Raises :class:`errors.SubjectNotFound` or :class:`errors.VersionNotFound`."""
        history = [r for r in await self._read_rows(subject) if deleted or not r.deleted]
        if not history:
            raise errors.SubjectNotFound(subject)
        if version is None:
            return history[-1]
        for row in history:
            if row.version == version:
                return row
        raise errors.VersionNotFound(version)

    async def lookup(
        self, subject: str, schema: parsing.ParsedSchema, *, deleted: bool = False
    ) -> SubjectVersion:
        """The newest version of ``subject`` holding ``schema`` (the same schema, however
        spaced). Raises :class:`errors.SubjectNotFound` or :class:`errors.SchemaNotFound`."""
        history = [r for r in await self._read_rows(subject) if deleted or not r.deleted]
        if not history:
            raise errors.SubjectNotFound(subject)
        async with reader(self.engine) as conn:
            schema_id = await rows.schema_id_of(conn, schema.fingerprint)
        for row in reversed(history):
            if row.schema_id == schema_id:
                return row
        raise errors.SchemaNotFound()

    async def schema(self, schema_id: int) -> StoredSchema:
        """The schema with id ``schema_id`` while some version (even soft-deleted) has it;
        :class:`errors.SchemaNotFound` otherwise, as after permanent deletes."""
        used = sa.exists().where(V.c.schema_id == S.c.id)
        query = sa.select(S.c.id, S.c.schema_type, S.c.schema).where(S.c.id == schema_id, used)
        async with reader(self.engine) as conn:
            row = (await conn.execute(query)).first()
        if row is None:
            raise errors.SchemaNotFound(schema_id)
        return StoredSchema(id=int(row.id), schema_type=row.schema_type, schema=row.schema)

    async def uses(self, schema_id: int, *, deleted: bool = False) -> list[tuple[str, int]]:
        """The (subject, version) pairs holding schema ``schema_id``, sorted; live ones unless
        ``deleted``. Raises :class:`errors.SchemaNotFound` for an id :meth:`schema` refuses."""
        query = (
            sa.select(V.c.subject, V.c.version, V.c.deleted_at)
            .where(V.c.schema_id == schema_id)
            .order_by(V.c.subject, V.c.version)
        )
        async with reader(self.engine) as conn:
            history = (await conn.execute(query)).all()
        if not history:
            raise errors.SchemaNotFound(schema_id)
        return [(r.subject, r.version) for r in history if deleted or r.deleted_at is None]

    async def check(
        self, subject: str, schema: parsing.ParsedSchema, version: int | None
    ) -> list[str]:
        """Why ``schema`` breaks the subject's level against one live version (None: the
        newest); empty when compatible. Raises :class:`errors.SubjectNotFound` or
        :class:`errors.VersionNotFound` for a version that is not live."""
        target = await self.version(subject, version)
        async with reader(self.engine) as conn:
            level = await levels.effective(conn, subject)
        against = level.compared_with([target])
        return compatibility.problems(level, schema.parsed, self._pairs(against))

    async def check_all(self, subject: str, schema: parsing.ParsedSchema) -> list[str]:
        """Why ``schema`` breaks the subject's level against the live versions the level
        names (all of them when transitive); a subject without versions accepts anything."""
        history = [r for r in await self._read_rows(subject) if not r.deleted]
        async with reader(self.engine) as conn:
            level = await levels.effective(conn, subject)
        return compatibility.problems(
            level, schema.parsed, self._pairs(level.compared_with(history))
        )

    # --- writes -------------------------------------------------------------------------

    async def register(
        self, subject: str, schema: parsing.ParsedSchema, *, actor: str
    ) -> SubjectVersion:
        """Register ``schema`` under ``subject``; the version holding it (see the module doc).

        Raises :class:`errors.InvalidSubject` and :class:`errors.IncompatibleSchema`."""
        check_subject(subject)
        return await rows.write(
            self.engine, subject, lambda c: self._register(c, subject, schema, actor)
        )

    async def _register(
        self, conn: AsyncConnection, subject: str, schema: parsing.ParsedSchema, actor: str
    ) -> SubjectVersion:
        history = await rows.subject_rows(conn, subject)
        live = [r for r in history if not r.deleted]
        schema_id = await rows.schema_id_of(conn, schema.fingerprint)
        for row in reversed(live):
            if row.schema_id == schema_id:
                return row  # registered already: same id, same version, no check
        level = await levels.effective(conn, subject)
        found = compatibility.problems(level, schema.parsed, self._pairs(level.compared_with(live)))
        if found:
            raise errors.IncompatibleSchema(subject, level.value, found)
        now = self.clock.now_ms()
        if schema_id is None:
            inserted = await conn.execute(
                S.insert()
                .values(
                    schema_type=parsing.AVRO,
                    fingerprint=schema.fingerprint,
                    schema=schema.text,
                    created_at=now,
                )
                .returning(S.c.id)
            )
            schema_id = int(inserted.scalar_one())
        number = max((r.version for r in history), default=0) + 1
        await conn.execute(
            V.insert().values(subject=subject, version=number, schema_id=schema_id, created_at=now)
        )
        await rows.record(
            conn, self.clock, actor, "schema.register", subject, id=schema_id, version=number
        )
        stored = (await conn.execute(sa.select(S.c.schema).where(S.c.id == schema_id))).scalar_one()
        return SubjectVersion(subject, number, schema_id, parsing.AVRO, stored, deleted=False)

    async def delete_subject(self, subject: str, *, permanent: bool, actor: str) -> list[int]:
        """Soft-delete every live version of ``subject`` or (``permanent``, after a soft
        delete) remove them and its level; the versions deleted. Raises
        :class:`errors.SubjectNotFound`, :class:`errors.SubjectSoftDeleted` and
        :class:`errors.SubjectNotSoftDeleted`."""

        async def work(conn: AsyncConnection) -> list[int]:
            history = await rows.subject_rows(conn, subject)
            if not history:
                raise errors.SubjectNotFound(subject)
            live = [r.version for r in history if not r.deleted]
            mine = V.c.subject == subject
            if not permanent:
                if not live:
                    raise errors.SubjectSoftDeleted(subject)
                now = self.clock.now_ms()
                await conn.execute(
                    V.update().where(mine, V.c.version.in_(live)).values(deleted_at=now)
                )
                await rows.record(
                    conn, self.clock, actor, "schema.delete_subject", subject, versions=live
                )
                return live
            if live:
                raise errors.SubjectNotSoftDeleted(subject)
            await conn.execute(V.delete().where(mine))
            await conn.execute(C.delete().where(C.c.subject == subject))
            gone = [r.version for r in history]
            await rows.record(
                conn, self.clock, actor, "schema.purge_subject", subject, versions=gone
            )
            return gone

        return await rows.write(self.engine, subject, work)

    async def delete_version(
        self, subject: str, version: int | None, *, permanent: bool, actor: str
    ) -> int:
        """Soft-delete one version (None: the newest live one) or, ``permanent``, remove a
        soft-deleted one (None: the newest); the version deleted. Raises
        :class:`errors.SubjectNotFound`, :class:`errors.VersionNotFound`,
        :class:`errors.VersionSoftDeleted` and :class:`errors.VersionNotSoftDeleted`."""

        async def work(conn: AsyncConnection) -> int:
            history = await rows.subject_rows(conn, subject)
            if not history:
                raise errors.SubjectNotFound(subject)
            visible = history if permanent else [r for r in history if not r.deleted]
            if version is None:
                if not visible:
                    raise errors.VersionNotFound("latest")
                row = visible[-1]
            else:
                matching = [r for r in history if r.version == version]
                if not matching:
                    raise errors.VersionNotFound(version)
                row = matching[0]
            key = (V.c.subject == subject, V.c.version == row.version)
            if not permanent:
                if row.deleted:
                    raise errors.VersionSoftDeleted(subject, row.version)
                await conn.execute(V.update().where(*key).values(deleted_at=self.clock.now_ms()))
                await rows.record(
                    conn, self.clock, actor, "schema.delete_version", subject, version=row.version
                )
                return row.version
            if not row.deleted:
                raise errors.VersionNotSoftDeleted(subject, row.version)
            await conn.execute(V.delete().where(*key))
            await rows.record(
                conn, self.clock, actor, "schema.purge_version", subject, version=row.version
            )
            return row.version

        return await rows.write(self.engine, subject, work)

    # --- helpers ------------------------------------------------------------------------

    async def _read_rows(self, subject: str) -> list[SubjectVersion]:
        async with reader(self.engine) as conn:
            return await rows.subject_rows(conn, subject)

    def _pairs(self, history: list[SubjectVersion]) -> list[tuple[int, avro.schema.Schema]]:
        """(version, parsed schema) of ``history``: each id parsed once per process."""
        pairs: list[tuple[int, avro.schema.Schema]] = []
        for row in history:
            parsed = self._parsed.get(row.schema_id)
            if parsed is None:
                parsed = self._parsed[row.schema_id] = parsing.parse(row.schema)
            pairs.append((row.version, parsed.parsed))
        return pairs
