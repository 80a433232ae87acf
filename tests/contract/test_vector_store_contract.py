"""The vector store contract (documents pipeline, seed 003 §4.3), run unchanged on every engine.

``open_store()`` opens a store on the test's URL (a SQLite file, or a fresh database on the
session's PostgreSQL 16 with pgvector); a second call opens another store on the same URL,
as a second process would. Vectors are planted at known angles so the expected order and
cosine scores are exact; HNSW finds them exactly at this size.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import numpy as np
import pytest

from aigc_hub.core.errors import Conflict, InvalidInput
from aigc_hub.pipelines.documents.vectors import (
    ChunkOfAnotherTenant,
    DimensionMismatch,
    Hit,
    VectorItem,
    VectorStore,
    VectorStoreClosed,
    open_vector_store,
)
from aigc_hub.pipelines.documents.vectors.base import MAX_DIMENSIONS, MAX_K, Vector

Opener = Callable[[], Awaitable[VectorStore]]
NS = "bge-small@1"


@pytest.fixture(params=["sqlite", pytest.param("pgvector", marks=pytest.mark.postgres)])
def vectors_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The same test on a SQLite file and on PostgreSQL with pgvector."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'vectors.db'}"
    return str(request.getfixturevalue("pgvector_url"))


@pytest.fixture
async def open_store(vectors_url: str, tmp_path: Path) -> AsyncIterator[Opener]:
    """Opens stores on the test's URL; every one is closed at teardown."""
    opened: list[VectorStore] = []

    async def open_one() -> VectorStore:
        store = await open_vector_store(vectors_url, tmp_path)
        opened.append(store)
        return store

    yield open_one
    for store in reversed(opened):
        await store.close()


@pytest.fixture
async def store(open_store: Opener) -> VectorStore:
    """One store on the test's URL."""
    return await open_store()


def at(degrees: float, dimension: int = 8) -> Vector:
    """A unit vector in the plane of the first two axes, ``degrees`` from the first axis:
    its cosine with ``at(0)`` is ``cos(degrees)``."""
    vector = np.zeros(dimension, dtype=np.float32)
    vector[0], vector[1] = math.cos(math.radians(degrees)), math.sin(math.radians(degrees))
    return vector


def item(
    chunk_id: str,
    vector: Vector,
    *,
    document: str = "doc-1",
    tenant: str = "t1",
    kb: str = "kb1",
    ordinal: int = 0,
    text: str | None = None,
) -> VectorItem:
    """A chunk of ``document`` with ``vector``; its text names it unless given."""
    return VectorItem(
        chunk_id=chunk_id,
        document_id=document,
        tenant_id=tenant,
        kb_id=kb,
        ordinal=ordinal,
        start=ordinal * 100,
        end=ordinal * 100 + 99,
        text=text if text is not None else f"text of {chunk_id}",
        vector=vector,
    )


def ids(hits: list[Hit]) -> list[str]:
    """The chunk ids of the hits, in order."""
    return [hit.chunk_id for hit in hits]


async def test_upsert_counts_new_rows_and_the_same_chunk_again_replaces_it(
    store: VectorStore,
) -> None:
    batch = [item(f"c{i}", at(10 * i), ordinal=i) for i in range(3)]
    assert await store.upsert(NS, batch) == 3
    assert await store.upsert(NS, batch) == 0  # a re-delivered event
    assert await store.count(NS) == 3

    moved = item("c2", at(0, 8), ordinal=2, text="rewritten")
    assert await store.upsert(NS, [moved]) == 0
    assert await store.count(NS) == 3
    hits = await store.search(NS, "t1", "kb1", at(0), 2)
    assert {hit.chunk_id: hit.text for hit in hits} == {"c0": "text of c0", "c2": "rewritten"}
    assert all(hit.score == pytest.approx(1.0, abs=1e-5) for hit in hits)


async def test_upsert_of_nothing_writes_nothing(store: VectorStore) -> None:
    assert await store.upsert(NS, []) == 0
    assert await store.count(NS) == 0


async def test_a_chunk_given_twice_in_one_batch_is_stored_once_the_last_winning(
    store: VectorStore,
) -> None:
    batch = [item("c0", at(90), text="first"), item("c0", at(0), text="last")]
    assert await store.upsert(NS, batch) == 1
    [hit] = await store.search(NS, "t1", "kb1", at(0), 5)
    assert (hit.text, hit.score) == ("last", pytest.approx(1.0, abs=1e-5))


async def test_search_returns_the_nearest_first_with_cosine_scores(store: VectorStore) -> None:
    angles = [50, 10, 80, 30, 0, 70, 20, 60, 40]
    await store.upsert(
        NS, [item(f"a{angle}", at(angle), ordinal=i) for i, angle in enumerate(angles)]
    )

    hits = await store.search(NS, "t1", "kb1", at(0), 4)

    assert ids(hits) == ["a0", "a10", "a20", "a30"]
    for hit, angle in zip(hits, (0, 10, 20, 30), strict=True):
        assert hit.score == pytest.approx(math.cos(math.radians(angle)), abs=1e-5)
    first = hits[0]
    assert (first.document_id, first.tenant_id, first.kb_id) == ("doc-1", "t1", "kb1")
    assert (first.ordinal, first.start, first.end, first.text) == (4, 400, 499, "text of a0")


async def test_search_stays_inside_the_tenants_knowledge_base(store: VectorStore) -> None:
    await store.upsert(NS, [item("mine", at(40))])
    await store.upsert(NS, [item("other-kb", at(0), kb="kb2")])
    await store.upsert(NS, [item("other-tenant", at(0), tenant="t2")])

    assert ids(await store.search(NS, "t1", "kb1", at(0), 10)) == ["mine"]
    assert ids(await store.search(NS, "t1", "kb2", at(0), 10)) == ["other-kb"]
    assert ids(await store.search(NS, "t2", "kb1", at(0), 10)) == ["other-tenant"]
    assert await store.search(NS, "t2", "kb2", at(0), 10) == []


async def test_namespaces_of_different_dimensions_live_side_by_side(store: VectorStore) -> None:
    await store.upsert("small@1", [item(f"c{i}", at(10 * i, 3)) for i in range(3)])
    await store.upsert("large@1", [item(f"c{i}", at(10 * (2 - i), 16)) for i in range(4)])

    assert (await store.count("small@1"), await store.count("large@1")) == (3, 4)
    assert ids(await store.search("small@1", "t1", "kb1", at(0, 3), 1)) == ["c0"]
    assert ids(await store.search("large@1", "t1", "kb1", at(0, 16), 1)) == ["c2"]
    assert await store.search("other@1", "t1", "kb1", at(0, 3), 1) == []


async def test_delete_document_removes_it_from_every_namespace(store: VectorStore) -> None:
    for namespace, dimension in (("small@1", 3), ("large@1", 16)):
        await store.upsert(namespace, [item("d1-a", at(0, dimension), document="d1")])
        await store.upsert(namespace, [item("d1-b", at(5, dimension), document="d1")])
        await store.upsert(namespace, [item("d2-a", at(9, dimension), document="d2")])
        # the same document id of another tenant is another document
        await store.upsert(namespace, [item("t2-d1", at(0, dimension), document="d1", tenant="t2")])

    assert await store.delete_document("t1", "d1") == 4

    for namespace, dimension in (("small@1", 3), ("large@1", 16)):
        assert ids(await store.search(namespace, "t1", "kb1", at(0, dimension), 10)) == ["d2-a"]
        assert await store.chunk_ids(namespace, "t1", "d1") == set()
        assert await store.chunk_ids(namespace, "t2", "d1") == {"t2-d1"}
    assert await store.delete_document("t1", "d1") == 0


async def test_delete_namespace_drops_one_knowledge_base_of_one_model_version(
    store: VectorStore,
) -> None:
    await store.upsert("m@1", [item("a", at(0)), item("b", at(10))])
    await store.upsert("m@1", [item("c", at(0), kb="kb2")])
    await store.upsert("m@2", [item("a", at(0, 4))])

    assert await store.delete_namespace("m@1", "t1", "kb1") == 2

    assert await store.search("m@1", "t1", "kb1", at(0), 5) == []
    assert ids(await store.search("m@1", "t1", "kb2", at(0), 5)) == ["c"]
    assert ids(await store.search("m@2", "t1", "kb1", at(0, 4), 5)) == ["a"]
    # the namespace keeps its dimension: the knowledge base can be filled again
    assert await store.upsert("m@1", [item("a", at(20))]) == 1


async def test_a_vector_of_another_dimension_than_its_namespace_is_refused(
    store: VectorStore,
) -> None:
    await store.upsert(NS, [item("c0", at(0, 8))])

    with pytest.raises(DimensionMismatch, match="8-d vectors, not 4-d") as refused:
        await store.upsert(NS, [item("c1", at(0, 4)), item("c2", at(0, 4))])
    assert isinstance(refused.value, InvalidInput)
    with pytest.raises(InvalidInput, match="one dimension: 8, not 4"):
        await store.upsert(NS, [item("c1", at(0, 8)), item("c2", at(0, 8)), item("c3", at(0, 4))])
    with pytest.raises(DimensionMismatch):
        await store.search(NS, "t1", "kb1", at(0, 4), 3)

    assert await store.count(NS) == 1  # nothing of the refused batches


@pytest.mark.parametrize(
    ("vector", "problem"),
    [
        (np.full(8, 0.5, dtype=np.float32), "norm"),
        (np.zeros(8, dtype=np.float32), "norm"),
        (np.array([1.0, math.nan, 0, 0], dtype=np.float32), "finite"),
        (np.array([math.inf, 0, 0, 0]), "finite"),
        (np.eye(2, dtype=np.float32), "1-D"),
        (np.empty(0, dtype=np.float32), "1-D"),
        (np.array(["a", "b"]), "numbers"),
        (at(0, MAX_DIMENSIONS + 1), "1-D"),
    ],
    ids=["not-unit", "zero", "nan", "inf", "2-d", "empty", "strings", "too-long"],
)
async def test_an_invalid_vector_is_refused_and_nothing_written(
    store: VectorStore, vector: Vector, problem: str
) -> None:
    with pytest.raises(InvalidInput, match=problem) as refused:
        await store.upsert(NS, [item("good", at(0)), item("bad", vector)])
    assert refused.value.field == "items[1].vector"
    with pytest.raises(InvalidInput, match=problem) as refused:
        await store.search(NS, "t1", "kb1", vector, 3)
    assert refused.value.field == "query_vector"
    assert await store.count(NS) == 0


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"start": 5, "end": 4}, "items[0]"),
        ({"start": -1}, "items[0]"),
        ({"ordinal": -1}, "items[0]"),
        ({"text": "a\x00b"}, "items[0].text"),
    ],
    ids=["end-before-start", "negative-start", "negative-ordinal", "nul-in-text"],
)
async def test_invalid_chunk_fields_are_refused(
    store: VectorStore, changes: dict[str, object], field: str
) -> None:
    fields = {"chunk_id": "c0", "document_id": "d", "tenant_id": "t1", "kb_id": "kb1"}
    fields |= {"ordinal": 0, "start": 0, "end": 1, "text": "x", "vector": at(0)}
    bad = VectorItem(**(fields | changes))  # type: ignore[arg-type]
    with pytest.raises(InvalidInput) as refused:
        await store.upsert(NS, [bad])
    assert refused.value.field == field
    assert await store.count(NS) == 0


@pytest.mark.parametrize("k", [0, -1, MAX_K + 1])
async def test_k_outside_one_to_the_maximum_is_refused(store: VectorStore, k: int) -> None:
    await store.upsert(NS, [item("c0", at(0))])
    with pytest.raises(InvalidInput, match="k is between") as refused:
        await store.search(NS, "t1", "kb1", at(0), k)
    assert refused.value.field == "k"


async def test_search_of_an_empty_store_finds_nothing(store: VectorStore) -> None:
    assert await store.search(NS, "t1", "kb1", at(0), 10) == []
    assert await store.count(NS) == 0
    assert await store.chunk_ids(NS, "t1", "doc-1") == set()
    assert await store.delete_document("t1", "doc-1") == 0
    assert await store.delete_namespace(NS, "t1", "kb1") == 0


async def test_k_larger_than_the_rows_returns_them_all_best_first(store: VectorStore) -> None:
    await store.upsert(NS, [item(f"a{angle}", at(angle)) for angle in (60, 0, 30)])
    hits = await store.search(NS, "t1", "kb1", at(0), MAX_K)
    assert ids(hits) == ["a0", "a30", "a60"]


async def test_count_and_chunk_ids_narrow_by_tenant_kb_and_document(store: VectorStore) -> None:
    await store.upsert(NS, [item("a", at(0), document="d1"), item("b", at(1), document="d1")])
    await store.upsert(NS, [item("c", at(2), document="d2", kb="kb2")])
    await store.upsert(NS, [item("d", at(3), document="d1", tenant="t2")])

    assert await store.count(NS) == 4
    assert await store.count(NS, tenant_id="t1") == 3
    assert await store.count(NS, tenant_id="t1", kb_id="kb1") == 2
    assert await store.count(NS, tenant_id="t1", document_id="d1") == 2
    assert await store.count(NS, kb_id="kb1", document_id="d1") == 3
    assert await store.count("other@1", tenant_id="t1") == 0
    assert await store.chunk_ids(NS, "t1", "d1") == {"a", "b"}
    assert await store.chunk_ids(NS, "t2", "d1") == {"d"}


async def test_items_of_gives_a_documents_chunks_with_their_vectors_in_chunk_order(
    store: VectorStore,
) -> None:
    batch = [item(f"c{i}", at(10 * i), ordinal=i) for i in (2, 0, 1)]
    await store.upsert(NS, [*batch, item("other", at(5), document="doc-2")])
    await store.upsert(NS, [item("c9", at(0), tenant="t2")])  # doc-1 of another tenant

    items = await store.items_of(NS, "t1", "doc-1")

    assert [i.chunk_id for i in items] == ["c0", "c1", "c2"]
    first = items[0]
    assert (first.document_id, first.tenant_id, first.kb_id) == ("doc-1", "t1", "kb1")
    assert (first.ordinal, first.start, first.end, first.text) == (0, 0, 99, "text of c0")
    for stored in items:
        assert stored.vector.dtype == np.float32
        assert np.allclose(stored.vector, at(10 * stored.ordinal), atol=1e-6)
    assert await store.items_of(NS, "t1", "missing") == []
    assert await store.items_of("other@1", "t1", "doc-1") == []


async def test_a_chunk_id_another_tenant_holds_is_refused(store: VectorStore) -> None:
    await store.upsert(NS, [item("shared", at(0), text="t1's")])

    with pytest.raises(ChunkOfAnotherTenant) as refused:
        await store.upsert(
            NS, [item("fresh", at(0), tenant="t2"), item("shared", at(9), tenant="t2")]
        )
    assert isinstance(refused.value, Conflict)

    [hit] = await store.search(NS, "t1", "kb1", at(0), 5)
    assert (hit.chunk_id, hit.text) == ("shared", "t1's")
    assert await store.count(NS, tenant_id="t2") == 0


async def test_a_second_store_on_the_same_url_sees_the_first_ones_writes(
    open_store: Opener,
) -> None:
    writer, reader = await open_store(), await open_store()
    await writer.upsert(NS, [item("far", at(80)), item("mid", at(40))])
    assert ids(await reader.search(NS, "t1", "kb1", at(0), 5)) == ["mid", "far"]

    await writer.upsert(NS, [item("near", at(5))])  # an append
    assert ids(await reader.search(NS, "t1", "kb1", at(0), 5)) == ["near", "mid", "far"]

    await writer.upsert(NS, [item("far", at(0), text="moved")])  # a replacement
    hits = await reader.search(NS, "t1", "kb1", at(0), 5)
    assert ids(hits) == ["far", "near", "mid"]
    assert hits[0].text == "moved"

    await writer.upsert(NS, [item("near", at(5), kb="kb2")])  # moved to another kb
    assert ids(await reader.search(NS, "t1", "kb1", at(0), 5)) == ["far", "mid"]
    assert ids(await reader.search(NS, "t1", "kb2", at(0), 5)) == ["near"]

    await writer.delete_document("t1", "doc-1")
    assert await reader.search(NS, "t1", "kb1", at(0), 5) == []

    await writer.upsert(NS, [item("back", at(0))])
    await writer.delete_namespace(NS, "t1", "kb1")
    assert await reader.search(NS, "t1", "kb1", at(0), 5) == []


async def test_concurrent_upserts_of_the_same_chunks_end_with_one_row_each(
    open_store: Opener,
) -> None:
    first, second = await open_store(), await open_store()
    rng = np.random.default_rng(7)
    vectors = rng.normal(size=(300, 8)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    batch = [item(f"c{i:03}", vectors[i], ordinal=i) for i in range(300)]

    # the other order too: two writers locking shared rows in opposite orders would deadlock
    created = await asyncio.gather(
        first.upsert(NS, batch),
        second.upsert(NS, batch[::-1]),
        first.upsert(NS, batch[100:200]),
        second.upsert(NS, batch[150:]),
    )

    assert sum(created) == 300
    assert await first.count(NS) == 300
    assert await second.chunk_ids(NS, "t1", "doc-1") == {f"c{i:03}" for i in range(300)}
    [hit] = await second.search(NS, "t1", "kb1", vectors[123], 1)
    assert (hit.chunk_id, hit.score) == ("c123", pytest.approx(1.0, abs=1e-5))


async def test_a_closed_store_answers_no_more_calls(open_store: Opener) -> None:
    store = await open_store()
    await store.upsert(NS, [item("c0", at(0))])
    await store.close()

    with pytest.raises(VectorStoreClosed):
        await store.upsert(NS, [item("c1", at(0))])
    with pytest.raises(VectorStoreClosed):
        await store.search(NS, "t1", "kb1", at(0), 1)
    with pytest.raises(VectorStoreClosed):
        await store.count(NS)
