"""Vector stores: where chunk embeddings live and are searched (seed 003 §4.3).

- ``base``      the ``VectorStore`` protocol, ``VectorItem`` and ``Hit``, its errors
- ``checks``    what both engines refuse, alike (dimension, unit length, ``k``)
- ``sql``       every statement, SQLite's and PostgreSQL's side by side
- ``matrices``  SQLite's vectors in memory, kept in step with the file by generations
- ``sqlite``    SQLite + numpy embedded (default): exact search
- ``pgvector``  PostgreSQL with pgvector at scale: HNSW per dimension
- ``opening``   ``open_vector_store(url, data_dir)``
"""

from __future__ import annotations

from .base import (
    ChunkOfAnotherTenant,
    DimensionMismatch,
    Hit,
    VectorItem,
    VectorStore,
    VectorStoreClosed,
    VectorStoreUnavailable,
)
from .opening import open_vector_store

__all__ = [
    "ChunkOfAnotherTenant",
    "DimensionMismatch",
    "Hit",
    "VectorItem",
    "VectorStore",
    "VectorStoreClosed",
    "VectorStoreUnavailable",
    "open_vector_store",
]
