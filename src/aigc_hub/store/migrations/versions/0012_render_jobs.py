"""Generation's exports (render jobs) and the render graph's node cache.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-04 01:20:00.000000

A frozen step of the one chain: spell tables out here, never import the live definitions.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | Sequence[str] | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Create render_jobs and render_cache."""
    op.create_table(
        "render_jobs",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("tenant_id", sa.String(length=36), nullable=False),
        sa.Column("project_id", sa.String(length=36), nullable=False),
        sa.Column("project_revision_id", sa.String(length=36), nullable=False),
        sa.Column("revision_number", sa.Integer(), nullable=False),
        sa.Column("render_profile", sa.String(length=40), nullable=False),
        sa.Column("idempotency_key", sa.String(length=255), nullable=False),
        sa.Column(
            "status", sa.String(length=20), nullable=False, comment="queued|running|succeeded|…"
        ),
        sa.Column("status_reason", sa.String(length=300), nullable=True),
        sa.Column(
            "failed_node", sa.String(length=60), nullable=True, comment="the node that failed"
        ),
        sa.Column(
            "asset_id", sa.String(length=36), nullable=True, comment="the rendered file's asset"
        ),
        sa.Column("nodes_total", sa.Integer(), nullable=False),
        sa.Column("nodes_ran", sa.Integer(), nullable=False),
        sa.Column("nodes_reused", sa.Integer(), nullable=False),
        sa.Column("current_node", sa.String(length=60), nullable=True),
        sa.Column("cpu_ms", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_render_jobs")),
        sa.UniqueConstraint(
            "project_revision_id", "render_profile", "idempotency_key", name="uq_render_jobs_key"
        ),
    )
    with op.batch_alter_table("render_jobs", schema=None) as batch_op:
        batch_op.create_index(
            "ix_render_jobs_project", ["tenant_id", "project_id", "id"], unique=False
        )

    op.create_table(
        "render_cache",
        sa.Column("cache_key", sa.String(length=64), nullable=False),
        sa.Column("tenant_id", sa.String(length=36), nullable=False),
        sa.Column("object_key", sa.String(length=500), nullable=False),
        sa.Column("size_bytes", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("last_used_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("cache_key", name=op.f("pk_render_cache")),
    )
    with op.batch_alter_table("render_cache", schema=None) as batch_op:
        batch_op.create_index("ix_render_cache_last_used", ["last_used_at"], unique=False)


def downgrade() -> None:
    """Drop them."""
    with op.batch_alter_table("render_cache", schema=None) as batch_op:
        batch_op.drop_index("ix_render_cache_last_used")
    op.drop_table("render_cache")
    with op.batch_alter_table("render_jobs", schema=None) as batch_op:
        batch_op.drop_index("ix_render_jobs_project")
    op.drop_table("render_jobs")
