"""A documents task's progress on ``GET /v1/events``: every stage the task's snapshot goes
through (queued → processing 30 % → stored chunks → completed 100 %) arrives as a
notification after it committed, only to the task's tenant, on embedded defaults."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from tests.support.documents import documents_stack, submit
from tests.support.hubs import make_broker
from tests.support.sse import FrameReader

#: Enough text for several chunks, so progress steps between 30 % and 100 %.
TEXT = " ".join(
    f"Paragraph {i}: the lighthouse keeper logged the weather, the passing ships and the "
    f"state of the lamp on page {i} of the ledger, as the harbour master required."
    for i in range(120)
)


async def _notes_until_ended(reader: FrameReader, task_id: str) -> list[dict[str, Any]]:
    """The notifications about ``task_id`` up to the one saying it ended."""
    notes: list[dict[str, Any]] = []
    async with asyncio.timeout(120):
        while True:
            frame = await reader.next(timeout=120)
            if frame.event != "notification":
                continue
            note = frame.json()
            if note["subject_id"] != task_id:
                continue
            notes.append(note)
            if note["status"] in ("completed", "failed"):
                return notes


async def test_a_documents_task_streams_its_stages_and_progress_to_its_tenant_only(
    sqlite_url: str, tmp_path: Path
) -> None:
    broker = make_broker("embedded", tmp_path)
    async with documents_stack(
        sqlite_url, broker, tmp_path, chunk_tokens=128, embed_batch=4, embed_wait_s=0.05
    ) as stack:
        key = await stack.tenant("studio")
        other = await stack.tenant("elsewhere")
        async with (
            stack.client(key) as client,
            stack.client(other) as stranger,
            client.stream("GET", "/v1/events") as ours,
            stranger.stream("GET", "/v1/events") as theirs,
        ):
            reader, their_reader = FrameReader(ours), FrameReader(theirs)
            try:
                for r in (reader, their_reader):
                    assert (await r.next()).comments == ["ready"]
                answer = await submit(
                    client,
                    "kb-1",
                    "log.txt",
                    TEXT.encode(),
                    "text/plain",
                    key="k1",
                    analysis="false",
                )
                assert answer.status_code == 202, answer.text
                task_id = answer.json()["task_id"]
                notes = await _notes_until_ended(reader, task_id)
                snapshot = (await client.get(f"/v1/documents/tasks/{task_id}")).json()
                # The stranger's stream saw nothing of it (heartbeats at most).
                leaked = []
                while True:
                    try:
                        frame = await their_reader.next(timeout=0.5)
                    except TimeoutError:
                        break
                    if frame.event == "notification":
                        leaked.append(frame.json())
            finally:
                await reader.aclose()
                await their_reader.aclose()
    assert leaked == []
    assert all(n["subject_type"] == "documents_task" for n in notes)
    first, last = notes[0], notes[-1]
    assert (first["status"], first["progress"]) == ("processing", 0.3), first
    assert first["data"]["chunks_total"] == snapshot["chunks_total"] > 2
    steps = [n for n in notes if n["kind"] == "progress"]
    assert steps, "no progress step between chunking and completion"
    assert all(0.3 < n["progress"] < 1.0 for n in steps)
    progress = [n["progress"] for n in notes]
    assert progress == sorted(progress)
    assert (last["status"], last["progress"], last["stage"]) == ("completed", 1.0, "completed")
    assert last["data"]["chunks_stored"] == snapshot["chunks_total"]
