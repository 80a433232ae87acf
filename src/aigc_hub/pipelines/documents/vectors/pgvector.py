"""The vector store in PostgreSQL with pgvector (at scale): HNSW, cosine distance.

The store has a database of its own (its URL), not the hub's: pgvector may live in another
PostgreSQL than the hub's tables. Opening creates what it needs, idempotently, under an
advisory lock (several processes may open at once): the extension, the tables, and per
vector dimension a partial HNSW index (``sql.pg_hnsw_index``), made when a namespace of a
new dimension is first written. That first write scans the table once to build the empty
index; every later write of that dimension only adds to it.

A batch is COPYed (binary) into a per-connection staging table, then upserted in one
statement, all in one transaction. Searches set ``hnsw.ef_search`` to at least ``k`` and,
when the server's pgvector has it (0.8 and later), ``hnsw.iterative_scan``, so a search
filtered to one knowledge base still finds ``k`` rows when the nearest candidates of the
whole index belong to others. HNSW is approximate: :attr:`exact` is False.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence

import numpy as np

from aigc_hub.core.errors import ConfigurationError

from . import checks, sql
from .base import (
    MAX_DIMENSIONS,
    MAX_K,
    ChunkOfAnotherTenant,
    DimensionMismatch,
    Hit,
    Vector,
    VectorItem,
    VectorStoreClosed,
    VectorStoreUnavailable,
)

try:
    import pgvector
    import psycopg
    import psycopg_pool
    from pgvector.psycopg import register_vector_async
    from psycopg.rows import TupleRow
except ImportError as exc:  # pragma: no cover - the extra is installed in dev
    raise ImportError(
        "the pgvector vector store needs psycopg and pgvector: pip install 'aigc-hub[postgres]'"
    ) from exc

Connection = psycopg.AsyncConnection[TupleRow]

#: pgvector's first version with ``hnsw.iterative_scan``.
ITERATIVE_SCAN_SINCE = (0, 8, 0)
#: ``hnsw.ef_search``'s default; a search keeps at least this many candidates.
EF_SEARCH = 40


class PgVectorStore:
    """Vectors in PostgreSQL (pgvector), searched through per-dimension HNSW indexes."""

    engine = "pgvector"
    dimensions = MAX_DIMENSIONS
    exact = False

    def __init__(
        self,
        url: str,
        pool: psycopg_pool.AsyncConnectionPool[Connection],
        version: str,
        *,
        ef_search: int = EF_SEARCH,
    ) -> None:
        self.url = url
        #: Candidates a search keeps (at least ``k``): more finds more of the true nearest,
        #: slower.
        self.ef_search = ef_search
        #: The server's pgvector version, and whether it has iterative index scans.
        self.version = version
        self.iterative_scan = _version(version) >= ITERATIVE_SCAN_SINCE
        self._pool = pool
        #: Namespace -> dimension, as committed (a namespace's dimension never changes).
        self._dimensions: dict[str, int] = {}
        self._closed = False

    @classmethod
    async def open(
        cls,
        url: str,
        *,
        max_connections: int = 4,
        timeout_s: float = 10.0,
        ef_search: int = EF_SEARCH,
    ) -> PgVectorStore:
        """Create the schema (idempotent), then open a pool of up to ``max_connections``.
        ``VectorStoreUnavailable`` when the server does not answer within ``timeout_s``;
        ``ConfigurationError`` when it has no pgvector."""
        if not 1 <= ef_search <= MAX_K:
            raise ConfigurationError(f"ef_search is between 1 and {MAX_K}, not {ef_search}")
        version = await _create_schema(url, timeout_s)
        pool = psycopg_pool.AsyncConnectionPool(
            url,
            min_size=1,
            max_size=max_connections,
            kwargs={"autocommit": True},
            configure=_configure,
            timeout=timeout_s,
            open=False,
            name="vectors",
        )
        try:
            await pool.open(wait=True, timeout=timeout_s)
        except psycopg_pool.PoolTimeout as exc:
            await pool.close()
            raise VectorStoreUnavailable(f"vector store {_safe(url)}: {exc}") from exc
        return cls(url, pool, version, ef_search=ef_search)

    async def upsert(self, namespace: str, items: Sequence[VectorItem]) -> int:
        """Write the items in one transaction; the rows newly created (see ``VectorStore``)."""
        checked, dimension = checks.items(items)
        if not checked:
            return 0
        async with self._connection() as conn, conn.transaction(), conn.cursor() as cur:
            bound = self._dimensions.get(namespace) or await _bind(cur, namespace, dimension)
            if bound != dimension:
                raise DimensionMismatch(namespace, bound, dimension)
            async with cur.copy(sql.PG_COPY) as copy:
                copy.set_types(sql.PG_COPY_TYPES)
                for item in checked:
                    await copy.write_row(sql.pg_row(namespace, item))
            await cur.execute(sql.PG_UPSERT)
            created = sum(1 for (is_new,) in await cur.fetchall() if is_new)
            # Checked after the upsert, which leaves another tenant's rows alone: this also
            # sees one committed by a concurrent writer while the upsert waited on its lock.
            await cur.execute(sql.PG_FOREIGN_CHUNK)
            foreign = await cur.fetchone()
            if foreign is not None:
                raise ChunkOfAnotherTenant(  # rolls the whole batch back
                    f"chunk {foreign[0]!r} of namespace {namespace!r} is another tenant's"
                )
        self._dimensions[namespace] = bound  # committed
        return created

    async def search(
        self, namespace: str, tenant_id: str, kb_id: str, query_vector: Vector, k: int
    ) -> list[Hit]:
        """The ``k`` nearest chunks of the knowledge base, best first (approximate)."""
        query, k = checks.vector(query_vector, "query_vector"), checks.k(k)
        async with self._connection() as conn, conn.transaction(), conn.cursor() as cur:
            dimension = self._dimensions.get(namespace)
            if dimension is None:
                await cur.execute(sql.PG_NAMESPACE_DIMENSION, (namespace,))
                found = await cur.fetchone()
                if found is None:
                    return []  # a namespace never written
                dimension = self._dimensions[namespace] = int(found[0])
            if dimension != len(query):
                raise DimensionMismatch(namespace, dimension, len(query))
            settings = (
                sql.PG_SEARCH_SETTINGS_ITERATIVE if self.iterative_scan else sql.PG_SEARCH_SETTINGS
            )
            await cur.execute(settings, (str(max(self.ef_search, k)),))
            parameters = {"query": query, "namespace": namespace, "tenant_id": tenant_id}
            await cur.execute(sql.pg_search(dimension), {**parameters, "kb_id": kb_id, "k": k})
            rows = await cur.fetchall()
        return [
            Hit(str(r[0]), str(r[1]), tenant_id, kb_id, int(r[2]), int(r[3]), int(r[4]),
                str(r[5]), float(r[6]))
            for r in rows
        ]  # fmt: skip

    async def delete_document(self, tenant_id: str, document_id: str) -> int:
        """Delete the document's vectors in every namespace; how many."""
        return await self._execute(sql.PG_DELETE_DOCUMENT, (tenant_id, document_id))

    async def delete_namespace(self, namespace: str, tenant_id: str, kb_id: str) -> int:
        """Delete one knowledge base's vectors of one namespace; how many."""
        return await self._execute(sql.PG_DELETE_KB, (namespace, tenant_id, kb_id))

    async def count(
        self,
        namespace: str,
        *,
        tenant_id: str | None = None,
        kb_id: str | None = None,
        document_id: str | None = None,
    ) -> int:
        """How many vectors the namespace holds, narrowed by the filters given."""
        filters = {"tenant_id": tenant_id, "kb_id": kb_id, "document_id": document_id}
        query, parameters = sql.count("%s", namespace, filters)
        async with self._connection() as conn:
            found = await (await conn.execute(query, parameters)).fetchone()
        assert found is not None  # count(*) answers one row
        return int(found[0])

    async def items_of(self, namespace: str, tenant_id: str, document_id: str) -> list[VectorItem]:
        """The document's stored chunks with their vectors, in chunk order."""
        async with self._connection() as conn:
            cur = await conn.execute(sql.PG_ITEMS_OF, (namespace, tenant_id, document_id))
            rows = await cur.fetchall()
        return [
            VectorItem(
                str(chunk_id), document_id, tenant_id, str(kb), int(ordinal), int(start),
                int(end), str(text), _array(embedding),
            )
            for chunk_id, kb, ordinal, start, end, text, embedding in rows
        ]  # fmt: skip

    async def chunk_ids(self, namespace: str, tenant_id: str, document_id: str) -> set[str]:
        """The ids of the document's chunks stored in the namespace."""
        async with self._connection() as conn:
            cur = await conn.execute(sql.PG_CHUNK_IDS, (namespace, tenant_id, document_id))
            return {str(row[0]) for row in await cur.fetchall()}

    async def close(self) -> None:
        """Close the pool (waiting for connections in use to come back)."""
        self._closed = True
        await self._pool.close()

    async def _execute(self, statement: str, parameters: tuple[str, ...]) -> int:
        """Run one write statement in its own transaction; the rows it touched."""
        async with self._connection() as conn:
            cur = await conn.execute(statement, parameters)
            return cur.rowcount

    @contextlib.asynccontextmanager
    async def _connection(self) -> AsyncIterator[Connection]:
        """A pooled connection; lost connections, timeouts and deadlocks become retryable."""
        if self._closed:
            raise VectorStoreClosed()
        try:
            async with self._pool.connection() as conn:
                yield conn
        except (psycopg_pool.PoolTimeout, psycopg.OperationalError) as exc:
            # OperationalError covers a lost server, DeadlockDetected, SerializationFailure
            raise VectorStoreUnavailable(f"vector store {_safe(self.url)}: {exc}") from exc


async def _create_schema(url: str, timeout_s: float) -> str:
    """The extension, tables and indexes, once (under the schema lock); pgvector's version."""
    try:
        conn = await psycopg.AsyncConnection.connect(
            url, autocommit=True, connect_timeout=max(1, round(timeout_s))
        )
    except psycopg.OperationalError as exc:
        raise VectorStoreUnavailable(f"vector store {_safe(url)}: {exc}") from exc
    async with conn, conn.transaction(), conn.cursor() as cur:
        await cur.execute(sql.PG_LOCK, (sql.PG_SCHEMA_LOCK,))
        try:
            await cur.execute(sql.PG_SCHEMA[0])
        except psycopg.Error as exc:
            raise ConfigurationError(
                f"vector store {_safe(url)}: pgvector is not available in that PostgreSQL "
                f"(CREATE EXTENSION vector: {exc.sqlstate} {str(exc).strip()})"
            ) from exc
        for statement in sql.PG_SCHEMA[1:]:
            await cur.execute(statement)
        await cur.execute(sql.PG_VERSION)
        found = await cur.fetchone()
    assert found is not None  # the extension was just created
    return str(found[0])


async def _configure(conn: Connection) -> None:
    """A new pooled connection: numpy arrays as ``vector``, and its staging table."""
    await register_vector_async(conn)
    await conn.execute(sql.PG_STAGE)


async def _bind(cur: psycopg.AsyncCursor[TupleRow], namespace: str, dimension: int) -> int:
    """The namespace's dimension, set to ``dimension`` if it has none, and that dimension's
    HNSW index made if missing; inside the caller's transaction, under the schema lock."""
    await cur.execute(sql.PG_LOCK, (sql.PG_SCHEMA_LOCK,))
    await cur.execute(sql.PG_BIND_NAMESPACE, (namespace, dimension))
    await cur.execute(sql.PG_NAMESPACE_DIMENSION, (namespace,))
    found = await cur.fetchone()
    assert found is not None  # just inserted, or there before
    bound = int(found[0])
    if bound == dimension:
        # Checked first: CREATE INDEX IF NOT EXISTS would lock the table even when the
        # index exists, stalling other writers until this transaction ends.
        await cur.execute(sql.PG_INDEX_EXISTS, (sql.pg_hnsw_name(dimension),))
        exists = await cur.fetchone()
        if exists is None or not exists[0]:
            await cur.execute(sql.pg_hnsw_index(dimension))
    return bound


def _array(embedding: object) -> Vector:
    """A ``vector`` column as pgvector's loader gives it, as a float32 array."""
    assert isinstance(embedding, pgvector.Vector), type(embedding)
    array: Vector = np.asarray(embedding.to_numpy(), dtype=np.float32)
    return array


def _version(text: str) -> tuple[int, ...]:
    """``"0.8.5"`` -> ``(0, 8, 5)`` (a suffix such as ``-dev`` is ignored)."""
    parts = []
    for part in text.split("."):
        digits = "".join(c for c in part if c.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


def _safe(url: str) -> str:
    """``url`` without its password, for messages."""
    try:
        parameters = psycopg.conninfo.conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return "(unparsable URL)"
    parameters.pop("password", None)
    return psycopg.conninfo.make_conninfo("", **parameters)
