"""Every statement the vector stores run, SQLite's and PostgreSQL's side by side.

Both dialects keep the same two tables: ``vector_namespaces`` (a namespace's dimension, set
by its first write) and ``vector_chunks`` (one row per ``(namespace, chunk_id)``). Each row
repeats its namespace's dimension, tied to it by a foreign key on ``(namespace, dimensions)``
and to its vector by a CHECK, so the database itself refuses a vector of the wrong size:
never a corrupt row, whoever writes. SQLite adds ``vector_generations``, what its in-memory
matrices are checked against (``matrices.py``).
"""

from __future__ import annotations

from .base import MAX_DIMENSIONS, VectorItem

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
