"""Every statement the vector stores run, SQLite's and PostgreSQL's side by side.

Both dialects keep the same two tables: ``vector_namespaces`` (a namespace's dimension, set
by its first write) and ``vector_chunks`` (one row per ``(namespace, chunk_id)``). Each row
repeats its namespace's dimension, tied to it by a foreign key on ``(namespace, dimensions)``
and to its vector by a CHECK, so the database itself refuses a vector of the wrong size:
never a corrupt row, whoever writes. SQLite adds ``vector_generations``, what its in-memory
matrices are checked against (``matrices.py``).
"""

from __future__ import annotations

from .base import MAX_DIMENSIONS, Vector, VectorItem

_CHUNK_COLUMNS = (
    "namespace, chunk_id, tenant_id, kb_id, document_id, ordinal, start_offset, end_offset, "
    "text, dimensions, embedding"
)

# -- SQLite ---------------------------------------------------------------------------------

#: The values of one ``vector_chunks`` row, in ``_CHUNK_COLUMNS`` order.
SqliteRow = tuple[str, str, str, str, str, int, int, int, str, int, bytes]

SQLITE_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS vector_namespaces (
        namespace TEXT NOT NULL PRIMARY KEY,
        dimensions INTEGER NOT NULL,
        UNIQUE (namespace, dimensions)
    ) WITHOUT ROWID""",
    # AUTOINCREMENT: ids only grow, even past deletes, which is what lets a cached matrix
    # catch up by loading "id > the largest I hold".
    f"""CREATE TABLE IF NOT EXISTS vector_chunks (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        namespace TEXT NOT NULL,
        chunk_id TEXT NOT NULL,
        tenant_id TEXT NOT NULL,
        kb_id TEXT NOT NULL,
        document_id TEXT NOT NULL,
        ordinal INTEGER NOT NULL,
        start_offset INTEGER NOT NULL,
        end_offset INTEGER NOT NULL,
        text TEXT NOT NULL,
        dimensions INTEGER NOT NULL CHECK (dimensions BETWEEN 1 AND {MAX_DIMENSIONS}),
        embedding BLOB NOT NULL CHECK (length(embedding) = 4 * dimensions),
        UNIQUE (namespace, chunk_id),
        FOREIGN KEY (namespace, dimensions) REFERENCES vector_namespaces (namespace, dimensions)
    )""",
    """CREATE INDEX IF NOT EXISTS vector_chunks_kb
        ON vector_chunks (namespace, tenant_id, kb_id, id)""",
    "CREATE INDEX IF NOT EXISTS vector_chunks_document ON vector_chunks (tenant_id, document_id)",
    """CREATE TABLE IF NOT EXISTS vector_generations (
        namespace TEXT NOT NULL,
        tenant_id TEXT NOT NULL,
        kb_id TEXT NOT NULL,
        generation INTEGER NOT NULL,
        reset_at INTEGER NOT NULL,
        PRIMARY KEY (namespace, tenant_id, kb_id)
    ) WITHOUT ROWID""",
)
SQLITE_BIND_NAMESPACE = (
    "INSERT INTO vector_namespaces (namespace, dimensions) VALUES (?, ?) ON CONFLICT DO NOTHING"
)
SQLITE_NAMESPACE_DIMENSION = "SELECT dimensions FROM vector_namespaces WHERE namespace = ?"
SQLITE_INSERT = (
    f"INSERT INTO vector_chunks ({_CHUNK_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
SQLITE_UPDATE = """UPDATE vector_chunks SET tenant_id = ?, kb_id = ?, document_id = ?, ordinal = ?,
    start_offset = ?, end_offset = ?, text = ?, dimensions = ?, embedding = ? WHERE id = ?"""
#: One knowledge base's write: ``generation`` always moves; ``reset_at`` follows it when the
#: last parameter is 1 (a write that is not a pure append).
SQLITE_BUMP = """
INSERT INTO vector_generations (namespace, tenant_id, kb_id, generation, reset_at)
VALUES (?1, ?2, ?3, 1, ?4)
ON CONFLICT (namespace, tenant_id, kb_id) DO UPDATE SET
    generation = generation + 1,
    reset_at = CASE WHEN ?4 THEN generation + 1 ELSE reset_at END
"""
SQLITE_GENERATION = """SELECT generation, reset_at FROM vector_generations
WHERE namespace = ? AND tenant_id = ? AND kb_id = ?"""
SQLITE_LOAD = """SELECT id, embedding FROM vector_chunks
WHERE namespace = ? AND tenant_id = ? AND kb_id = ? AND id > ? ORDER BY id"""
SQLITE_CHUNK_IDS = (
    "SELECT chunk_id FROM vector_chunks WHERE namespace = ? AND tenant_id = ? AND document_id = ?"
)
SQLITE_ITEMS_OF = """SELECT chunk_id, kb_id, ordinal, start_offset, end_offset, text, embedding
    FROM vector_chunks WHERE namespace = ? AND tenant_id = ? AND document_id = ?
    ORDER BY ordinal"""
SQLITE_DOCUMENT_WHERE = "tenant_id = ? AND document_id = ?"
SQLITE_KB_WHERE = "namespace = ? AND tenant_id = ? AND kb_id = ?"


def sqlite_row(namespace: str, item: VectorItem) -> SqliteRow:
    """The values of ``SQLITE_INSERT`` for one item (its float32 vector as a BLOB)."""
    return (
        namespace, item.chunk_id, item.tenant_id, item.kb_id, item.document_id, item.ordinal,
        item.start, item.end, item.text, len(item.vector), item.vector.tobytes(),
    )  # fmt: skip


def sqlite_stored(count: int) -> str:
    """The rows of ``count`` chunk ids of a namespace: ``chunk_id, id``, then the columns
    ``SQLITE_UPDATE`` sets, in its order."""
    return f"""SELECT chunk_id, id, tenant_id, kb_id, document_id, ordinal, start_offset,
        end_offset, text, dimensions, embedding FROM vector_chunks
        WHERE namespace = ? AND chunk_id IN ({", ".join("?" * count)})"""


def sqlite_shown(count: int) -> str:
    """What a hit shows of ``count`` rows, by id, if they are still in the knowledge base."""
    return f"""SELECT id, chunk_id, document_id, ordinal, start_offset, end_offset, text
        FROM vector_chunks WHERE namespace = ? AND tenant_id = ? AND kb_id = ?
        AND id IN ({", ".join("?" * count)})"""


def sqlite_groups(where: str) -> str:
    """The knowledge bases (``namespace, tenant_id, kb_id``) with rows matching ``where``."""
    return f"SELECT DISTINCT namespace, tenant_id, kb_id FROM vector_chunks WHERE {where}"


def sqlite_delete(where: str) -> str:
    """Delete the rows matching ``where``."""
    return f"DELETE FROM vector_chunks WHERE {where}"


# -- Both ----------------------------------------------------------------------------------


def count(
    placeholder: str, namespace: str, filters: dict[str, str | None]
) -> tuple[str, list[str]]:
    """``SELECT count(*)`` of a namespace narrowed by the filters given (columns named here,
    never by a caller), with its parameters; ``placeholder`` is ``?`` or ``%s``."""
    where = [f"namespace = {placeholder}"]
    parameters = [namespace]
    for column in ("tenant_id", "kb_id", "document_id"):
        value = filters.get(column)
        if value is not None:
            where.append(f"{column} = {placeholder}")
            parameters.append(value)
    return f"SELECT count(*) FROM vector_chunks WHERE {' AND '.join(where)}", parameters


# -- PostgreSQL (pgvector) ------------------------------------------------------------------

#: Held (for one transaction) while creating the schema or binding a new namespace: two
#: processes creating the same table or index at once would collide in the catalog.
PG_SCHEMA_LOCK = 0x7665_6374_6F72  # "vector"
PG_SCHEMA = (
    "CREATE EXTENSION IF NOT EXISTS vector",
    f"""CREATE TABLE IF NOT EXISTS vector_namespaces (
        namespace text NOT NULL PRIMARY KEY,
        dimensions integer NOT NULL CHECK (dimensions BETWEEN 1 AND {MAX_DIMENSIONS}),
        UNIQUE (namespace, dimensions)
    )""",
    # ``vector`` without a dimension, so every namespace's rows share one table: one upsert,
    # one delete, one count across namespaces. HNSW needs one dimension per index, so each
    # dimension gets its own partial expression index (:func:`pg_hnsw_index`).
    """CREATE TABLE IF NOT EXISTS vector_chunks (
        namespace text NOT NULL,
        chunk_id text NOT NULL,
        tenant_id text NOT NULL,
        kb_id text NOT NULL,
        document_id text NOT NULL,
        ordinal integer NOT NULL,
        start_offset integer NOT NULL,
        end_offset integer NOT NULL,
        text text NOT NULL,
        dimensions integer NOT NULL,
        embedding vector NOT NULL CHECK (vector_dims(embedding) = dimensions),
        PRIMARY KEY (namespace, chunk_id),
        FOREIGN KEY (namespace, dimensions) REFERENCES vector_namespaces (namespace, dimensions)
    )""",
    """CREATE INDEX IF NOT EXISTS vector_chunks_kb
        ON vector_chunks (tenant_id, kb_id, namespace)""",
    """CREATE INDEX IF NOT EXISTS vector_chunks_document
        ON vector_chunks (tenant_id, document_id)""",
)
PG_VERSION = "SELECT extversion FROM pg_extension WHERE extname = 'vector'"
PG_LOCK = "SELECT pg_advisory_xact_lock(%s)"
PG_BIND_NAMESPACE = (
    "INSERT INTO vector_namespaces (namespace, dimensions) VALUES (%s, %s) ON CONFLICT DO NOTHING"
)
PG_NAMESPACE_DIMENSION = "SELECT dimensions FROM vector_namespaces WHERE namespace = %s"
PG_INDEX_EXISTS = "SELECT to_regclass(%s) IS NOT NULL"
#: Each connection's staging table: a batch is COPYed in, then upserted in one statement.
PG_STAGE = """CREATE TEMP TABLE IF NOT EXISTS staged_vectors (LIKE vector_chunks)
    ON COMMIT DELETE ROWS"""
PG_COPY = f"COPY staged_vectors ({_CHUNK_COLUMNS}) FROM STDIN (FORMAT BINARY)"
PG_COPY_TYPES = ["text"] * 5 + ["int4"] * 3 + ["text", "int4", "vector"]
PG_FOREIGN_CHUNK = """SELECT s.chunk_id FROM staged_vectors AS s
    JOIN vector_chunks AS v ON v.namespace = s.namespace AND v.chunk_id = s.chunk_id
    WHERE v.tenant_id <> s.tenant_id LIMIT 1"""
#: Rows in chunk id order, so two batches sharing chunks lock them in the same order (no
#: deadlock). An identical row is left alone (a re-delivered event costs no new tuple and no
#: HNSW insert); another tenant's never changes hands. ``xmax = 0``: the row is new.
PG_UPSERT = f"""
INSERT INTO vector_chunks AS v ({_CHUNK_COLUMNS})
SELECT {_CHUNK_COLUMNS} FROM staged_vectors ORDER BY chunk_id
ON CONFLICT (namespace, chunk_id) DO UPDATE SET
    kb_id = EXCLUDED.kb_id, document_id = EXCLUDED.document_id, ordinal = EXCLUDED.ordinal,
    start_offset = EXCLUDED.start_offset, end_offset = EXCLUDED.end_offset,
    text = EXCLUDED.text, embedding = EXCLUDED.embedding
WHERE v.tenant_id = EXCLUDED.tenant_id
    AND (v.kb_id, v.document_id, v.ordinal, v.start_offset, v.end_offset, v.text, v.embedding)
    IS DISTINCT FROM (EXCLUDED.kb_id, EXCLUDED.document_id, EXCLUDED.ordinal,
        EXCLUDED.start_offset, EXCLUDED.end_offset, EXCLUDED.text, EXCLUDED.embedding)
RETURNING xmax = 0
"""
#: ``hnsw.ef_search`` (candidates kept, at least k) and, from pgvector 0.8, iterative scans:
#: a filtered search goes on past the first candidates until it has k rows of the kb.
PG_SEARCH_SETTINGS = "SELECT set_config('hnsw.ef_search', %s, true)"
PG_SEARCH_SETTINGS_ITERATIVE = """SELECT set_config('hnsw.ef_search', %s, true),
    set_config('hnsw.iterative_scan', 'relaxed_order', true)"""
PG_DELETE_DOCUMENT = "DELETE FROM vector_chunks WHERE tenant_id = %s AND document_id = %s"
PG_DELETE_KB = "DELETE FROM vector_chunks WHERE namespace = %s AND tenant_id = %s AND kb_id = %s"
PG_ITEMS_OF = """SELECT chunk_id, kb_id, ordinal, start_offset, end_offset, text, embedding
    FROM vector_chunks WHERE namespace = %s AND tenant_id = %s AND document_id = %s
    ORDER BY ordinal"""
PG_CHUNK_IDS = """SELECT chunk_id FROM vector_chunks
    WHERE namespace = %s AND tenant_id = %s AND document_id = %s"""


def pg_row(namespace: str, item: VectorItem) -> tuple[str | int | Vector, ...]:
    """The values ``PG_COPY`` writes for one item, in ``PG_COPY_TYPES`` order."""
    return (
        namespace, item.chunk_id, item.tenant_id, item.kb_id, item.document_id, item.ordinal,
        item.start, item.end, item.text, len(item.vector), item.vector,
    )  # fmt: skip


def pg_hnsw_name(dimension: int) -> str:
    """The name of the HNSW index of ``dimension``-d vectors."""
    return f"vector_chunks_hnsw_{int(dimension)}"


def pg_hnsw_index(dimension: int) -> str:
    """The HNSW index (cosine) of the rows of one dimension. The dimension is written into
    the statement as a literal (an int, never text from outside), and so is it in
    :func:`pg_search`: the planner proves the partial predicate whatever plan it caches,
    which it cannot do for a bound parameter in a generic plan."""
    d = int(dimension)
    return f"""CREATE INDEX IF NOT EXISTS {pg_hnsw_name(d)} ON vector_chunks
        USING hnsw ((embedding::vector({d})) vector_cosine_ops) WHERE dimensions = {d}"""


def pg_search(dimension: int) -> str:
    """The k nearest rows of a knowledge base by cosine distance through the dimension's
    HNSW index; with ``relaxed_order`` the index may return them slightly out of order, so
    they are sorted again outside (pgvector's advice)."""
    d = int(dimension)
    distance = f"embedding::vector({d}) <=> %(query)s::vector({d})"
    return f"""
WITH nearest AS MATERIALIZED (
    SELECT chunk_id, document_id, ordinal, start_offset, end_offset, text,
        {distance} AS distance
    FROM vector_chunks
    WHERE dimensions = {d} AND namespace = %(namespace)s
        AND tenant_id = %(tenant_id)s AND kb_id = %(kb_id)s
    ORDER BY {distance}
    LIMIT %(k)s
)
SELECT chunk_id, document_id, ordinal, start_offset, end_offset, text, 1 - distance
FROM nearest ORDER BY distance
"""
