"""500 real documents of mixed formats (text, Markdown, HTML, PDF, DOCX made from the texts
shipped inside the installed packages) through the real API on embedded defaults, with
all-MiniLM-L6-v2 in process: every task completes, every chunk has exactly one vector, and
searching for a sentence of document X finds X's chunk first for at least 95 % of them."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa

from aigc_hub.pipelines.documents.models import documents_chunks
from tests.support.documents import documents_stack, submit, wait_ended
from tests.support.documents_corpus import corpus
from tests.support.hubs import make_broker

DOCUMENTS = 500


@pytest.mark.slow
@pytest.mark.timeout(1200)
async def test_five_hundred_documents_complete_once_and_are_found_by_their_sentences(
    sqlite_url: str, tmp_path: Path
) -> None:
    docs = corpus(DOCUMENTS)
    broker = make_broker("embedded", tmp_path)
    async with documents_stack(sqlite_url, broker, tmp_path) as stack:
        key = await stack.tenant("library")
        async with stack.client(key) as client:
            tasks = []
            for i, doc in enumerate(docs):
                answer = await submit(
                    client, "shelf", doc.name, doc.data, doc.mime, key=f"d{i}", analysis="false"
                )
                assert answer.status_code == 202, (doc.name, answer.text)
                tasks.append(answer.json())
            ended = await wait_ended(client, [t["task_id"] for t in tasks], timeout_s=900)
            found_first = 0
            for doc, task in zip(docs, tasks, strict=True):
                answer = await client.get(
                    "/v1/knowledge-bases/shelf/search", params={"q": doc.probe, "k": 3}
                )
                hits = answer.json()["hits"]
                found_first += bool(hits) and hits[0]["document_id"] == task["document_id"]
        store = await stack.docs.vectors()
        namespace = stack.docs.embedder.name
        vectors = await store.count(namespace, kb_id="shelf")
        async with stack.hub.engine.connect() as conn:
            chunks = int(
                await conn.scalar(sa.select(sa.func.count()).select_from(documents_chunks))
            )
    statuses = {t["status"] for t in ended.values()}
    assert statuses == {"completed"}, [t for t in ended.values() if t["status"] != "completed"][:3]
    total = sum(t["chunks_total"] for t in ended.values())
    assert all(t["chunks_stored"] == t["chunks_total"] >= 1 for t in ended.values())
    # Exactly one vector per chunk: the store keeps one row per (model, chunk id), and
    # there are as many as there are chunks.
    assert vectors == chunks == total
    assert found_first >= 0.95 * DOCUMENTS, found_first
