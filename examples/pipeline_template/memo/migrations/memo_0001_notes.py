"""The memo pipeline's notes table: the first revision of its branch ``memo``.

Revision ID: memo_0001
Revises: 0002 (the backbone's tenants: the branch needs nothing newer)
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "memo_0001"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = ("memo",)
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Create ``memo_notes`` (a frozen copy of ``models.py`` at this revision)."""
    op.create_table(
        "memo_notes",
        sa.Column("id", sa.String(length=36), nullable=False, comment="UUIDv7"),
        sa.Column("tenant_id", sa.String(length=36), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("stamped_at", sa.BigInteger(), nullable=True, comment="set by memo-stamper"),
        sa.Column("archived_at", sa.BigInteger(), nullable=True, comment="set by memo-archiver"),
        sa.PrimaryKeyConstraint("id", name="pk_memo_notes"),
    )


def downgrade() -> None:
    """Drop ``memo_notes``."""
    op.drop_table("memo_notes")
