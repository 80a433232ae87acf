"""Tenants and their API keys.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30

A frozen copy of ``store/tables.py`` at this revision: never import the live tables here.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Create ``tenants`` and ``api_keys``."""
    op.create_table(
        "tenants",
        sa.Column("id", sa.String(length=36), nullable=False, comment="UUIDv7"),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_tenants"),
        sa.UniqueConstraint("name", name="uq_tenants_name"),
    )
    op.create_table(
        "api_keys",
        sa.Column("id", sa.String(length=36), nullable=False, comment="UUIDv7"),
        sa.Column("tenant_id", sa.String(length=36), nullable=True),
        sa.Column("key_hash", sa.String(length=64), nullable=False),
        sa.Column(
            "prefix", sa.String(length=8), nullable=False, comment="first characters, for display"
        ),
        sa.Column("role", sa.String(length=10), nullable=False, comment="'tenant' or 'admin'"),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("revoked_at", sa.BigInteger(), nullable=True),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name="fk_api_keys_tenant_id_tenants"
        ),
        sa.PrimaryKeyConstraint("id", name="pk_api_keys"),
        sa.UniqueConstraint("key_hash", name="uq_api_keys_key_hash"),
    )
    op.create_index("ix_api_keys_tenant_id", "api_keys", ["tenant_id"], unique=False)


def downgrade() -> None:
    """Drop ``api_keys`` and ``tenants``."""
    op.drop_table("api_keys")
    op.drop_table("tenants")
