"""The avcc pipeline: applications, their history, review reports, the human review queue,
fingerprints of coded works, the transparency log and the EVM anchors.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-02 09:59:47.735105

A frozen step of the one chain: spell tables out here, never import the live definitions.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | Sequence[str] | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Create the avcc tables."""
    op.create_table(
        "avcc_evm_anchors",
        sa.Column("tree_size", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column(
            "root", sa.LargeBinary(length=32), nullable=False, comment="the log's 32-byte root"
        ),
        sa.Column("chain_id", sa.BigInteger(), nullable=False),
        sa.Column("sender", sa.String(length=42), nullable=False, comment="checksummed 0x address"),
        sa.Column("nonce", sa.BigInteger(), nullable=False),
        sa.Column("raw_tx", sa.LargeBinary(), nullable=False, comment="the signed transaction"),
        sa.Column("tx_hash", sa.String(length=66), nullable=False),
        sa.Column(
            "status", sa.String(length=20), nullable=False, comment="SENT, CONFIRMED or FAILED"
        ),
        sa.Column("block_number", sa.BigInteger(), nullable=True),
        sa.Column("failure", sa.Text(), nullable=True, comment="why it is FAILED"),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("tree_size", name=op.f("pk_avcc_evm_anchors")),
        sa.UniqueConstraint(
            "chain_id", "sender", "nonce", name=op.f("uq_avcc_evm_anchors_chain_id_sender_nonce")
        ),
        sa.UniqueConstraint("tx_hash", name=op.f("uq_avcc_evm_anchors_tx_hash")),
    )
    with op.batch_alter_table("avcc_evm_anchors", schema=None) as batch_op:
        batch_op.create_index("ix_avcc_evm_anchors_status_nonce", ["status", "nonce"], unique=False)

    op.create_table(
        "avcc_evm_senders",
        sa.Column("chain_id", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("sender", sa.String(length=42), nullable=False),
        sa.Column("next_nonce", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("chain_id", "sender", name=op.f("pk_avcc_evm_senders")),
    )
    op.create_table(
        "avcc_fingerprints",
        sa.Column("record_id", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("tenant_id", sa.String(length=36), nullable=False),
        sa.Column("kind", sa.String(length=10), nullable=False, comment="image | video | text"),
        sa.Column("value", sa.LargeBinary(), nullable=False),
        sa.Column("coded_at", sa.BigInteger(), nullable=True, comment="NULL until coded"),
        sa.PrimaryKeyConstraint("record_id", name=op.f("pk_avcc_fingerprints")),
    )
    with op.batch_alter_table("avcc_fingerprints", schema=None) as batch_op:
        batch_op.create_index("ix_avcc_fingerprints_kind", ["kind", "record_id"], unique=False)

    op.create_table(
        "avcc_human_reviews",
        sa.Column("record_id", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("tenant_id", sa.String(length=36), nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("ai_report_id", sa.BigInteger(), nullable=False),
        sa.Column("suggested_level", sa.String(length=1), nullable=True),
        sa.Column("reasons", sa.JSON(), nullable=False),
        sa.Column("claimed_by", sa.String(length=200), nullable=True),
        sa.Column("claim_token", sa.String(length=36), nullable=True),
        sa.Column("lease_until", sa.BigInteger(), nullable=True),
        sa.Column("decided_by", sa.String(length=200), nullable=True),
        sa.Column("decision", sa.String(length=20), nullable=True),
        sa.Column("decided_at", sa.BigInteger(), nullable=True),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("record_id", name=op.f("pk_avcc_human_reviews")),
    )
    with op.batch_alter_table("avcc_human_reviews", schema=None) as batch_op:
        batch_op.create_index(
            "ix_avcc_human_reviews_open", ["decided_at", "priority", "created_at"], unique=False
        )

    op.create_table(
        "avcc_log_heads",
        sa.Column("tree_size", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column(
            "log_id", sa.String(length=64), nullable=False, comment="hex SHA-256 of the public key"
        ),
        sa.Column("root_hash", sa.LargeBinary(length=32), nullable=False),
        sa.Column("timestamp_ms", sa.BigInteger(), nullable=False),
        sa.Column("signature", sa.LargeBinary(length=64), nullable=False),
        sa.PrimaryKeyConstraint("tree_size", name=op.f("pk_avcc_log_heads")),
    )
    op.create_table(
        "avcc_log_leaves",
        sa.Column("leaf_index", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column(
            "entry_key",
            sa.String(length=255),
            nullable=False,
            comment="the caller's idempotency key, e.g. 'copyright_main:10042'",
        ),
        sa.Column(
            "leaf_hash", sa.LargeBinary(length=32), nullable=False, comment="SHA-256(0x00 || data)"
        ),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.Column("appended_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("leaf_index", name=op.f("pk_avcc_log_leaves")),
        sa.UniqueConstraint("entry_key", name=op.f("uq_avcc_log_leaves_entry_key")),
    )
    op.create_table(
        "avcc_record_events",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("record_id", sa.BigInteger(), nullable=False),
        sa.Column("from_status", sa.String(length=20), nullable=True),
        sa.Column("to_status", sa.String(length=20), nullable=False),
        sa.Column("status_version", sa.BigInteger(), nullable=True),
        sa.Column("cause", sa.String(length=60), nullable=False),
        sa.Column(
            "cause_id", sa.String(length=64), nullable=True, comment="the event that caused it"
        ),
        sa.Column("at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_avcc_record_events")),
    )
    with op.batch_alter_table("avcc_record_events", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_avcc_record_events_record_id"), ["record_id"], unique=False
        )

    op.create_table(
        "avcc_records",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("request_id", sa.String(length=64), nullable=False),
        sa.Column("tenant_id", sa.String(length=36), nullable=False),
        sa.Column("idempotency_key", sa.String(length=255), nullable=False),
        sa.Column(
            "content_url", sa.String(length=1100), nullable=False, comment="as the tenant named it"
        ),
        sa.Column(
            "object_key", sa.String(length=1024), nullable=False, comment="the work in our store"
        ),
        sa.Column("content_hash", sa.String(length=80), nullable=False, comment="sha256:<hex>"),
        sa.Column("live_content_hash", sa.String(length=80), nullable=True),
        sa.Column("content_type", sa.String(length=100), nullable=False),
        sa.Column("size_bytes", sa.BigInteger(), nullable=False),
        sa.Column("model_name", sa.String(length=200), nullable=False),
        sa.Column("model_version", sa.String(length=100), nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(length=20), nullable=False),
        sa.Column("status_version", sa.BigInteger(), nullable=False),
        sa.Column("status_reason", sa.String(length=300), nullable=True),
        sa.Column("decision", sa.String(length=20), nullable=True),
        sa.Column("final_level", sa.String(length=1), nullable=True),
        sa.Column("overall_score", sa.Float(), nullable=True),
        sa.Column("review_report_id", sa.BigInteger(), nullable=True),
        sa.Column(
            "reviewed_at", sa.BigInteger(), nullable=True, comment="when the decision was made"
        ),
        sa.Column("report_hash", sa.String(length=80), nullable=True),
        sa.Column("chain_type", sa.String(length=20), nullable=True),
        sa.Column("tx_hash", sa.String(length=80), nullable=True),
        sa.Column("block_height", sa.BigInteger(), nullable=True),
        sa.Column("crd_address", sa.String(length=80), nullable=True),
        sa.Column("chain_proof", sa.JSON(), nullable=True, comment="the receipt anyone can verify"),
        sa.Column("avcc_code", sa.String(length=64), nullable=True),
        sa.Column("issued_at", sa.BigInteger(), nullable=True),
        sa.Column("c2pa_key", sa.String(length=1024), nullable=True, comment="the signed copy"),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_avcc_records")),
        sa.UniqueConstraint("avcc_code", name=op.f("uq_avcc_records_avcc_code")),
        sa.UniqueConstraint("request_id", name=op.f("uq_avcc_records_request_id")),
        sa.UniqueConstraint(
            "tenant_id", "idempotency_key", name=op.f("uq_avcc_records_tenant_id_idempotency_key")
        ),
        sa.UniqueConstraint(
            "tenant_id",
            "live_content_hash",
            name=op.f("uq_avcc_records_tenant_id_live_content_hash"),
        ),
    )
    with op.batch_alter_table("avcc_records", schema=None) as batch_op:
        batch_op.create_index("ix_avcc_records_status", ["status", "updated_at"], unique=False)
        batch_op.create_index(
            "ix_avcc_records_tenant_created", ["tenant_id", "created_at", "id"], unique=False
        )

    op.create_table(
        "avcc_review_reports",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("record_id", sa.BigInteger(), nullable=False),
        sa.Column(
            "reviewer", sa.String(length=200), nullable=False, comment="`ai` or the reviewer"
        ),
        sa.Column("decision", sa.String(length=20), nullable=False),
        sa.Column("final_level", sa.String(length=1), nullable=True),
        sa.Column("overall_score", sa.Float(), nullable=False),
        sa.Column("report_key", sa.String(length=1024), nullable=False),
        sa.Column("report_hash", sa.String(length=80), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_avcc_review_reports")),
        sa.UniqueConstraint(
            "record_id", "reviewer", name=op.f("uq_avcc_review_reports_record_id_reviewer")
        ),
    )
    with op.batch_alter_table("avcc_review_reports", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_avcc_review_reports_record_id"), ["record_id"], unique=False
        )


def downgrade() -> None:
    """Drop the avcc tables."""
    with op.batch_alter_table("avcc_review_reports", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_avcc_review_reports_record_id"))

    op.drop_table("avcc_review_reports")
    with op.batch_alter_table("avcc_records", schema=None) as batch_op:
        batch_op.drop_index("ix_avcc_records_tenant_created")
        batch_op.drop_index("ix_avcc_records_status")

    op.drop_table("avcc_records")
    with op.batch_alter_table("avcc_record_events", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_avcc_record_events_record_id"))

    op.drop_table("avcc_record_events")
    op.drop_table("avcc_log_leaves")
    op.drop_table("avcc_log_heads")
    with op.batch_alter_table("avcc_human_reviews", schema=None) as batch_op:
        batch_op.drop_index("ix_avcc_human_reviews_open")

    op.drop_table("avcc_human_reviews")
    with op.batch_alter_table("avcc_fingerprints", schema=None) as batch_op:
        batch_op.drop_index("ix_avcc_fingerprints_kind")

    op.drop_table("avcc_fingerprints")
    op.drop_table("avcc_evm_senders")
    with op.batch_alter_table("avcc_evm_anchors", schema=None) as batch_op:
        batch_op.drop_index("ix_avcc_evm_anchors_status_nonce")

    op.drop_table("avcc_evm_anchors")
