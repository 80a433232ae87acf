"""Tables of the avcc pipeline, on the backbone's ``metadata``.

``avcc_records.id`` is the seed's ``avcc_record_id`` (an integer, §9.2.1); review reports
are numbered the same way (``review_report_id``). Times are epoch milliseconds.
"""

from __future__ import annotations

import sqlalchemy as sa

from aigc_hub.store.tables import BigId, metadata

#: One application for a code: the work, its review, its notarization and its code.
avcc_records = sa.Table(
    "avcc_records",
    metadata,
    sa.Column("id", BigId, primary_key=True, autoincrement=True),
    sa.Column("request_id", sa.String(64), nullable=False, unique=True),
    sa.Column("tenant_id", sa.String(36), nullable=False),
    sa.Column("idempotency_key", sa.String(255), nullable=False),
    sa.Column("content_url", sa.String(1100), nullable=False, comment="as the tenant named it"),
    sa.Column("object_key", sa.String(1024), nullable=False, comment="the work in our store"),
    sa.Column("content_hash", sa.String(80), nullable=False, comment="sha256:<hex>"),
    # The content hash while the application is alive, NULL once rejected: one live
    # application per tenant and content, enforced by the unique index below.
    sa.Column("live_content_hash", sa.String(80), nullable=True),
    sa.Column("content_type", sa.String(100), nullable=False),
    sa.Column("size_bytes", sa.BigInteger, nullable=False),
    sa.Column("model_name", sa.String(200), nullable=False),
    sa.Column("model_version", sa.String(100), nullable=False),
    sa.Column("priority", sa.Integer, nullable=False),
    sa.Column("status", sa.String(20), nullable=False),
    sa.Column("status_version", sa.BigInteger, nullable=False, default=0),
    sa.Column("status_reason", sa.String(300), nullable=True),
    sa.Column("decision", sa.String(20), nullable=True),
    sa.Column("final_level", sa.String(1), nullable=True),
    sa.Column("overall_score", sa.Float, nullable=True),
    sa.Column("review_report_id", sa.BigInteger, nullable=True),
    sa.Column("reviewed_at", sa.BigInteger, nullable=True, comment="when the decision was made"),
    sa.Column("report_hash", sa.String(80), nullable=True),
    sa.Column("chain_type", sa.String(20), nullable=True),
    sa.Column("tx_hash", sa.String(80), nullable=True),
    sa.Column("block_height", sa.BigInteger, nullable=True),
    sa.Column("crd_address", sa.String(80), nullable=True),
    sa.Column("chain_proof", sa.JSON, nullable=True, comment="the receipt anyone can verify"),
    sa.Column("avcc_code", sa.String(64), nullable=True, unique=True),
    sa.Column("issued_at", sa.BigInteger, nullable=True),
    sa.Column("c2pa_key", sa.String(1024), nullable=True, comment="the signed copy"),
    sa.Column("created_at", sa.BigInteger, nullable=False),
    sa.Column("updated_at", sa.BigInteger, nullable=False),
    sa.UniqueConstraint("tenant_id", "idempotency_key"),
    sa.UniqueConstraint("tenant_id", "live_content_hash"),
    sa.Index("ix_avcc_records_tenant_created", "tenant_id", "created_at", "id"),
    sa.Index("ix_avcc_records_status", "status", "updated_at"),
)

#: Every move of a record, in order (the console's timeline; the order test reads it).
avcc_record_events = sa.Table(
    "avcc_record_events",
    metadata,
    sa.Column("id", BigId, primary_key=True, autoincrement=True),
    sa.Column("record_id", sa.BigInteger, nullable=False, index=True),
    sa.Column("from_status", sa.String(20), nullable=True),
    sa.Column("to_status", sa.String(20), nullable=False),
    sa.Column("status_version", sa.BigInteger, nullable=True),
    sa.Column("cause", sa.String(60), nullable=False),
    sa.Column("cause_id", sa.String(64), nullable=True, comment="the event that caused it"),
    sa.Column("at", sa.BigInteger, nullable=False),
)

#: The reports a review issued (the AI's, then a reviewer's for need_human works). The
#: report itself is a JSON object in the blob store; ``report_hash`` is the sha256 of its bytes.
avcc_review_reports = sa.Table(
    "avcc_review_reports",
    metadata,
    sa.Column("id", BigId, primary_key=True, autoincrement=True),
    sa.Column("record_id", sa.BigInteger, nullable=False, index=True),
    sa.Column("reviewer", sa.String(200), nullable=False, comment="`ai` or the reviewer"),
    sa.Column("decision", sa.String(20), nullable=False),
    sa.Column("final_level", sa.String(1), nullable=True),
    sa.Column("overall_score", sa.Float, nullable=False),
    sa.Column("report_key", sa.String(1024), nullable=False),
    sa.Column("report_hash", sa.String(80), nullable=False),
    sa.Column("created_at", sa.BigInteger, nullable=False),
    sa.UniqueConstraint("record_id", "reviewer"),
)

#: The human review queue: need_human works, claimed with a lease, decided once.
avcc_human_reviews = sa.Table(
    "avcc_human_reviews",
    metadata,
    sa.Column("record_id", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("tenant_id", sa.String(36), nullable=False),
    sa.Column("priority", sa.Integer, nullable=False),
    sa.Column("ai_report_id", sa.BigInteger, nullable=False),
    sa.Column("suggested_level", sa.String(1), nullable=True),
    sa.Column("reasons", sa.JSON, nullable=False),
    sa.Column("claimed_by", sa.String(200), nullable=True),
    sa.Column("claim_token", sa.String(36), nullable=True),
    sa.Column("lease_until", sa.BigInteger, nullable=True),
    sa.Column("decided_by", sa.String(200), nullable=True),
    sa.Column("decision", sa.String(20), nullable=True),
    sa.Column("decided_at", sa.BigInteger, nullable=True),
    sa.Column("created_at", sa.BigInteger, nullable=False),
    sa.Index("ix_avcc_human_reviews_open", "decided_at", "priority", "created_at"),
)

#: Fingerprints of reviewed works; those with ``coded_at`` are what the review compares a
#: new work against.
avcc_fingerprints = sa.Table(
    "avcc_fingerprints",
    metadata,
    sa.Column("record_id", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("tenant_id", sa.String(36), nullable=False),
    sa.Column("kind", sa.String(10), nullable=False, comment="image | video | text"),
    sa.Column("value", sa.LargeBinary, nullable=False),
    sa.Column("coded_at", sa.BigInteger, nullable=True, comment="NULL until coded"),
    sa.Index("ix_avcc_fingerprints_kind", "kind", "record_id"),
)

# The chain's tables are declared beside their code; listed here so that every avcc table is
# on the metadata once this module is imported (autogenerate, the schema check).
from .evm_tables import evm_anchors, evm_senders  # noqa: E402
from .settlement_tables import (  # noqa: E402
    avcc_platform_nodes,
    avcc_playback_anomalies,
    avcc_settlement_periods,
    settlement_ledger,
)
from .translog_tables import avcc_log_heads, avcc_log_leaves  # noqa: E402

__all__ = [
    "avcc_fingerprints",
    "avcc_human_reviews",
    "avcc_log_heads",
    "avcc_log_leaves",
    "avcc_platform_nodes",
    "avcc_playback_anomalies",
    "avcc_record_events",
    "avcc_records",
    "avcc_review_reports",
    "avcc_settlement_periods",
    "evm_anchors",
    "evm_senders",
    "settlement_ledger",
]
