"""The documents pipeline's topics (seed 003 §2.2) and event payloads (§3.3).

Every event is keyed by ``documentId`` (§8.2): one document's events share a partition, so
its stages reach each consumer group in order. Field names are the seed's (camelCase, as its
Java records and its Avro schema spell them), so the JSON and the Avro forms of an event
carry the same names. The seed's ``eventId`` is the envelope's ``event_id`` and is not
repeated in a payload. Its ``analysis-dlq`` is the backbone's one dead-letter store and
``topic.system.dlq`` (the seed's DLQ API reads it: ``dlq_http.py``).
"""

from __future__ import annotations

from typing import Literal

import pydantic

from aigc_hub.core.envelope import Envelope
from aigc_hub.messaging.catalog import DAY_MS, TopicSpec
from aigc_hub.pipeline import PipelineBase

UPLOADED_TOPIC = "documents-uploaded"
CHUNKS_TOPIC = "chunks-created"
EMBEDDINGS_TOPIC = "embeddings-generated"
ANALYSIS_REQUESTS_TOPIC = "ai-analysis-requests"
ANALYSIS_COMPLETED_TOPIC = "ai-analysis-completed"

DOCUMENT_UPLOADED = "documents.uploaded"
CHUNK_CREATED = "documents.chunk.created"
EMBEDDING_GENERATED = "documents.embedding.generated"
ANALYSIS_REQUESTED = "documents.analysis.requested"
ANALYSIS_COMPLETED = "documents.analysis.completed"

#: The seed's services, as the envelopes' ``source``.
API_SVC, CHUNKING_SVC, EMBEDDING_SVC = "document-api", "chunking-workers", "embedding-workers"
STORAGE_SVC, ANALYSIS_SVC = "vector-storage-workers", "ai-analysis-workers"

TOPICS = (
    TopicSpec(UPLOADED_TOPIC, 12, 7 * DAY_MS, pipeline="documents", note="seed 003 §2.2"),
    TopicSpec(CHUNKS_TOPIC, 24, 3 * DAY_MS, pipeline="documents", note="seed 003 §2.2"),
    TopicSpec(EMBEDDINGS_TOPIC, 24, 3 * DAY_MS, pipeline="documents", note="seed 003 §2.2"),
    TopicSpec(ANALYSIS_REQUESTS_TOPIC, 12, 7 * DAY_MS, pipeline="documents", note="seed 003 §2.2"),
    TopicSpec(
        ANALYSIS_COMPLETED_TOPIC, 12, 30 * DAY_MS, pipeline="documents", note="seed 003 §2.2"
    ),
)

Priority = Literal["normal", "high", "critical"]
#: How urgent each priority is (higher first); an unknown one counts as normal.
PRIORITY_RANK: dict[str, int] = {"normal": 0, "high": 1, "critical": 2}


def priority_rank(env: Envelope) -> int:
    """The rank of the priority ``env``'s payload carries (the embedding batches' order)."""
    return PRIORITY_RANK.get(str(env.payload.get("priority", "normal")), 0)


class DocumentUploaded(pydantic.BaseModel):
    """§3.3 ``DocumentUploadedEvent`` (v2.1 of its Avro schema, §9.2): a document was stored
    and its task queued; chunk it."""

    taskId: str
    documentId: str
    knowledgeBaseId: str
    storageKey: str
    fileName: str
    fileSizeBytes: int
    mimeType: str
    userId: str
    priority: Priority = "normal"
    eventTimestamp: int
    retryCount: int = 0
    traceId: str | None = None
    #: v2.1: whether the document also gets an AI analysis (default true).
    aiAnalysisRequired: bool = True


class ChunkCreated(pydantic.BaseModel):
    """§3.3 ``ChunkCreatedEvent``: one chunk of a document, ready for embedding. Ours beside
    the seed's fields: the task, the chunk's offsets in the parsed text and its token count,
    and the priority (an embedding batch takes the most urgent chunks waiting first)."""

    parentDocumentId: str
    chunkId: str
    content: str
    chunkIndex: int
    totalChunks: int
    knowledgeBaseId: str
    eventTimestamp: int
    traceId: str | None = None
    taskId: str
    startOffset: int
    endOffset: int
    tokens: int
    priority: Priority = "normal"
    #: Set when a reprocessing run re-sends a stored chunk (its run id): the chunk's task
    #: is done already and stays so; its vector is replaced.
    reprocessRun: str | None = None
    #: The model version the run re-embeds with; None: every one this hub embeds with.
    targetModel: str | None = None


class EmbeddingGenerated(pydantic.BaseModel):
    """§3.3 ``EmbeddingGeneratedEvent``: a chunk's vector; store it. ``embeddingModel`` is the
    model *version* (a vector namespace: two versions side by side are an A/B test, §1.1).
    Ours: the task, the chunk's place and text, so storage needs no other read."""

    chunkId: str
    documentId: str
    embedding: list[float]
    embeddingModel: str
    dimensions: int
    knowledgeBaseId: str
    eventTimestamp: int
    traceId: str | None = None
    taskId: str
    chunkIndex: int
    totalChunks: int
    startOffset: int
    endOffset: int
    content: str
    #: The reprocessing run that re-embedded the chunk, if one did.
    reprocessRun: str | None = None


class AnalysisRequested(pydantic.BaseModel):
    """An AI analysis (compliance review) of a stored document (§7 ``DocumentAnalysisEvent``;
    the seed does not list its fields)."""

    taskId: str
    documentId: str
    knowledgeBaseId: str
    embeddingModel: str
    eventTimestamp: int
    traceId: str | None = None


class AnalysisCompleted(pydantic.BaseModel):
    """The analysis of a document ended: its verdict, score and findings count, and who
    analysed it (analyzer, model and policy versions)."""

    taskId: str
    documentId: str
    knowledgeBaseId: str
    verdict: Literal["pass", "review", "fail"]
    score: float
    findings: int
    analyzer: str
    policyVersion: str
    eventTimestamp: int
    traceId: str | None = None


def register(pipeline: PipelineBase) -> None:
    """Declare the topics and events on ``pipeline``."""
    for spec in TOPICS:
        pipeline.topic(spec)
    pipeline.event(DOCUMENT_UPLOADED, 1, topic=UPLOADED_TOPIC)(DocumentUploaded)
    pipeline.event(CHUNK_CREATED, 1, topic=CHUNKS_TOPIC)(ChunkCreated)
    pipeline.event(EMBEDDING_GENERATED, 1, topic=EMBEDDINGS_TOPIC)(EmbeddingGenerated)
    pipeline.event(ANALYSIS_REQUESTED, 1, topic=ANALYSIS_REQUESTS_TOPIC)(AnalysisRequested)
    pipeline.event(ANALYSIS_COMPLETED, 1, topic=ANALYSIS_COMPLETED_TOPIC)(AnalysisCompleted)
