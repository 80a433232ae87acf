"""The SQLite vector store's in-memory matrices: exact top-k, growth, refresh and eviction.

Pure numpy, no file: the loader is a function over a list standing for the table.
"""

from __future__ import annotations

import numpy as np
import pytest

from aigc_hub.pipelines.documents.vectors.matrices import Ids, Matrix, MatrixCache, Rows, Snapshot

KEY = ("ns", "t1", "kb1")


def unit_rows(count: int, dimension: int = 16, seed: int = 0) -> Rows:
    """``count`` random unit vectors."""
    rows = np.random.default_rng(seed).normal(size=(count, dimension)).astype(np.float32)
    normalised: Rows = rows / np.linalg.norm(rows, axis=1, keepdims=True)
    return normalised


class Table:
    """Rows by id, as the file holds them; ``load`` counts what it hands out."""

    def __init__(self, rows: Rows) -> None:
        self.ids: Ids = np.arange(1, len(rows) + 1, dtype=np.int64)
        self.rows = rows
        self.loaded: list[int] = []

    def add(self, rows: Rows) -> None:
        start = int(self.ids[-1]) + 1 if len(self.ids) else 1
        self.ids = np.concatenate([self.ids, np.arange(start, start + len(rows), dtype=np.int64)])
        self.rows = np.concatenate([self.rows, rows])

    def load(self, after: int) -> tuple[Ids, Rows]:
        chosen = self.ids > after
        self.loaded.append(int(chosen.sum()))
        return self.ids[chosen], self.rows[chosen]


def test_nearest_is_the_exact_top_k_best_first() -> None:
    rows = unit_rows(1000)
    snapshot = Snapshot(np.arange(1000, dtype=np.int64) + 100, rows)
    query = rows[42]

    ids, scores = snapshot.nearest(query, 10)

    expected = np.argsort(-(rows @ query))[:10] + 100
    assert ids.tolist() == expected.tolist()
    assert ids[0] == 142 and scores[0] == pytest.approx(1.0, abs=1e-6)
    assert (np.diff(scores) <= 0).all()


def test_nearest_with_k_past_the_rows_returns_all_and_an_empty_matrix_nothing() -> None:
    rows = unit_rows(5)
    ids, scores = Snapshot(np.arange(5, dtype=np.int64), rows).nearest(rows[3], 50)
    assert sorted(ids.tolist()) == [0, 1, 2, 3, 4] and ids[0] == 3 and len(scores) == 5

    empty = Snapshot(np.empty(0, dtype=np.int64), np.empty((0, 16), dtype=np.float32))
    ids, scores = empty.nearest(rows[0], 3)
    assert (len(ids), len(scores)) == (0, 0)


def test_a_growing_matrix_leaves_earlier_snapshots_as_they_were() -> None:
    matrix = Matrix(16)
    rows = unit_rows(200)
    matrix.append(np.arange(1, 51, dtype=np.int64), rows[:50])
    before = matrix.snapshot()

    matrix.append(np.arange(51, 201, dtype=np.int64), rows[50:])  # past the capacity: a new buffer

    assert len(before.ids) == 50 and np.array_equal(before.rows, rows[:50])
    after = matrix.snapshot()
    assert (matrix.size, matrix.max_id) == (200, 200)
    assert np.array_equal(after.rows, rows) and after.ids.tolist() == list(range(1, 201))


def test_refresh_loads_once_then_appends_then_reloads_after_a_reset() -> None:
    table = Table(unit_rows(10))
    cache = MatrixCache(budget_bytes=1 << 20)

    first = cache.refresh(KEY, 16, generation=1, reset_at=0, load=table.load)
    again = cache.refresh(KEY, 16, generation=1, reset_at=0, load=table.load)
    table.add(unit_rows(3, seed=1))
    appended = cache.refresh(KEY, 16, generation=2, reset_at=0, load=table.load)
    table.ids, table.rows = table.ids[2:], table.rows[2:]  # a delete
    reloaded = cache.refresh(KEY, 16, generation=3, reset_at=3, load=table.load)

    assert table.loaded == [10, 3, 11]  # all, then only the new rows, then all again
    assert (len(first.ids), len(again.ids), len(appended.ids), len(reloaded.ids)) == (
        10,
        10,
        13,
        11,
    )
    assert reloaded.ids.tolist() == table.ids.tolist()
    assert (cache.full_loads, cache.appends) == (2, 1)


def test_a_matrix_already_past_the_callers_generation_is_used_as_it_is() -> None:
    table = Table(unit_rows(4))
    cache = MatrixCache(budget_bytes=1 << 20)
    cache.refresh(KEY, 16, generation=5, reset_at=0, load=table.load)

    older = cache.refresh(KEY, 16, generation=4, reset_at=4, load=table.load)

    assert table.loaded == [4] and len(older.ids) == 4


def test_a_new_dimension_for_the_same_key_reloads() -> None:
    cache = MatrixCache(budget_bytes=1 << 20)
    cache.refresh(KEY, 16, generation=1, reset_at=0, load=Table(unit_rows(4)).load)
    table = Table(unit_rows(4, dimension=8))

    snapshot = cache.refresh(KEY, 8, generation=2, reset_at=0, load=table.load)

    assert snapshot.rows.shape == (4, 8) and table.loaded == [4]


def test_matrices_past_the_budget_are_evicted_least_recently_used_first() -> None:
    tables = {kb: Table(unit_rows(100, seed=i)) for i, kb in enumerate(("a", "b", "c"))}
    one_matrix = Matrix(16)
    one_matrix.append(tables["a"].ids, tables["a"].rows)
    cache = MatrixCache(budget_bytes=2 * one_matrix.nbytes)

    for kb in ("a", "b"):
        cache.refresh(("ns", "t1", kb), 16, 1, 0, tables[kb].load)
    cache.refresh(("ns", "t1", "a"), 16, 1, 0, tables["a"].load)  # a is now the most recent
    cache.refresh(("ns", "t1", "c"), 16, 1, 0, tables["c"].load)  # evicts b
    cache.refresh(("ns", "t1", "a"), 16, 1, 0, tables["a"].load)  # still there
    cache.refresh(("ns", "t1", "b"), 16, 1, 0, tables["b"].load)  # loaded again

    assert {kb: len(t.loaded) for kb, t in tables.items()} == {"a": 1, "b": 2, "c": 1}
