"""The documents pipeline end to end on embedded defaults (SQLite, the embedded log, local
files, vectors in SQLite, all-MiniLM-L6-v2 in process), through the real API: submit →
chunk → embed → store → search, what is refused at once, what fails in the workers (to the
dead-letter queue, the task ``failed`` with its reason), deletion, and a duplicate
delivery of every event adding no vector."""

from __future__ import annotations

from pathlib import Path

from fpdf import FPDF

from aigc_hub.pipelines.documents.adapters.embedder import AbsentEmbedder
from aigc_hub.reliability.dlq import DeadLetterFilter
from tests.support.documents import documents_stack, submit, wait_ended
from tests.support.hubs import DoublePublisher, make_broker

ARTICLE = """# Tidal power in the Bay of Fundy

The Bay of Fundy has the highest tides in the world, rising up to sixteen metres twice a day.
Engineers have long tried to turn that motion into electricity with underwater turbines.

## Turbines

A turbine anchored to the sea floor turns as the tide floods and again as it ebbs. Salt water,
strong currents and drifting ice make maintenance hard and expensive.
"""

RECIPE = """<html><head><title>Sourdough</title><script>var tracking = 1;</script></head>
<body><h1>Sourdough bread</h1><p>Feed the starter with flour and water the night before
baking. Mix the dough, let it rest, fold it every half hour, then shape the loaf.</p>
<p>Bake in a hot covered pot so the crust blisters and the crumb stays open.</p></body></html>
"""

NOTES = (
    "Quarterly notes. The warehouse in Rotterdam shipped four hundred pallets of ceramic tiles. "
    "Customs held two containers for a week because an invoice was missing. "
) * 30


def pdf_of(pages: list[str]) -> bytes:
    pdf = FPDF()
    pdf.set_font("helvetica", size=11)
    for text in pages:
        pdf.add_page()
        pdf.multi_cell(0, 6, text)
    return bytes(pdf.output())


async def test_documents_are_chunked_embedded_stored_and_found(
    sqlite_url: str, tmp_path: Path
) -> None:
    # Every event is published twice (a relay retry after a lost ack): no vector twice.
    broker = DoublePublisher(make_broker("embedded", tmp_path))
    async with documents_stack(sqlite_url, broker, tmp_path) as stack:  # type: ignore[arg-type]
        key = await stack.tenant("studio")
        other = await stack.tenant("elsewhere")
        async with stack.client(key) as client:
            sent = [
                ("tides.md", ARTICLE.encode(), "text/markdown"),
                ("bread.html", RECIPE.encode(), "text/html"),
                ("notes.txt", NOTES.encode(), "text/plain"),
                ("report.pdf", pdf_of([NOTES[:900], ARTICLE]), "application/pdf"),
            ]
            tasks = []
            for i, (name, data, mime) in enumerate(sent):
                answer = await submit(
                    client, "kb-1", name, data, mime, key=f"k{i}", analysis="false"
                )
                assert answer.status_code == 202, answer.text
                body = answer.json()
                assert (body["status"], body["progress"]) == ("queued", 0)
                assert answer.headers["location"] == f"/v1/documents/tasks/{body['task_id']}"
                tasks.append(body)
            ended = await wait_ended(client, [t["task_id"] for t in tasks])
            found = await client.get(
                "/v1/knowledge-bases/kb-1/search",
                params={"q": "how do you bake bread with a starter", "k": 3},
            )
        async with stack.client(other) as stranger:
            theirs = await stranger.get(
                "/v1/knowledge-bases/kb-1/search", params={"q": "bread", "k": 3}
            )
            peeked = await stranger.get(f"/v1/documents/tasks/{tasks[0]['task_id']}")
        store = await stack.docs.vectors()
        namespace = stack.docs.embedder.name
        stored = {
            t["document_id"]: await store.count(namespace, document_id=t["document_id"])
            for t in tasks
        }
    for task in ended.values():
        assert task["status"] == "completed" and task["progress"] == 100, task
        assert task["chunks_total"] >= 1
        assert stored[task["document_id"]] == task["chunks_total"] == task["chunks_stored"]
    assert [t["format"] for t in (ended[t["task_id"]] for t in tasks)] == [
        "markdown",
        "html",
        "text",
        "pdf",
    ]
    hits = found.json()["hits"]
    assert hits[0]["document_id"] == tasks[1]["document_id"]
    assert "starter" in hits[0]["text"] and "tracking" not in hits[0]["text"]
    assert hits[0]["score"] >= hits[-1]["score"]
    assert theirs.status_code == 200 and theirs.json()["hits"] == []
    assert peeked.status_code == 404


async def test_what_can_never_be_processed_is_refused_at_once(
    sqlite_url: str, tmp_path: Path
) -> None:
    broker = make_broker("embedded", tmp_path)
    async with documents_stack(sqlite_url, broker, tmp_path, max_file_bytes=4096) as stack:
        key = await stack.tenant("studio")
        async with stack.client(key) as client:
            big = await submit(client, "kb", "big.txt", b"word " * 2000, "text/plain", key="a")
            image = await submit(
                client, "kb", "a.png", b"\x89PNG\r\n\x1a\n" + bytes(64), "image/png", key="b"
            )
            bad_kb = await submit(client, "-bad-", "a.txt", b"hello", "text/plain", key="c")
            empty = await submit(client, "kb", "a.txt", b"", "text/plain", key="d")
            listed = await client.get("/v1/knowledge-bases/kb/documents")
    assert big.status_code == 413 and big.json()["type"].endswith("document-too-large")
    assert image.status_code == 415
    assert bad_kb.status_code == 422 and empty.status_code == 422
    assert listed.json()["items"] == []  # nothing was stored


async def test_a_corrupt_or_oversized_document_fails_with_its_reason_in_the_dlq(
    sqlite_url: str, tmp_path: Path
) -> None:
    broker = make_broker("embedded", tmp_path)
    whole = pdf_of(["first page " * 20, "second page " * 20])
    async with documents_stack(sqlite_url, broker, tmp_path, max_pages=3) as stack:
        key = await stack.tenant("studio")
        async with stack.client(key) as client:
            corrupt = await submit(
                client, "kb", "cut.pdf", whole[: len(whole) // 2], "application/pdf", key="a"
            )
            long = await submit(
                client, "kb", "long.pdf", pdf_of(["page"] * 5), "application/pdf", key="b"
            )
            ended = await wait_ended(client, [corrupt.json()["task_id"], long.json()["task_id"]])
        letters = await stack.hub.dlq.list(DeadLetterFilter(consumer="chunking-workers"))
    first, second = ended[corrupt.json()["task_id"]], ended[long.json()["task_id"]]
    assert (first["status"], first["error_reason"]) == ("failed", "corrupt")
    assert (second["status"], second["error_reason"]) == ("failed", "too_many_pages")
    assert "5" in second["error_message"]
    # Dead-lettered at once (bad data is never worth a retry), one letter each.
    assert sorted(letter.key or "" for letter in letters) == sorted(
        [corrupt.json()["document_id"], long.json()["document_id"]]
    )
    assert all(letter.attempts == 1 for letter in letters)


async def test_a_deleted_document_leaves_no_chunk_vector_or_file(
    sqlite_url: str, tmp_path: Path
) -> None:
    broker = make_broker("embedded", tmp_path)
    async with documents_stack(sqlite_url, broker, tmp_path) as stack:
        key = await stack.tenant("studio")
        async with stack.client(key) as client:
            answer = await submit(
                client,
                "kb",
                "notes.txt",
                NOTES.encode(),
                "text/plain",
                key="a",
                analysis="false",
            )
            task = answer.json()
            await wait_ended(client, [task["task_id"]])
            deleted = await client.delete(f"/v1/documents/{task['document_id']}")
            again = await client.delete(f"/v1/documents/{task['document_id']}")
            found = await client.get(
                "/v1/knowledge-bases/kb/search", params={"q": "pallets of ceramic tiles"}
            )
        store = await stack.docs.vectors()
        left = await store.count(stack.docs.embedder.name, document_id=task["document_id"])
        files = list((tmp_path / "blobs").rglob("notes.txt"))
    assert deleted.status_code == 200 and deleted.json()["status"] == "deleted"
    assert again.status_code == 200 and again.json()["status"] == "deleted"
    assert found.json()["hits"] == [] and left == 0 and files == []


async def test_a_hub_without_its_embedding_model_refuses_uploads_with_the_fix(
    sqlite_url: str, tmp_path: Path
) -> None:
    # What a machine without the ml extra gets: the hub runs, uploads answer 503 at once.
    absent = AbsentEmbedder("local embedding needs torch: pip install 'aigc-hub[ml]'")
    broker = make_broker("embedded", tmp_path)
    async with documents_stack(sqlite_url, broker, tmp_path, embedder=absent) as stack:
        key = await stack.tenant("studio")
        async with stack.client(key) as client:
            answer = await submit(client, "kb", "a.txt", NOTES.encode(), "text/plain", key="a")
            listed = await client.get("/v1/knowledge-bases/kb/documents")
    assert answer.status_code == 503
    assert "pip install 'aigc-hub[ml]'" in answer.json()["detail"]
    assert listed.json()["items"] == []
