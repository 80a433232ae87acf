"""The vector store's seam: one embedding per chunk, stored by namespace and searched by cosine.

Two engines implement :class:`VectorStore`: SQLite + numpy embedded in the process
(``sqlite.py``, exact search) and PostgreSQL with pgvector (``pgvector.py``, HNSW). Every
method is async; SQLite's blocking calls run in a worker thread, so the event loop never
waits on the file.

A *namespace* is one embedding model version (``"bge-small-en-v1.5@1"``). Its dimension is
fixed by its first write and never changes; namespaces of different dimensions live side by
side in one store, so a knowledge base can be re-embedded by a new model version while the
old one still answers, then the old one dropped (:meth:`VectorStore.delete_namespace`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from aigc_hub.core.errors import Conflict, InvalidInput, PermanentError, RetryableError

#: One embedding: a 1-D float32 array, L2-normalised.
Vector = npt.NDArray[np.float32]

#: The most dimensions a vector may have in any engine: pgvector indexes ``vector`` up to
#: 2,000 dimensions with HNSW, and a store must be able to move between engines.
MAX_DIMENSIONS = 2000
#: The most hits a search returns: pgvector's ``hnsw.ef_search`` (the candidate list a search
#: keeps, which must be at least ``k``) stops at 1,000.
MAX_K = 1000


@dataclass(frozen=True, eq=False)  # eq=False: numpy arrays have no truth value to compare by
class VectorItem:
    """One chunk's embedding and what a hit shows of it; ``start``/``end`` are character
    offsets in the document's text, ``ordinal`` the chunk's index in its document."""

    chunk_id: str
    document_id: str
    tenant_id: str
    kb_id: str
    ordinal: int
    start: int
    end: int
    text: str
    vector: Vector


@dataclass(frozen=True)
class Hit:
    """A chunk a search found, with its cosine similarity to the query (1.0 = same direction)."""

    chunk_id: str
    document_id: str
    tenant_id: str
    kb_id: str
    ordinal: int
    start: int
    end: int
    text: str
    score: float


class DimensionMismatch(InvalidInput):
    """The vector's dimension is not its namespace's."""

    def __init__(self, namespace: str, expected: int, got: int) -> None:
        self.namespace = namespace
        self.expected = expected
        self.got = got
        super().__init__(
            "vector", f"namespace {namespace!r} holds {expected}-d vectors, not {got}-d"
        )


class ChunkOfAnotherTenant(Conflict):
    """The chunk id is already stored for another tenant in that namespace; nothing written."""


class VectorStoreUnavailable(RetryableError):
    """The vector store did not answer (unreachable, locked, deadlocked); try again."""


class VectorStoreClosed(PermanentError):
    """The vector store was closed; it answers no more calls."""


class VectorStore(Protocol):
    """Chunk embeddings by ``(namespace, chunk_id)``, searched inside one knowledge base.

    Writes are idempotent: the same chunk written again replaces its row, so a re-delivered
    event never duplicates a vector. Each call is one transaction: a refused batch (wrong
    dimension, invalid vector, another tenant's chunk id) writes nothing. Every method is
    safe to call from concurrent tasks, and several stores (processes) may share one URL.
    """

    #: ``"sqlite"`` or ``"pgvector"``.
    engine: str
    #: The most dimensions a vector may have (a namespace's own dimension is its first write's).
    dimensions: int
    #: True when a search is exhaustive (SQLite); False when it is approximate (HNSW).
    exact: bool

    async def upsert(self, namespace: str, items: Sequence[VectorItem]) -> int:
        """Write the items (the last wins for a chunk id given twice); the rows newly created.
        ``InvalidInput`` for a wrong dimension or a vector that is not finite, 1-D and of unit
        length; ``ChunkOfAnotherTenant`` for a chunk id another tenant holds."""
        ...

    async def search(
        self, namespace: str, tenant_id: str, kb_id: str, query_vector: Vector, k: int
    ) -> list[Hit]:
        """Up to ``k`` (1 to ``MAX_K``) chunks of that tenant's knowledge base nearest to the
        query, best first; ``[]`` for a namespace or knowledge base with no vectors."""
        ...

    async def delete_document(self, tenant_id: str, document_id: str) -> int:
        """Delete the document's vectors in every namespace; how many were deleted."""
        ...

    async def delete_namespace(self, namespace: str, tenant_id: str, kb_id: str) -> int:
        """Delete one knowledge base's vectors of one namespace (a retired model version)."""
        ...

    async def count(
        self,
        namespace: str,
        *,
        tenant_id: str | None = None,
        kb_id: str | None = None,
        document_id: str | None = None,
    ) -> int:
        """How many vectors the namespace holds, narrowed by the filters given."""
        ...

    async def items_of(self, namespace: str, tenant_id: str, document_id: str) -> list[VectorItem]:
        """The document's stored chunks with their vectors, in chunk order (for an analysis
        that compares them with its own vectors, without embedding them again)."""
        ...

    async def chunk_ids(self, namespace: str, tenant_id: str, document_id: str) -> set[str]:
        """The ids of the document's chunks stored in the namespace."""
        ...

    async def close(self) -> None:
        """Release connections and memory; afterwards every call raises ``VectorStoreClosed``."""
        ...
