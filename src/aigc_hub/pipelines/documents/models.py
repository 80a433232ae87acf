"""Tables of the documents pipeline, on the backbone's ``metadata``.

A task (the seed's ``TaskStatus``, §3.4) follows one uploaded document through its stages;
its chunks are kept here (the source the vectors can be rebuilt from); the vectors
themselves live in the vector store (``vectors/``), a database of its own. Times are epoch
milliseconds. Ids are the seed's: ``task_<hex>``, ``doc_<hex>``, ``<document id>-<index>``.
"""

from __future__ import annotations

import sqlalchemy as sa

from aigc_hub.store.tables import BigId, metadata

#: One submitted document and where its processing is.
documents_tasks = sa.Table(
    "documents_tasks",
    metadata,
    sa.Column("id", sa.String(40), primary_key=True, comment="task_<uuid7 hex>"),
    sa.Column("document_id", sa.String(40), nullable=False, unique=True),
    sa.Column("tenant_id", sa.String(36), nullable=False),
    sa.Column("kb_id", sa.String(64), nullable=False),
    sa.Column("user_id", sa.String(100), nullable=False, comment="the API key that submitted"),
    sa.Column("file_name", sa.String(255), nullable=False),
    sa.Column("mime_type", sa.String(100), nullable=False),
    sa.Column("size_bytes", sa.BigInteger, nullable=False),
    sa.Column("content_hash", sa.String(80), nullable=False, comment="sha256:<hex>"),
    sa.Column("storage_key", sa.String(1024), nullable=False),
    sa.Column("priority", sa.String(10), nullable=False),
    sa.Column("analysis_required", sa.Boolean, nullable=False),
    sa.Column("status", sa.String(20), nullable=False),
    sa.Column("status_version", sa.BigInteger, nullable=False, default=0),
    sa.Column("progress", sa.Integer, nullable=False, default=0, comment="percent"),
    sa.Column("stage", sa.String(200), nullable=False, comment="what is happening now"),
    sa.Column("error_reason", sa.String(40), nullable=True, comment="machine-readable"),
    sa.Column("error_message", sa.String(500), nullable=True),
    sa.Column("format", sa.String(16), nullable=True, comment="as parsed: pdf, docx, html…"),
    sa.Column("pages", sa.Integer, nullable=True),
    sa.Column("chars", sa.Integer, nullable=True),
    sa.Column("chunks_total", sa.Integer, nullable=True),
    sa.Column("chunks_stored", sa.Integer, nullable=False, default=0),
    sa.Column("embedding_model", sa.String(120), nullable=True, comment="vector namespace"),
    sa.Column("analysis_status", sa.String(20), nullable=True),
    sa.Column("analysis_verdict", sa.String(10), nullable=True),
    sa.Column("analysis_score", sa.Float, nullable=True),
    sa.Column("analysis_findings", sa.Integer, nullable=True),
    sa.Column("trace_id", sa.String(64), nullable=True),
    sa.Column("created_at", sa.BigInteger, nullable=False),
    sa.Column("updated_at", sa.BigInteger, nullable=False),
    sa.Column("completed_at", sa.BigInteger, nullable=True),
    sa.Index("ix_documents_tasks_tenant_kb", "tenant_id", "kb_id", "created_at"),
    sa.Index("ix_documents_tasks_status", "status", "updated_at"),
)

#: Every move of a task, one row per move.
documents_task_events = sa.Table(
    "documents_task_events",
    metadata,
    sa.Column("id", BigId, primary_key=True, autoincrement=True),
    sa.Column("task_id", sa.String(40), nullable=False, index=True),
    sa.Column("from_status", sa.String(20), nullable=True),
    sa.Column("to_status", sa.String(20), nullable=False),
    sa.Column("status_version", sa.BigInteger, nullable=True),
    sa.Column("cause", sa.String(60), nullable=False),
    sa.Column("at", sa.BigInteger, nullable=False),
)

#: A document's chunks: the text and where it sits in the parsed document.
documents_chunks = sa.Table(
    "documents_chunks",
    metadata,
    sa.Column("id", sa.String(60), primary_key=True, comment="<document id>-<index>"),
    sa.Column("document_id", sa.String(40), nullable=False),
    sa.Column("tenant_id", sa.String(36), nullable=False),
    sa.Column("kb_id", sa.String(64), nullable=False),
    sa.Column("ordinal", sa.Integer, nullable=False),
    sa.Column("start_offset", sa.Integer, nullable=False),
    sa.Column("end_offset", sa.Integer, nullable=False),
    sa.Column("tokens", sa.Integer, nullable=False),
    sa.Column("content", sa.Text, nullable=False),
    sa.Column("created_at", sa.BigInteger, nullable=False),
    sa.UniqueConstraint("document_id", "ordinal"),
)

#: The analysis report of a document under one policy version (findings as JSON).
documents_analysis_reports = sa.Table(
    "documents_analysis_reports",
    metadata,
    sa.Column("id", BigId, primary_key=True, autoincrement=True),
    sa.Column("task_id", sa.String(40), nullable=False),
    sa.Column("document_id", sa.String(40), nullable=False),
    sa.Column("tenant_id", sa.String(36), nullable=False),
    sa.Column("analyzer", sa.String(120), nullable=False),
    sa.Column("policy_version", sa.String(60), nullable=False),
    sa.Column("verdict", sa.String(10), nullable=False),
    sa.Column("score", sa.Float, nullable=False),
    sa.Column("findings", sa.JSON, nullable=False),
    sa.Column("created_at", sa.BigInteger, nullable=False),
    sa.UniqueConstraint("document_id", "policy_version"),
)
