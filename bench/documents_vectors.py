"""documents' vector stores: insert rate and search latency over random unit 384-d vectors in
one knowledge base, k=10, on SQLite + numpy and on pgvector, beside the bare numpy search.

Parts (``--parts``, all by default):

- ``numpy``     the exact search alone: one matrix product over ``--rows`` vectors and an
                ``argpartition`` for the top k. The floor any exact engine pays per query.
- ``sqlite``    ``SQLiteVectorStore`` on a temporary file: ``upsert`` in batches of
                ``--batch`` (rows/s), the first search (it loads the matrix from the file),
                then ``--queries`` searches (p50/p99). Exact, so recall is 1.
- ``pgvector``  ``PgVectorStore`` on the tests' PostgreSQL 16 + pgvector (a temporary server
                on a unix socket): ``upsert`` through the live HNSW index until ``--rows`` or
                ``--pg-insert-budget-s`` (HNSW inserts of random 384-d vectors are slow, and
                the run is bounded: the rows reached are printed), then the query plan,
                ``--queries`` searches (p50/p99) and recall@k against the exact answer.
                ``--pg-load bulk`` loads the rows with the index absent and builds it once
                (pgvector's advice for a first load): the way to reach 100,000 rows, in minutes.

Random vectors are the hard case for HNSW (no clusters; the ten nearest of a random query
are barely nearer than any other vector), so its recall@k here is a floor, not what real
embeddings get. A second set of queries, each near one stored vector, checks that a search
that has a clear answer finds it.

    python bench/documents_vectors.py                      # bounded: under 2 minutes
    python bench/documents_vectors.py --parts pgvector --pg-load bulk
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import numpy as np
import numpy.typing as npt
import psycopg
from pgvector.psycopg import register_vector

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.loopback import machine_load, percentile
from tests.support.pgvector import PgvectorServer

from aigc_hub.pipelines.documents.vectors import VectorItem, VectorStore, sql
from aigc_hub.pipelines.documents.vectors.pgvector import PgVectorStore
from aigc_hub.pipelines.documents.vectors.sqlite import SQLiteVectorStore

Matrix = npt.NDArray[np.float32]
NS = "bench@1"


def unit_rows(count: int, dimension: int, seed: int) -> Matrix:
    """``count`` random unit vectors (normal, then L2-normalised)."""
    rows = np.random.default_rng(seed).normal(size=(count, dimension)).astype(np.float32)
    normalised: Matrix = rows / np.linalg.norm(rows, axis=1, keepdims=True)
    return normalised


def batch(vectors: Matrix, start: int, text: str) -> list[VectorItem]:
    """Chunks ``start``… of one document per batch, in one knowledge base."""
    return [
        VectorItem(f"c{start + i}", f"d{start}", "t1", "kb1", i, 0, len(text), text, vector)
        for i, vector in enumerate(vectors)
    ]


def exact_top(data: Matrix, query: Matrix, k: int) -> npt.NDArray[np.int64]:
    """Row indexes of the ``k`` highest dot products, best first."""
    scores = data @ query
    best = np.argpartition(-scores, k - 1)[:k]
    ordered: npt.NDArray[np.int64] = best[np.argsort(-scores[best])]
    return ordered


def report(name: str, timings_s: list[float]) -> str:
    """``name p50 … ms p99 … ms`` of the timings."""
    ms = sorted(t * 1000 for t in timings_s)
    return f"{name}: p50 {percentile(ms, 50):.2f} ms, p99 {percentile(ms, 99):.2f} ms ({len(ms)})"


def part_numpy(data: Matrix, queries: Matrix, k: int) -> None:
    timings = []
    for query in queries:
        began = time.perf_counter()
        exact_top(data, query, k)
        timings.append(time.perf_counter() - began)
    print(f"  {report('numpy exact search', timings)}")


async def insert(
    store: VectorStore, data: Matrix, size: int, budget_s: float | None
) -> tuple[int, float]:
    """Upsert ``data`` in batches of ``size`` until done or past ``budget_s``; rows, seconds."""
    text = "x" * 400  # a chunk's text, about what the splitter makes
    began = time.perf_counter()
    done = 0
    while done < len(data):
        await store.upsert(NS, batch(data[done : done + size], done, text))
        done = min(done + size, len(data))
        if budget_s is not None and time.perf_counter() - began > budget_s:
            break
    return done, time.perf_counter() - began


async def searches(
    store: VectorStore, queries: Matrix, k: int
) -> tuple[list[float], list[list[str]]]:
    """Each query's search time and the chunk ids it found."""
    timings, found = [], []
    for query in queries:
        began = time.perf_counter()
        hits = await store.search(NS, "t1", "kb1", query, k)
        timings.append(time.perf_counter() - began)
        found.append([hit.chunk_id for hit in hits])
    return timings, found


def near(data: Matrix, count: int, seed: int) -> tuple[Matrix, list[str]]:
    """``count`` queries each near one stored vector (cosine about 0.9 with it, about 0 with
    the others), and the chunk ids of those vectors: a search that works finds it first."""
    rng = np.random.default_rng(seed)
    chosen = rng.choice(len(data), size=count, replace=False)
    noise = rng.normal(size=(count, data.shape[1])).astype(np.float32)
    noise *= 0.5 / np.linalg.norm(noise, axis=1, keepdims=True)
    queries: Matrix = data[chosen] + noise
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    return queries, [f"c{i}" for i in chosen]


async def planted_first(store: VectorStore, queries: Matrix, sources: list[str], k: int) -> float:
    """The share of ``near`` queries whose source vector comes first."""
    firsts = 0
    for query, source in zip(queries, sources, strict=True):
        hits = await store.search(NS, "t1", "kb1", query, k)
        firsts += bool(hits) and hits[0].chunk_id == source
    return firsts / len(queries)


def recall(data: Matrix, queries: Matrix, found: list[list[str]], k: int) -> float:
    """The share of the exact top k that the searches found."""
    hit = 0
    for query, ids in zip(queries, found, strict=True):
        truth = {f"c{i}" for i in exact_top(data, query, k)}
        hit += len(truth & set(ids))
    return hit / (k * len(queries))


async def part_sqlite(data: Matrix, queries: Matrix, k: int, size: int) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-vectors-") as folder:
        store = SQLiteVectorStore(Path(folder) / "vectors.db")
        try:
            rows, seconds = await insert(store, data, size, None)
            print(
                f"  sqlite upsert: {rows:,} rows in {seconds:.1f} s = {rows / seconds:,.0f} rows/s"
            )
            began = time.perf_counter()
            await store.search(NS, "t1", "kb1", queries[0], k)
            print(f"  sqlite first search (loads the matrix): {time.perf_counter() - began:.3f} s")
            timings, found = await searches(store, queries, k)
            share = recall(data, queries, found, k)
            print(f"  {report('sqlite search', timings)}, recall@{k} {share:.3f}")
            nearby, sources = near(data, len(queries), seed=3)
            first = await planted_first(store, nearby, sources, k)
            print(f"  sqlite: a query near a stored vector finds it first: {first:.1%}")
        finally:
            await store.close()


async def part_pgvector(
    data: Matrix,
    queries: Matrix,
    k: int,
    size: int,
    budget_s: float | None,
    load: str,
    ef_search: list[int],
) -> None:
    server = PgvectorServer()
    server.start()
    try:
        url = server.create_database()
        store = await PgVectorStore.open(url)
        try:
            if load == "bulk":
                rows, seconds = await bulk_load(store, url, data, size)
            else:
                rows, seconds = await insert(store, data, size, budget_s)
                print(
                    f"  pgvector upsert through the live HNSW index: {rows:,} rows in "
                    f"{seconds:.1f} s = {rows / seconds:,.0f} rows/s"
                    + ("" if rows == len(data) else f" (stopped by the {budget_s:g} s budget)")
                )
            with psycopg.connect(url, autocommit=True) as conn:
                register_vector(conn)
                conn.execute("ANALYZE vector_chunks")
                parameters = {"query": queries[0], "namespace": NS, "tenant_id": "t1"}
                plan = conn.execute(
                    "EXPLAIN " + sql.pg_search(data.shape[1]),
                    {**parameters, "kb_id": "kb1", "k": k},
                ).fetchall()
            scan = next(
                (str(r[0]).strip() for r in plan if "Scan" in str(r[0]) and "CTE" not in str(r[0])),
                "?",
            )
            print(f"  pgvector plan at {rows:,} rows: {scan}")
            await store.search(NS, "t1", "kb1", queries[0], k)  # the pool's connections warm
            for ef in ef_search:
                store.ef_search = ef
                timings, found = await searches(store, queries, k)
                share = recall(data[:rows], queries, found, k)
                nearby, sources = near(data[:rows], len(queries), seed=3)
                first = await planted_first(store, nearby, sources, k)
                print(
                    f"  {report(f'pgvector search, ef_search {ef}', timings)}, recall@{k} "
                    f"{share:.3f}, a query near a stored vector finds it first: {first:.1%} "
                    f"(iterative scan {store.iterative_scan}, pgvector {store.version})"
                )
        finally:
            await store.close()
    finally:
        server.stop()


async def bulk_load(store: PgVectorStore, url: str, data: Matrix, size: int) -> tuple[int, float]:
    """Rows upserted with the dimension's index dropped, then the index built once."""
    await store.upsert(NS, batch(data[:1], 0, "x"))  # binds the namespace, makes the index
    index = sql.pg_hnsw_name(data.shape[1])
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"DROP INDEX {index}")
    rows, seconds = await insert(store, data, size, None)
    rate = rows / seconds
    print(f"  pgvector upsert, no index: {rows:,} rows in {seconds:.1f} s = {rate:,.0f} rows/s")
    began = time.perf_counter()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.pg_hnsw_index(data.shape[1]))
    built = time.perf_counter() - began
    print(f"  pgvector HNSW build over {rows:,} rows: {built:.1f} s = {rows / built:,.0f} rows/s")
    return rows, seconds + built


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--parts", default="numpy,sqlite,pgvector")
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--dimensions", type=int, default=384)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("-k", type=int, default=10)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--pg-insert-budget-s", type=float, default=45.0, help="0: no budget")
    parser.add_argument("--pg-load", choices=("live", "bulk"), default="live")
    parser.add_argument(
        "--ef-search", default="40,200", help="pgvector's hnsw.ef_search values to search with"
    )
    args = parser.parse_args()
    parts = set(args.parts.split(","))

    began = time.perf_counter()
    data = unit_rows(args.rows, args.dimensions, seed=1)
    queries = unit_rows(args.queries, args.dimensions, seed=2)
    print(
        f"{args.rows:,} random unit {args.dimensions}-d vectors in one kb, k={args.k}, "
        f"{args.queries} queries; {machine_load()}"
    )
    steps: dict[str, Callable[[], Awaitable[None]]] = {
        "sqlite": lambda: part_sqlite(data, queries, args.k, args.batch),
        "pgvector": lambda: part_pgvector(
            data,
            queries,
            args.k,
            args.batch,
            args.pg_insert_budget_s or None,
            args.pg_load,
            [int(value) for value in args.ef_search.split(",")],
        ),
    }
    if "numpy" in parts:
        part_numpy(data, queries, args.k)
    for name, step in steps.items():
        if name in parts:
            await step()
    print(f"total {time.perf_counter() - began:.0f} s; {machine_load()}")


if __name__ == "__main__":
    asyncio.run(main())
