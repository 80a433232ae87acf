"""The embedding batches of documents are cut most urgent first: the pipeline's
``embedding-workers`` group ranks a chunk by the priority its document was submitted with."""

from __future__ import annotations

from aigc_hub.core.envelope import Envelope
from aigc_hub.pipelines.documents import events
from aigc_hub.pipelines.documents.pipeline import pipeline


def chunk_with(priority: str | None) -> Envelope:
    payload = {} if priority is None else {"priority": priority}
    return Envelope.new(events.CHUNK_CREATED, payload, key="doc-1", source="tests")


def test_embedding_batches_rank_critical_then_high_then_normal() -> None:
    [spec] = [s for s in pipeline.handlers if s.group == "embedding-workers"]
    assert spec.batching is not None and spec.batching.priority is not None
    rank = spec.batching.priority
    ranks = [rank(chunk_with(p)) for p in ("critical", "high", "normal")]
    assert ranks == sorted(ranks, reverse=True) and len(set(ranks)) == 3
    # A chunk from before priorities (or a value we do not know) counts as normal.
    assert rank(chunk_with(None)) == rank(chunk_with("urgent!")) == rank(chunk_with("normal"))
