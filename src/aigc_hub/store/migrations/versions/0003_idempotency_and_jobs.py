"""Idempotency keys of creating POSTs, and admin jobs.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30

A frozen copy of ``store/tables.py`` at this revision: never import the live tables here.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Create ``idempotency_keys`` and ``admin_jobs``."""
    op.create_table(
        "idempotency_keys",
        sa.Column("tenant_id", sa.String(length=36), nullable=False),
        sa.Column("key", sa.String(length=255), nullable=False),
        sa.Column(
            "fingerprint",
            sa.String(length=64),
            nullable=False,
            comment="sha256 of method+path+body",
        ),
        sa.Column("status", sa.String(length=20), nullable=False, comment="'in_flight' or 'done'"),
        sa.Column("response_status", sa.Integer(), nullable=True),
        sa.Column("response_headers", sa.JSON(), nullable=True),
        sa.Column("response_body", sa.LargeBinary(), nullable=True),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("expires_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", "key", name="pk_idempotency_keys"),
    )
    op.create_index(
        "ix_idempotency_keys_expires_at", "idempotency_keys", ["expires_at"], unique=False
    )
    op.create_table(
        "admin_jobs",
        sa.Column("id", sa.String(length=36), nullable=False, comment="UUIDv7"),
        sa.Column("kind", sa.String(length=50), nullable=False),
        sa.Column(
            "status",
            sa.String(length=20),
            nullable=False,
            comment="'queued', 'running', 'done' or 'failed'",
        ),
        sa.Column("total", sa.Integer(), nullable=False),
        sa.Column("done", sa.Integer(), nullable=False),
        sa.Column("failed", sa.Integer(), nullable=False),
        sa.Column("params", sa.JSON(), nullable=False),
        sa.Column("actor", sa.String(length=200), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        sa.Column("finished_at", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_admin_jobs"),
    )
    op.create_index("ix_admin_jobs_created_at", "admin_jobs", ["created_at"], unique=False)


def downgrade() -> None:
    """Drop ``admin_jobs`` and ``idempotency_keys``."""
    op.drop_index("ix_admin_jobs_created_at", table_name="admin_jobs")
    op.drop_table("admin_jobs")
    op.drop_index("ix_idempotency_keys_expires_at", table_name="idempotency_keys")
    op.drop_table("idempotency_keys")
