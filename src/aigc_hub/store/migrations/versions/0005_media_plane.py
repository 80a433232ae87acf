"""The media plane: upload and variant columns on assets, output expiry on provider jobs,
moderation decisions.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-02

A frozen step of the one chain: spell tables out here, never import the live definitions.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Add the asset columns uploads and variants need, and the moderation decisions table."""
    with op.batch_alter_table("assets", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column(
                "audio_codec", sa.String(length=40), nullable=True, comment="None: no audio stream"
            )
        )
        batch_op.add_column(
            sa.Column(
                "upload_id",
                sa.String(length=200),
                nullable=True,
                comment="multipart upload in flight",
            )
        )
        batch_op.add_column(
            sa.Column(
                "status_reason", sa.String(length=300), nullable=True, comment="why REJECTED/FAILED"
            )
        )
        batch_op.add_column(
            sa.Column(
                "pipeline_version",
                sa.String(length=40),
                nullable=True,
                comment="variants: media-vN",
            )
        )
        batch_op.add_column(sa.Column("moderation_verdict", sa.String(length=20), nullable=True))
        batch_op.add_column(sa.Column("updated_at", sa.BigInteger(), nullable=True))
        batch_op.create_unique_constraint(
            "uq_assets_variant_job", ["source_asset_id", "variant_profile", "pipeline_version"]
        )
        batch_op.create_index("ix_assets_source_asset_id", ["source_asset_id"], unique=False)

    with op.batch_alter_table("provider_jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("output_expires_at", sa.BigInteger(), nullable=True))
        batch_op.add_column(sa.Column("urgent_fetch_at", sa.BigInteger(), nullable=True))

    op.create_table(
        "moderation_decisions",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("tenant_id", sa.String(length=36), nullable=False),
        sa.Column(
            "subject_kind",
            sa.String(length=40),
            nullable=False,
            comment="prompt | asset | output",
        ),
        sa.Column("subject_id", sa.String(length=64), nullable=False),
        sa.Column("stage", sa.String(length=20), nullable=False, comment="input | output"),
        sa.Column("verdict", sa.String(length=20), nullable=False),
        sa.Column("policy_version", sa.String(length=40), nullable=False),
        sa.Column("model_version", sa.String(length=80), nullable=False),
        sa.Column("hit_rules", sa.JSON(), nullable=False),
        sa.Column("evidence_ref", sa.String(length=300), nullable=True),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_moderation_decisions")),
    )
    with op.batch_alter_table("moderation_decisions", schema=None) as batch_op:
        batch_op.create_index(
            "ix_moderation_decisions_subject", ["subject_kind", "subject_id"], unique=False
        )


def downgrade() -> None:
    """Drop what :func:`upgrade` added."""
    with op.batch_alter_table("moderation_decisions", schema=None) as batch_op:
        batch_op.drop_index("ix_moderation_decisions_subject")
    op.drop_table("moderation_decisions")
    with op.batch_alter_table("provider_jobs", schema=None) as batch_op:
        batch_op.drop_column("urgent_fetch_at")
        batch_op.drop_column("output_expires_at")
    with op.batch_alter_table("assets", schema=None) as batch_op:
        batch_op.drop_index("ix_assets_source_asset_id")
        batch_op.drop_constraint("uq_assets_variant_job", type_="unique")
        for column in (
            "updated_at",
            "moderation_verdict",
            "pipeline_version",
            "status_reason",
            "upload_id",
            "audio_codec",
        ):
            batch_op.drop_column(column)
