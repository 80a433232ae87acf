"""Generation's editing projects and their immutable timeline revisions.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-03 17:30:00.000000

A frozen step of the one chain: spell tables out here, never import the live definitions.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | Sequence[str] | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Create projects and project_revisions."""
    op.create_table(
        "projects",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("tenant_id", sa.String(length=36), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("head_revision", sa.Integer(), nullable=False, comment="0: nothing saved yet"),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_projects")),
    )
    with op.batch_alter_table("projects", schema=None) as batch_op:
        batch_op.create_index("ix_projects_tenant", ["tenant_id", "id"], unique=False)

    op.create_table(
        "project_revisions",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("project_id", sa.String(length=36), nullable=False),
        sa.Column("tenant_id", sa.String(length=36), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("schema_version", sa.Integer(), nullable=False, comment="the timeline's"),
        sa.Column("timeline", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_project_revisions")),
        sa.UniqueConstraint(
            "project_id", "number", name=op.f("uq_project_revisions_project_id_number")
        ),
    )


def downgrade() -> None:
    """Drop them."""
    op.drop_table("project_revisions")
    with op.batch_alter_table("projects", schema=None) as batch_op:
        batch_op.drop_index("ix_projects_tenant")

    op.drop_table("projects")
