"""``Pipeline("documents", alias="docs", state=build_state)``: seed 003's document pipeline.
Topics, events, the consumer groups (the seed's ``@KafkaListener`` workers), routes.

Consumer groups, named as the seed names them, each its own concurrency pool:

* ``chunking-workers`` (§4.1, concurrency 3) — ``documents-uploaded`` → parse, chunk →
  ``chunks-created``;
* ``embedding-workers`` (§4.2, a batch group: 50 chunks or 2 s, 2 batches at once) —
  ``chunks-created`` → the embedding model → ``embeddings-generated``;
* ``vector-storage-workers`` (§4.3, a batch group, 2 at once) — ``embeddings-generated`` →
  the vector store → the task's progress and end, or ``ai-analysis-requests``;
* ``ai-analysis-workers`` (§7, concurrency 5) — ``ai-analysis-requests`` → the analyzer →
  the report, the task completed, ``ai-analysis-completed``; paced by the backpressure,
  which also closes the admission gate for new documents while it is on.

The seed's error handler (§6.1: 1 s → 2 s → 4 s, 3 attempts, non-retryable errors straight
to the dead-letter topic) is the backbone's; its idempotency guard (§5) is the inbox.
"""

from __future__ import annotations

from aigc_hub.pipeline import Pipeline

from . import avro, dlq_http, events, http, models, up
from .handlers import analysis, chunking, embedding, storage
from .settings import DocumentsSettings
from .state import NAME, Documents, build_state

#: Room for the multipart framing around the largest file a user may upload.
MULTIPART_OVERHEAD = 64 << 10

pipeline = Pipeline(
    NAME,
    alias="docs",
    state=build_state,
    settings=DocumentsSettings,
    cli="aigc_hub.pipelines.documents.cli:app",
    models=models.__name__,
    # Its tables' revisions are in the hub's own linear chain: no branch of its own.
    migrations=None,
)
events.register(pipeline)
# Uploads may come as Avro from producers outside the hub (seed 003 §9).
pipeline.avro_topics.append(avro.UPLOADED)
pipeline.routers += [http.kb_router, http.tasks_router]
# The seed's DLQ management API (§6.3) at its own path, over the backbone's one DLQ.
pipeline.root_routers += [dlq_http.router]
pipeline.body_limit(
    http.KB_PREFIX + "/",
    lambda hub: hub.state_of(pipeline.key).settings.max_file_bytes + MULTIPART_OVERHEAD,
)

pipeline.handler_with_state(
    "chunking-workers",
    [events.UPLOADED_TOPIC],
    concurrency=3,
    timeout=600,
    on_dead_letter=chunking.on_dead_letter,
)(chunking.on_uploaded)


def _batch_shape(docs: Documents) -> tuple[int, float]:
    """The seed's batch listener: up to ``embed_batch`` records, waiting ``embed_wait_s``."""
    return docs.settings.embed_batch, docs.settings.embed_wait_s


pipeline.batch_handler_with_state(
    "embedding-workers",
    [events.CHUNKS_TOPIC],
    concurrency=2,
    timeout=600,
    shape=_batch_shape,
    priority=events.priority_rank,
)(embedding.on_chunks)
# An A/B test's second model version (AIGC_HUB_DOCS_AB_EMBEDDER): its own group, its own
# vector namespace; absent unless configured.
pipeline.batch_handler_with_state(
    "embedding-workers-b",
    [events.CHUNKS_TOPIC],
    concurrency=2,
    timeout=600,
    shape=_batch_shape,
    priority=events.priority_rank,
    enabled=lambda docs: docs.ab_embedder is not None,
)(embedding.on_chunks_b)
pipeline.batch_handler_with_state(
    "vector-storage-workers",
    [events.EMBEDDINGS_TOPIC],
    concurrency=2,
    timeout=600,
    shape=_batch_shape,
)(storage.on_embeddings)
pipeline.handler_with_state(
    "ai-analysis-workers", [events.ANALYSIS_REQUESTS_TOPIC], concurrency=5, timeout=900
)(analysis.on_request)
pipeline.admission_check_with_state(lambda docs: docs.backpressure.admission())
pipeline.up_hook(up.model_check)
