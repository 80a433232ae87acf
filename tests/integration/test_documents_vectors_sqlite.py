"""The SQLite vector store beyond the contract: its matrices follow other writers of the file
(another process included) by appending or reloading, a locked file is retryable, and the
file itself refuses a vector of the wrong size."""

from __future__ import annotations

import asyncio
import sqlite3
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from aigc_hub.core.errors import RetryableError
from aigc_hub.pipelines.documents.vectors import VectorItem, VectorStoreUnavailable
from aigc_hub.pipelines.documents.vectors.sqlite import SQLiteVectorStore

NS = "m@1"
ROOT = Path(__file__).resolve().parents[2]


def axis(index: int, dimension: int = 4) -> np.ndarray:
    """The unit vector along axis ``index``."""
    return np.eye(dimension, dtype=np.float32)[index]


def chunk(chunk_id: str, vector: np.ndarray, document: str = "d1") -> VectorItem:
    return VectorItem(chunk_id, document, "t1", "kb1", 0, 0, 1, f"text {chunk_id}", vector)


async def test_a_reader_appends_new_rows_and_reloads_only_after_a_delete_or_a_change(
    tmp_path: Path,
) -> None:
    writer = SQLiteVectorStore(tmp_path / "v.db")
    reader = SQLiteVectorStore(tmp_path / "v.db")
    try:
        await writer.upsert(NS, [chunk("a", axis(0)), chunk("b", axis(1))])
        await reader.search(NS, "t1", "kb1", axis(0), 5)
        assert (reader.matrices.full_loads, reader.matrices.appends) == (1, 0)

        await writer.upsert(NS, [chunk("c", axis(2), document="d2")])
        hits = await reader.search(NS, "t1", "kb1", axis(2), 1)
        assert [h.chunk_id for h in hits] == ["c"]
        assert (reader.matrices.full_loads, reader.matrices.appends) == (1, 1)

        # the same chunks again (a re-delivered event) change nothing: the matrix stands
        await writer.upsert(NS, [chunk("a", axis(0)), chunk("b", axis(1))])
        await reader.search(NS, "t1", "kb1", axis(0), 5)
        assert (reader.matrices.full_loads, reader.matrices.appends) == (1, 1)

        await writer.upsert(NS, [chunk("a", axis(3))])  # a changed vector: reload
        hits = await reader.search(NS, "t1", "kb1", axis(3), 1)
        assert [h.chunk_id for h in hits] == ["a"]
        assert reader.matrices.full_loads == 2

        await writer.delete_document("t1", "d2")  # a delete: reload
        hits = await reader.search(NS, "t1", "kb1", axis(2), 5)
        assert "c" not in [h.chunk_id for h in hits]
        assert reader.matrices.full_loads == 3
    finally:
        await writer.close()
        await reader.close()


async def test_a_write_from_another_process_shows_in_the_next_search(tmp_path: Path) -> None:
    path = tmp_path / "v.db"
    store = SQLiteVectorStore(path)
    try:
        await store.upsert(NS, [chunk("here", axis(1))])
        assert [h.chunk_id for h in await store.search(NS, "t1", "kb1", axis(0), 5)] == ["here"]

        code = textwrap.dedent(f"""
            import asyncio, numpy as np
            from aigc_hub.pipelines.documents.vectors import VectorItem
            from aigc_hub.pipelines.documents.vectors.sqlite import SQLiteVectorStore
            async def main():
                store = SQLiteVectorStore({str(path)!r})
                vector = np.eye(4, dtype=np.float32)[0]
                item = VectorItem("there", "d9", "t1", "kb1", 0, 0, 1, "from afar", vector)
                assert await store.upsert({NS!r}, [item]) == 1
                assert await store.delete_document("t1", "d1") == 1
                await store.close()
            asyncio.run(main())
        """)
        child = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            code,
            env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"},
        )
        assert await asyncio.wait_for(child.wait(), timeout=60) == 0

        hits = await store.search(NS, "t1", "kb1", axis(0), 5)
        assert [(h.chunk_id, h.text) for h in hits] == [("there", "from afar")]
    finally:
        await store.close()


async def test_a_file_locked_by_another_writer_is_retryable(tmp_path: Path) -> None:
    store = SQLiteVectorStore(tmp_path / "v.db", busy_timeout_s=0.05)
    other = sqlite3.connect(tmp_path / "v.db", isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        with pytest.raises(VectorStoreUnavailable, match="locked") as refused:
            await store.upsert(NS, [chunk("a", axis(0))])
        assert isinstance(refused.value, RetryableError)
        other.execute("ROLLBACK")

        assert await store.upsert(NS, [chunk("a", axis(0))]) == 1
    finally:
        other.close()
        await store.close()


async def test_the_file_holds_float32_blobs_and_refuses_one_of_the_wrong_size(
    tmp_path: Path,
) -> None:
    store = SQLiteVectorStore(tmp_path / "v.db")
    await store.upsert(NS, [chunk("a", axis(2))])
    await store.close()
    raw = sqlite3.connect(tmp_path / "v.db")
    try:
        raw.execute("PRAGMA foreign_keys=ON")
        (blob,) = raw.execute("SELECT embedding FROM vector_chunks").fetchone()
        assert np.array_equal(np.frombuffer(blob, dtype=np.float32), axis(2))

        row = [NS, "b", "t1", "kb1", "d1", 0, 0, 1, "x"]
        with pytest.raises(sqlite3.IntegrityError, match="CHECK"):  # 3 floats for 4 dimensions
            raw.execute(
                "INSERT INTO vector_chunks (namespace, chunk_id, tenant_id, kb_id, document_id, "
                "ordinal, start_offset, end_offset, text, dimensions, embedding) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [*row, 4, np.ones(3, dtype=np.float32).tobytes()],
            )
        with pytest.raises(sqlite3.IntegrityError, match="FOREIGN KEY"):  # not the namespace's
            raw.execute(
                "INSERT INTO vector_chunks (namespace, chunk_id, tenant_id, kb_id, document_id, "
                "ordinal, start_offset, end_offset, text, dimensions, embedding) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [*row, 3, np.ones(3, dtype=np.float32).tobytes()],
            )
    finally:
        raw.close()


async def test_a_matrix_holding_rows_the_file_does_not_is_dropped_and_loaded_again(
    tmp_path: Path,
) -> None:
    # As after the file was restored from an older copy: the cached matrix claims a later
    # generation and holds a row (id 999) the file does not have.
    store = SQLiteVectorStore(tmp_path / "v.db")
    try:
        await store.upsert(NS, [chunk("a", axis(1)), chunk("b", axis(2))])
        phantom = (np.array([999], dtype=np.int64), axis(0).reshape(1, 4))
        store.matrices.refresh(("m@1", "t1", "kb1"), 4, 50, 0, lambda after: phantom)

        hits = await store.search(NS, "t1", "kb1", axis(0), 2)

        assert sorted(h.chunk_id for h in hits) == ["a", "b"]
        assert store.matrices.full_loads == 2  # the phantom's, then the file's
    finally:
        await store.close()
