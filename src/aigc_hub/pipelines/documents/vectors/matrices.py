"""The SQLite engine's vectors in memory: one matrix per (namespace, tenant, kb), searched
exactly by one matrix product. No I/O here: the engine hands in a loader.

**Kept correct across processes.** Every write to a knowledge base's rows bumps its row in
the ``vector_generations`` table in the same transaction: ``generation`` on every write, and
``reset_at`` (set to the new generation) on a write that is not a pure append (a delete, a
replaced vector, a chunk moved to another knowledge base). A matrix remembers the generation
it reflects, so a search that reads the table knows what to do: nothing (same generation),
load only the rows with an id above the largest it holds (inserts since: ids only grow, the
table is ``AUTOINCREMENT``), or load everything again (a reset since).

**Bounded.** Matrices are kept least-recently-used first out past a byte budget; a search
holds its own reference to the arrays it scores, so eviction never disturbs one in flight.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from .base import Vector

Ids = npt.NDArray[np.int64]
Rows = npt.NDArray[np.float32]
#: ``(namespace, tenant_id, kb_id)``.
Key = tuple[str, str, str]
#: ``load(after_id)``: the ids (ascending) and vectors of the rows with an id above it.
Loader = Callable[[int], tuple[Ids, Rows]]


@dataclass(frozen=True)
class Snapshot:
    """A matrix as it was: ``rows[i]`` is the vector of row ``ids[i]``."""

    ids: Ids
    rows: Rows

    def nearest(self, query: Vector, k: int) -> tuple[Ids, npt.NDArray[np.float32]]:
        """The ids of the ``k`` rows of highest dot product with ``query`` (the cosine, for
        unit vectors), best first, and their scores."""
        if not len(self.ids):
            return self.ids, np.empty(0, dtype=np.float32)
        scores = self.rows @ query
        if k < len(scores):
            # argpartition finds the k best in linear time; only those k are sorted.
            best = np.argpartition(-scores, k - 1)[:k]
            order = best[np.argsort(-scores[best], kind="stable")]
        else:
            order = np.argsort(-scores, kind="stable")
        return self.ids[order], scores[order]


class Matrix:
    """One knowledge base's vectors of one namespace, growing by doubling its capacity."""

    def __init__(self, dimension: int) -> None:
        self.dimension = dimension
        #: The ``vector_generations.generation`` the rows reflect.
        self.generation = 0
        self.size = 0
        self._ids: Ids = np.empty(0, dtype=np.int64)
        self._rows: Rows = np.empty((0, dimension), dtype=np.float32)

    @property
    def nbytes(self) -> int:
        """Memory held, capacity included."""
        return int(self._ids.nbytes + self._rows.nbytes)

    @property
    def max_id(self) -> int:
        """The largest row id held (0 when empty)."""
        return int(self._ids[self.size - 1]) if self.size else 0

    def append(self, ids: Ids, rows: Rows) -> None:
        """Add rows whose ids are all above :attr:`max_id`.

        Rows are written past ``size`` (or into a new, larger buffer), never over rows a
        snapshot already shows, so snapshots stay valid while the matrix grows."""
        count = len(ids)
        if self.size + count > len(self._ids):
            capacity = max(self.size + count, 2 * len(self._ids), 64)
            new_ids = np.empty(capacity, dtype=np.int64)
            new_rows = np.empty((capacity, self.dimension), dtype=np.float32)
            new_ids[: self.size] = self._ids[: self.size]
            new_rows[: self.size] = self._rows[: self.size]
            self._ids, self._rows = new_ids, new_rows
        self._ids[self.size : self.size + count] = ids
        self._rows[self.size : self.size + count] = rows
        self.size += count

    def snapshot(self) -> Snapshot:
        """The rows held now (views: later appends do not show in them)."""
        return Snapshot(self._ids[: self.size], self._rows[: self.size])


class MatrixCache:
    """Matrices by key, refreshed from a loader, least recently used evicted past a budget."""

    def __init__(self, budget_bytes: int) -> None:
        self.budget_bytes = budget_bytes
        self._matrices: OrderedDict[Key, Matrix] = OrderedDict()
        self._locks: dict[Key, threading.Lock] = {}
        self._guard = threading.Lock()
        #: How often a matrix was loaded whole / extended (the engine's tests read them).
        self.full_loads = 0
        self.appends = 0

    def refresh(
        self, key: Key, dimension: int, generation: int, reset_at: int, load: Loader
    ) -> Snapshot:
        """The matrix of ``key`` brought to ``generation`` (or newer, when another thread
        already moved it on) with ``load``; thread-safe, one refresh of a key at a time."""
        with self._lock_for(key):
            with self._guard:
                matrix = self._matrices.get(key)
            if matrix is not None and matrix.dimension == dimension:
                if matrix.generation >= generation:
                    self._touch(key)
                    return matrix.snapshot()
                if reset_at <= matrix.generation:
                    ids, rows = load(matrix.max_id)
                    matrix.append(ids, rows)
                    matrix.generation = generation
                    self.appends += 1
                    self._keep(key, matrix)
                    return matrix.snapshot()
            matrix = Matrix(dimension)
            ids, rows = load(0)
            matrix.append(ids, rows)
            matrix.generation = generation
            self.full_loads += 1
            self._keep(key, matrix)
            return matrix.snapshot()

    def discard(self, key: Key) -> None:
        """Forget the matrix of ``key`` (its knowledge base holds nothing any more)."""
        with self._guard:
            self._matrices.pop(key, None)

    def clear(self) -> None:
        """Forget every matrix."""
        with self._guard:
            self._matrices.clear()
            self._locks.clear()

    def _lock_for(self, key: Key) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(key, threading.Lock())

    def _touch(self, key: Key) -> None:
        with self._guard:
            if key in self._matrices:
                self._matrices.move_to_end(key)

    def _keep(self, key: Key, matrix: Matrix) -> None:
        """Store ``matrix`` as the most recent, then evict the oldest others past the budget."""
        with self._guard:
            self._matrices[key] = matrix
            self._matrices.move_to_end(key)
            total = sum(m.nbytes for m in self._matrices.values())
            while total > self.budget_bytes and len(self._matrices) > 1:
                _, evicted = self._matrices.popitem(last=False)
                total -= evicted.nbytes
