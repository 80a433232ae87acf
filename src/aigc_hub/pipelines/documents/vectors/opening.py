"""``open_vector_store``: the vector store a URL names (the documents pipeline's setting)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from aigc_hub.core.errors import ConfigurationError

from .base import VectorStore

#: The store on embedded defaults, under the hub's data dir.
DEFAULT_FILE = Path("vectors.db")
#: URL schemes of PostgreSQL; SQLAlchemy's driver suffix is accepted and dropped.
POSTGRES_SCHEMES = ("postgresql", "postgres", "postgresql+psycopg")


async def open_vector_store(url: str, data_dir: Path) -> VectorStore:
    """Open (and create the schema of) the store ``url`` names: empty = SQLite at
    ``<data_dir>/vectors.db``; ``sqlite:///relative.db`` or ``sqlite:////abs/path.db`` (as in
    the hub's database URL); ``postgresql://user@host/db`` (a database of its own, with
    pgvector). ``ConfigurationError`` for anything else. Opening SQLite blocks (the file, its
    schema), so it runs in a worker thread."""
    scheme, sep, rest = url.partition("://")
    if not url or (sep and scheme == "sqlite"):
        # ``sqlite:///x`` -> ``x``: the third slash ends the (empty) host, as in SQLAlchemy.
        path = data_dir / DEFAULT_FILE if not url else Path(rest[1:])
        if url and (not rest.startswith("/") or not rest[1:] or ":memory:" in rest):
            # ``:memory:`` would be a separate, empty database in every worker thread.
            raise ConfigurationError(f"vector store URL {url!r} names no file")
        from .sqlite import SQLiteVectorStore

        return await asyncio.to_thread(SQLiteVectorStore, path)
    if sep and scheme in POSTGRES_SCHEMES:
        # Imported here: psycopg and pgvector are an extra, needed only by a hub that uses them.
        from .pgvector import PgVectorStore

        return await PgVectorStore.open(f"postgresql://{rest}")
    raise ConfigurationError(
        f"vector store URL {url!r}: use sqlite:///path or postgresql://user@host/database"
    )
