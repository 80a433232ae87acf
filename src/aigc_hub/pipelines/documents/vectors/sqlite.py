"""The vector store in a SQLite file (the embedded default), searched exactly with numpy.

Vectors are float32 BLOBs; a search scores a knowledge base's whole matrix, kept in memory
(``matrices.py``) and brought up to date from the ``vector_generations`` table, which every
write bumps in its own transaction: several processes may share the file. This CPython cannot
load SQLite extensions, so there is no sqlite-vec. The product reads the whole matrix, so it
is bound by memory bandwidth: 100,000 384-d vectors are 154 MB, tens of milliseconds a query
(bench/documents_vectors.py); past that size, a knowledge base belongs in pgvector.

Each worker thread has its own connection (a sqlite3 connection is not for two threads at
once) and every call runs in one (``asyncio.to_thread``). Writes are one ``BEGIN IMMEDIATE``
transaction per call: the write lock is taken first, so the rows a write reads to decide
(which chunks exist, of which tenant) cannot change before it commits. The file is in WAL
mode: searches read a snapshot while a write goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import NamedTuple, ParamSpec, TypeVar

import numpy as np

from . import checks, matrices, sql
from .base import (
    MAX_DIMENSIONS,
    ChunkOfAnotherTenant,
    DimensionMismatch,
    Hit,
    Vector,
    VectorItem,
    VectorStoreClosed,
    VectorStoreUnavailable,
)

#: Default memory for cached matrices (about 700,000 384-d vectors).
CACHE_BYTES = 1 << 30
#: A search whose matrix holds a row its own snapshot does not show (another thread moved
#: the matrix past that snapshot, or the file went back: restored from a backup) drops the
#: matrix and searches again; after this many attempts it returns the rows it can show.
SEARCH_ATTEMPTS = 3
#: SQLite's limit on host parameters is 32,766; chunk id lookups stay well below it.
_LOOKUP_BATCH = 500

P = ParamSpec("P")
T = TypeVar("T")


class _Stored(NamedTuple):
    """A stored chunk: its row id, owner, and the values ``SQLITE_UPDATE`` would set."""

    id: int
    tenant_id: str
    kb_id: str
    values: tuple[object, ...]


class _Shown(NamedTuple):
    """What a hit shows of a row."""

    chunk_id: str
    document_id: str
    ordinal: int
    start: int
    end: int
    text: str


class SQLiteVectorStore:
    """Vectors in one SQLite file; exact cosine search over in-memory matrices."""

    engine = "sqlite"
    dimensions = MAX_DIMENSIONS
    exact = True

    def __init__(
        self, path: str | Path, *, cache_bytes: int = CACHE_BYTES, busy_timeout_s: float = 5.0
    ) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.busy_timeout_s = busy_timeout_s
        self.matrices = matrices.MatrixCache(cache_bytes)
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._guard = threading.Lock()
        self._closed = False
        with self._translated():
            connection = self._connection()
            connection.execute("PRAGMA journal_mode=WAL")
            with self._write(connection):
                for statement in sql.SQLITE_SCHEMA:
                    connection.execute(statement)

    # -- the protocol ---------------------------------------------------------------

    async def upsert(self, namespace: str, items: Sequence[VectorItem]) -> int:
        """Write the items in one transaction; the rows newly created (see ``VectorStore``)."""
        checked, dimension = checks.items(items)
        if not checked:
            return 0
        return await self._call(self._upsert, namespace, checked, dimension)

    async def search(
        self, namespace: str, tenant_id: str, kb_id: str, query_vector: Vector, k: int
    ) -> list[Hit]:
        """The ``k`` nearest chunks of the knowledge base, best first (exact)."""
        query = checks.vector(query_vector, "query_vector")
        return await self._call(self._search, (namespace, tenant_id, kb_id), query, checks.k(k))

    async def delete_document(self, tenant_id: str, document_id: str) -> int:
        """Delete the document's vectors in every namespace; how many."""
        return await self._call(self._delete, sql.SQLITE_DOCUMENT_WHERE, (tenant_id, document_id))

    async def delete_namespace(self, namespace: str, tenant_id: str, kb_id: str) -> int:
        """Delete one knowledge base's vectors of one namespace; how many."""
        return await self._call(self._delete, sql.SQLITE_KB_WHERE, (namespace, tenant_id, kb_id))

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
        query, parameters = sql.count("?", namespace, filters)
        return await self._call(self._count, query, parameters)

    async def items_of(self, namespace: str, tenant_id: str, document_id: str) -> list[VectorItem]:
        """The document's stored chunks with their vectors, in chunk order."""
        return await self._call(self._items_of, namespace, tenant_id, document_id)

    async def chunk_ids(self, namespace: str, tenant_id: str, document_id: str) -> set[str]:
        """The ids of the document's chunks stored in the namespace."""
        return await self._call(self._chunk_ids, (namespace, tenant_id, document_id))

    async def close(self) -> None:
        """Close every thread's connection (the last one checkpoints the WAL, so in a worker
        thread) and drop the matrices."""
        with self._guard:
            self._closed = True
            connections, self._connections = self._connections, []
        await asyncio.to_thread(_close_all, connections)
        self.matrices.clear()

    # -- in a worker thread ---------------------------------------------------------

    def _upsert(self, namespace: str, items: list[VectorItem], dimension: int) -> int:
        connection = self._connection()
        with self._write(connection):
            connection.execute(sql.SQLITE_BIND_NAMESPACE, (namespace, dimension))
            bound = int(
                connection.execute(sql.SQLITE_NAMESPACE_DIMENSION, (namespace,)).fetchone()[0]
            )
            if bound != dimension:
                raise DimensionMismatch(namespace, bound, dimension)
            stored = self._stored(connection, namespace, [item.chunk_id for item in items])
            created: list[sql.SqliteRow] = []
            changed: list[tuple[object, ...]] = []
            appended: set[matrices.Key] = set()
            reset: set[matrices.Key] = set()
            for item in items:
                key = (namespace, item.tenant_id, item.kb_id)
                row = sql.sqlite_row(namespace, item)
                old = stored.get(item.chunk_id)
                if old is None:
                    created.append(row)
                    appended.add(key)
                elif old.tenant_id != item.tenant_id:
                    raise ChunkOfAnotherTenant(
                        f"chunk {item.chunk_id!r} of namespace {namespace!r} is another tenant's"
                    )
                elif old.values != row[2:]:
                    # Rewritten in place (same id): cached matrices of the knowledge base it
                    # leaves and the one it joins can no longer be extended, only reloaded.
                    changed.append((*row[2:], old.id))
                    reset |= {key, (namespace, old.tenant_id, old.kb_id)}
                # else: the very same chunk again (a re-delivered event): nothing to write.
            connection.executemany(sql.SQLITE_INSERT, created)
            connection.executemany(sql.SQLITE_UPDATE, changed)
            for key in appended - reset:
                connection.execute(sql.SQLITE_BUMP, (*key, 0))
            for key in reset:
                connection.execute(sql.SQLITE_BUMP, (*key, 1))
        return len(created)

    def _stored(
        self, connection: sqlite3.Connection, namespace: str, chunk_ids: list[str]
    ) -> dict[str, _Stored]:
        """The stored rows of these chunk ids, by chunk id."""
        found: dict[str, _Stored] = {}
        for start in range(0, len(chunk_ids), _LOOKUP_BATCH):
            part = chunk_ids[start : start + _LOOKUP_BATCH]
            for row in connection.execute(sql.sqlite_stored(len(part)), (namespace, *part)):
                found[str(row[0])] = _Stored(int(row[1]), str(row[2]), str(row[3]), tuple(row[2:]))
        return found

    def _search(self, key: matrices.Key, query: Vector, k: int) -> list[Hit]:
        connection = self._connection()
        hits: list[Hit] = []
        for _ in range(SEARCH_ATTEMPTS):
            with self._read_transaction(connection):
                found = connection.execute(sql.SQLITE_NAMESPACE_DIMENSION, (key[0],)).fetchone()
                if found is None:
                    return []  # a namespace never written
                dimension = int(found[0])
                if dimension != len(query):
                    raise DimensionMismatch(key[0], dimension, len(query))
                found = connection.execute(sql.SQLITE_GENERATION, key).fetchone()
                if found is None:
                    self.matrices.discard(key)
                    return []  # a knowledge base never written in this namespace
                generation, reset_at = int(found[0]), int(found[1])
                load = functools.partial(self._load, connection, key, dimension)
                snapshot = self.matrices.refresh(key, dimension, generation, reset_at, load)
                ids, scores = snapshot.nearest(query, k)
                shown = self._shown(connection, key, [int(i) for i in ids])
            hits = [
                Hit(r.chunk_id, r.document_id, key[1], key[2], r.ordinal, r.start, r.end, r.text,
                    float(score))
                for i, score in zip(ids, scores, strict=True)
                if (r := shown.get(int(i))) is not None
            ]  # fmt: skip
            if len(hits) == len(ids):
                break
            self.matrices.discard(key)  # the next attempt loads it from its own snapshot
        return hits

    @staticmethod
    def _load(
        connection: sqlite3.Connection, key: matrices.Key, dimension: int, after: int
    ) -> tuple[matrices.Ids, matrices.Rows]:
        """The ids and vectors of the knowledge base's rows with an id above ``after``."""
        rows = connection.execute(sql.SQLITE_LOAD, (*key, after)).fetchall()
        ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
        vectors = np.frombuffer(b"".join(r[1] for r in rows), dtype=np.float32)
        return ids, vectors.reshape(len(rows), dimension)

    @staticmethod
    def _shown(
        connection: sqlite3.Connection, key: matrices.Key, ids: list[int]
    ) -> dict[int, _Shown]:
        """What hits show of these rows, by row id (rows no longer in the knowledge base of
        ``key`` are absent)."""
        rows = connection.execute(sql.sqlite_shown(len(ids)), [*key, *ids])
        return {
            int(r[0]): _Shown(str(r[1]), str(r[2]), int(r[3]), int(r[4]), int(r[5]), str(r[6]))
            for r in rows
        }

    def _delete(self, where: str, parameters: tuple[str, ...]) -> int:
        connection = self._connection()
        with self._write(connection):
            keys = connection.execute(sql.sqlite_groups(where), parameters).fetchall()
            deleted = int(connection.execute(sql.sqlite_delete(where), parameters).rowcount)
            for key in keys:
                connection.execute(sql.SQLITE_BUMP, (*key, 1))
        return deleted

    def _count(self, query: str, parameters: list[str]) -> int:
        return int(self._connection().execute(query, parameters).fetchone()[0])

    def _items_of(self, namespace: str, tenant_id: str, document_id: str) -> list[VectorItem]:
        rows = self._connection().execute(sql.SQLITE_ITEMS_OF, (namespace, tenant_id, document_id))
        return [
            VectorItem(
                str(r[0]), document_id, tenant_id, str(r[1]), int(r[2]), int(r[3]), int(r[4]),
                str(r[5]), np.frombuffer(r[6], dtype=np.float32),
            )
            for r in rows
        ]  # fmt: skip

    def _chunk_ids(self, parameters: tuple[str, str, str]) -> set[str]:
        rows = self._connection().execute(sql.SQLITE_CHUNK_IDS, parameters)
        return {str(row[0]) for row in rows}

    # -- plumbing -------------------------------------------------------------------

    async def _call(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Run ``fn`` in a worker thread, with SQLite's lock errors made retryable."""

        def run() -> T:
            with self._translated():
                return fn(*args, **kwargs)

        return await asyncio.to_thread(run)

    @contextlib.contextmanager
    def _translated(self) -> Iterator[None]:
        try:
            yield
        except sqlite3.OperationalError as exc:
            # "database is locked" past the busy timeout, or the file went away
            raise VectorStoreUnavailable(f"vector store {self.path}: {exc}") from exc

    def _connection(self) -> sqlite3.Connection:
        """This thread's connection (opened on its first use)."""
        with self._guard:
            if self._closed:
                raise VectorStoreClosed()
            connection: sqlite3.Connection | None = getattr(self._local, "connection", None)
            if connection is None:
                # check_same_thread=False only so that close() may close every thread's
                # connection; each is still used by its own thread alone.
                connection = sqlite3.connect(
                    self.path,
                    timeout=self.busy_timeout_s,
                    isolation_level=None,
                    check_same_thread=False,
                )
                connection.execute("PRAGMA synchronous=NORMAL")
                connection.execute("PRAGMA foreign_keys=ON")
                self._connections.append(connection)
                self._local.connection = connection
            return connection

    @staticmethod
    @contextlib.contextmanager
    def _write(connection: sqlite3.Connection) -> Iterator[None]:
        connection.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            connection.execute("ROLLBACK")
            raise
        connection.execute("COMMIT")

    @staticmethod
    @contextlib.contextmanager
    def _read_transaction(connection: sqlite3.Connection) -> Iterator[None]:
        connection.execute("BEGIN")
        try:
            yield
        finally:
            connection.execute("COMMIT")


def _close_all(connections: list[sqlite3.Connection]) -> None:
    """Close the connections, in this (worker) thread."""
    for connection in connections:
        connection.close()
