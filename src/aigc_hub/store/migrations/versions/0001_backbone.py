"""Backbone tables: outbox, inbox, dead letters, redeliveries, leases, audit log.

Revision ID: 0001
Revises:
Create Date: 2025-01-01

A frozen copy of ``store/tables.py`` at this revision: never import the live tables here.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: Autoincrement key: BIGINT on PostgreSQL, INTEGER (the rowid alias) on SQLite.
BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    """Create the backbone tables and their indexes."""
    op.create_table(
        "audit_log",
        sa.Column("id", BigId, autoincrement=True, nullable=False),
        sa.Column("at", sa.BigInteger(), nullable=False),
        sa.Column("actor", sa.String(length=200), nullable=False),
        sa.Column("action", sa.String(length=100), nullable=False),
        sa.Column("target", sa.String(length=200), nullable=False),
        sa.Column("result", sa.String(length=40), nullable=False),
        sa.Column("detail", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_audit_log"),
    )
    op.create_index("ix_audit_log_at", "audit_log", ["at"], unique=False)
    op.create_table(
        "dead_letters",
        sa.Column("id", BigId, autoincrement=True, nullable=False),
        sa.Column("event_id", sa.String(length=36), nullable=True),
        sa.Column("event_type", sa.String(length=200), nullable=True),
        sa.Column("tenant_id", sa.String(length=64), nullable=True),
        sa.Column("topic", sa.String(length=200), nullable=False),
        sa.Column("partition", sa.Integer(), nullable=True),
        sa.Column("offset", sa.BigInteger(), nullable=True),
        sa.Column("key", sa.String(length=200), nullable=True),
        sa.Column("consumer", sa.String(length=200), nullable=False),
        sa.Column("pipeline", sa.String(length=100), nullable=False),
        sa.Column("value", sa.LargeBinary(), nullable=False),
        sa.Column("headers", sa.JSON(), nullable=False),
        sa.Column("error_class", sa.String(length=200), nullable=False),
        sa.Column("error_message", sa.Text(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("first_failure_at", sa.BigInteger(), nullable=False),
        sa.Column("last_failure_at", sa.BigInteger(), nullable=False),
        sa.Column("history", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(length=20), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("resolved_at", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_dead_letters"),
    )
    op.create_index("ix_dead_letters_consumer", "dead_letters", ["consumer"], unique=False)
    op.create_index(
        "ix_dead_letters_status_created", "dead_letters", ["status", "created_at"], unique=False
    )
    op.create_index("ix_dead_letters_topic", "dead_letters", ["topic"], unique=False)
    op.create_table(
        "inbox",
        sa.Column("consumer", sa.String(length=200), nullable=False),
        sa.Column("event_id", sa.String(length=36), nullable=False),
        sa.Column("processed_at", sa.BigInteger(), nullable=False),
        sa.Column("result_code", sa.String(length=40), nullable=True),
        sa.PrimaryKeyConstraint("consumer", "event_id", name="pk_inbox"),
    )
    op.create_table(
        "leases",
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("owner", sa.String(length=100), nullable=False),
        sa.Column("expires_at", sa.BigInteger(), nullable=False),
        sa.Column("fencing_token", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_leases"),
    )
    op.create_table(
        "outbox",
        sa.Column("id", BigId, autoincrement=True, nullable=False),
        sa.Column("event_id", sa.String(length=36), nullable=False),
        sa.Column("topic", sa.String(length=200), nullable=False),
        sa.Column(
            "key", sa.String(length=200), nullable=False, comment="'' when the record has no key"
        ),
        sa.Column("event_type", sa.String(length=200), nullable=True),
        sa.Column("schema_version", sa.Integer(), nullable=True),
        sa.Column("tenant_id", sa.String(length=64), nullable=True),
        sa.Column("value", sa.LargeBinary(), nullable=False),
        sa.Column("headers", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("published_at", sa.BigInteger(), nullable=True),
        sa.Column("attempt_count", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_outbox"),
    )
    op.create_index("ix_outbox_event_id", "outbox", ["event_id"], unique=False)
    op.create_index(
        "ix_outbox_key_unpublished",
        "outbox",
        ["key", "id"],
        unique=False,
        postgresql_where=sa.text("published_at IS NULL"),
        sqlite_where=sa.text("published_at IS NULL"),
    )
    op.create_index(
        "ix_outbox_unpublished",
        "outbox",
        ["id"],
        unique=False,
        postgresql_where=sa.text("published_at IS NULL"),
        sqlite_where=sa.text("published_at IS NULL"),
    )
    op.create_table(
        "redeliveries",
        sa.Column("seq", BigId, autoincrement=True, nullable=False),
        sa.Column("consumer", sa.String(length=200), nullable=False),
        sa.Column("key", sa.String(length=200), nullable=False),
        sa.Column("event_id", sa.String(length=36), nullable=True),
        sa.Column("topic", sa.String(length=200), nullable=False),
        sa.Column("partition", sa.Integer(), nullable=False),
        sa.Column("offset", sa.BigInteger(), nullable=False),
        sa.Column("value", sa.LargeBinary(), nullable=False),
        sa.Column("headers", sa.JSON(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("redeliveries", sa.Integer(), nullable=False),
        sa.Column("due_at", sa.BigInteger(), nullable=True),
        sa.Column("state", sa.String(length=20), nullable=False),
        sa.Column("error_class", sa.String(length=200), nullable=True),
        sa.Column("error_message", sa.Text(), nullable=True),
        sa.Column("first_failure_at", sa.BigInteger(), nullable=True),
        sa.Column("last_failure_at", sa.BigInteger(), nullable=True),
        sa.Column("history", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("seq", name="pk_redeliveries"),
    )
    op.create_index(
        "ix_redeliveries_consumer_key_seq", "redeliveries", ["consumer", "key", "seq"], unique=False
    )
    op.create_index("ix_redeliveries_due", "redeliveries", ["state", "due_at"], unique=False)


def downgrade() -> None:
    """Drop the backbone tables (their indexes go with them)."""
    op.drop_table("redeliveries")
    op.drop_table("outbox")
    op.drop_table("leases")
    op.drop_table("inbox")
    op.drop_table("dead_letters")
    op.drop_table("audit_log")
