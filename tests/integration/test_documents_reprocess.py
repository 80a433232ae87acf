"""Reprocessing a knowledge base's history and an A/B test of two embedding model versions
(seed 003 FAQ Q1, §1.1), on embedded defaults through the real API: all-MiniLM-L6-v2 in
process is the first version; the second is a hosted model behind the OpenAI-compatible
adapter (the loopback vendor), run as its own consumer group ``embedding-workers-b`` into
its own vector namespace. A reprocessing run re-embeds the completed documents uploaded
since a time, by every model or the one named, replacing vectors in place (one per model
version and chunk), tasks untouched; a resent request is the same run."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from aigc_hub import tenancy
from aigc_hub.core.errors import ConfigurationError
from aigc_hub.pipelines.documents.cli import app as docs_cli
from aigc_hub.store import tables
from aigc_hub.testing.openai_vendor import OpenAIVendor, serve_vendor
from tests.support.documents import DocumentsStack, documents_stack, submit, wait_ended
from tests.support.hubs import make_broker, wait_until

DIMS = 64
#: Every group of the test's stack, with the topic it reads.
GROUPS = [
    ("embedding-workers", "chunks-created"),
    ("embedding-workers-b", "chunks-created"),
    ("vector-storage-workers", "embeddings-generated"),
]
TOPICS = ["tides and turbines", "sourdough starters", "lighthouse keepers", "glass harbours"]


def text_about(topic: str) -> str:
    return " ".join(
        f"Note {i} on {topic}: the survey of {topic} recorded item {i} in the ledger of the "
        f"season, with the weather and the tally of the day."
        for i in range(30)
    )


@pytest.fixture
async def vendor() -> AsyncIterator[OpenAIVendor]:
    async with serve_vendor(dimensions=DIMS) as served:
        yield served


async def inbox_marks(stack: DocumentsStack, consumer: str) -> int:
    async with stack.hub.engine.connect() as conn:
        return int(
            await conn.scalar(
                sa.select(sa.func.count())
                .select_from(tables.inbox)
                .where(tables.inbox.c.consumer == consumer)
            )
            or 0
        )


async def outbox_rows(stack: DocumentsStack) -> int:
    async with stack.hub.engine.connect() as conn:
        return int(await conn.scalar(sa.select(sa.func.count()).select_from(tables.outbox)) or 0)


async def submit_all(client: httpx.AsyncClient, names: list[str]) -> list[dict[str, Any]]:
    tasks = []
    for name in names:
        answer = await submit(
            client,
            "kb",
            f"{name}.txt",
            text_about(name).encode(),
            "text/plain",
            key=name,
            analysis="false",
        )
        assert answer.status_code == 202, answer.text
        tasks.append(answer.json())
    ended = await wait_ended(client, [t["task_id"] for t in tasks])
    return [ended[t["task_id"]] for t in tasks]


async def test_reprocessing_since_a_time_and_an_ab_model_each_keep_one_vector_per_chunk(
    sqlite_url: str, tmp_path: Path, vendor: OpenAIVendor
) -> None:
    broker = make_broker("embedded", tmp_path)
    async with documents_stack(
        sqlite_url,
        broker,
        tmp_path,
        embed_batch=8,
        embed_wait_s=0.05,
        ab_embedder="openai",
        openai_base_url=vendor.base_url,
        openai_api_key=vendor.api_key,
        openai_dimensions=DIMS,
    ) as stack:
        docs = stack.docs
        assert docs.ab_embedder is not None
        a, b = docs.embedder.name, docs.ab_embedder.name
        store = await docs.vectors()
        tenant, key = await tenancy.create_tenant(stack.hub.engine, "studio")

        async def stored(n: int) -> None:
            """Wait until ``n`` vectors were stored in all (each model's, each run's), and
            every group has caught up: no more can come."""

            async def done() -> bool:
                if await inbox_marks(stack, "vector-storage-workers") < n:
                    return False
                lags = [await broker.lag(group, [topic]) for group, topic in GROUPS]
                return sum(p.lag for lag in lags for p in lag) == 0

            await wait_until(done, timeout=90)

        async with stack.client(key) as client:
            old = await submit_all(client, TOPICS[:2])
            since = docs.hub.clock.now_ms()
            new = await submit_all(client, TOPICS[2:])
            chunks = sum(t["chunks_total"] for t in (*old, *new))
            new_chunks = sum(t["chunks_total"] for t in new)
            # The second version trails the first and fills its own namespace.
            await stored(2 * chunks)
            b_before = await store.count(b, kb_id="kb")
            found_b = await client.get(
                "/v1/knowledge-bases/kb/search", params={"q": "sourdough", "k": 3, "model": b}
            )
            unknown = await client.get(
                "/v1/knowledge-bases/kb/search", params={"q": "x", "model": "no-such-model"}
            )

            body = {"since": _iso(since)}
            headers = {"Idempotency-Key": "rerun-1"}
            run = await client.post("/v1/knowledge-bases/kb/reprocess", json=body, headers=headers)
            assert run.status_code == 202, run.text
            # Both models re-embed the new documents' chunks.
            await stored(2 * chunks + 2 * new_chunks)
            written = await outbox_rows(stack)
            again = await client.post(
                "/v1/knowledge-bases/kb/reprocess", json=body, headers=headers
            )
            after_resend = await outbox_rows(stack)

            # The named model only, every document this time.
            only_b = await client.post(
                "/v1/knowledge-bases/kb/reprocess",
                json={"model": b},
                headers={"Idempotency-Key": "rerun-2"},
            )
            assert only_b.status_code == 202, only_b.text
            await stored(3 * chunks + 2 * new_chunks)
            storage_marks = await inbox_marks(stack, "vector-storage-workers")
            after = {
                t["task_id"]: (await client.get(f"/v1/documents/tasks/{t['task_id']}")).json()
                for t in (*old, *new)
            }
            vectors = {m: await store.count(m, kb_id="kb") for m in (a, b)}
            per_chunk = {
                m: [len(await store.chunk_ids(m, tenant.id, t["document_id"])) for t in new]
                for m in (a, b)
            }
    assert run.json()["documents"] == len(new) and run.json()["chunks"] == new_chunks
    assert again.status_code == 202 and again.json() == run.json()
    assert after_resend == written  # the resend queued nothing
    assert only_b.json()["documents"] == len(TOPICS) and only_b.json()["chunks"] == chunks
    # Each vector stored once per model and run: the B-only run had A embed nothing.
    assert storage_marks == 3 * chunks + 2 * new_chunks
    assert b_before == chunks
    # One vector per chunk and model, however often re-embedded.
    assert vectors == {a: chunks, b: chunks}
    assert per_chunk[a] == per_chunk[b] == [t["chunks_total"] for t in new]
    for task in (*old, *new):
        now = after[task["task_id"]]
        assert (now["status"], now["progress"]) == ("completed", 100)
        assert now["updated_at"] == task["updated_at"]  # the runs never touched a task
    hits = found_b.json()
    assert found_b.status_code == 200 and hits["model"] == b and hits["hits"]
    assert unknown.status_code == 422 and "no-such-model" in unknown.text


async def test_a_reprocess_request_that_names_nothing_valid_is_refused_with_the_field(
    sqlite_url: str, tmp_path: Path
) -> None:
    broker = make_broker("embedded", tmp_path)
    async with documents_stack(sqlite_url, broker, tmp_path) as stack:
        key = await stack.tenant("studio")
        async with stack.client(key) as client:
            answers = {
                name: await client.post(
                    f"/v1/knowledge-bases/{kb}/reprocess",
                    json=body,
                    headers={"Idempotency-Key": name},
                )
                for name, kb, body in [
                    ("bad-kb", "-kb", {}),
                    ("bad-since", "kb", {"since": "yesterday"}),
                    ("bad-model", "kb", {"model": "no-such-model"}),
                    ("extra-field", "kb", {"sinse": "2026-12-01"}),
                ]
            }
            empty = await client.post(
                "/v1/knowledge-bases/kb/reprocess", json={}, headers={"Idempotency-Key": "e"}
            )
        # No second model configured: its group does not exist here, nor its lag.
        hub = stack.hub
        groups = {spec.group for spec in hub.handler_specs}
        with pytest.raises(ConfigurationError, match="embedding-workers-b not enabled"):
            await hub.run(asyncio.Event(), ["embedding-workers-b"])
    assert "embedding-workers" in groups and "embedding-workers-b" not in groups
    assert "embedding-workers-b" not in hub.lag.groups
    for name, answer in answers.items():
        assert answer.status_code == 422, (name, answer.text)
        assert answer.headers["content-type"].startswith("application/problem+json"), name
    assert "no-such-model" in answers["bad-model"].text
    assert empty.status_code == 202 and empty.json()["chunks"] == 0


def test_the_cli_refuses_a_since_that_is_no_time_with_the_fix() -> None:
    result = CliRunner().invoke(
        docs_cli, ["reprocess", "--kb", "kb", "--since", "last week", "--api-key", "k"]
    )
    assert result.exit_code != 0
    assert "--since 'last week': use an ISO 8601 time" in result.output
    assert "Traceback" not in result.output


def _iso(ms: int) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(ms / 1000, UTC).isoformat()
