"""Tables of the generation pipeline (seed 004 §3.5.1).

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30

A frozen step of the one chain: spell tables out here, never import the live definitions.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Create tasks, attempts, provider jobs, assets, ledger, accounts, callbacks, events."""
    op.create_table(
        "assets",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("tenant_id", sa.String(length=36), nullable=False),
        sa.Column("project_id", sa.String(length=36), nullable=True),
        sa.Column("kind", sa.String(length=40), nullable=False),
        sa.Column("source_asset_id", sa.String(length=36), nullable=True),
        sa.Column("task_id", sa.String(length=36), nullable=True),
        sa.Column("object_bucket", sa.String(length=100), nullable=False),
        sa.Column("object_key", sa.String(length=500), nullable=False),
        sa.Column("content_type", sa.String(length=100), nullable=True),
        sa.Column("size_bytes", sa.BigInteger(), nullable=True),
        sa.Column("checksum_algo", sa.String(length=20), nullable=True),
        sa.Column("checksum_value", sa.String(length=128), nullable=True),
        sa.Column("status", sa.String(length=20), nullable=False),
        sa.Column("width", sa.Integer(), nullable=True),
        sa.Column("height", sa.Integer(), nullable=True),
        sa.Column("duration_ms", sa.BigInteger(), nullable=True),
        sa.Column("frame_rate_num", sa.Integer(), nullable=True),
        sa.Column("frame_rate_den", sa.Integer(), nullable=True),
        sa.Column("codec", sa.String(length=40), nullable=True),
        sa.Column("variant_profile", sa.String(length=60), nullable=True),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_assets")),
        sa.UniqueConstraint(
            "object_bucket", "object_key", name=op.f("uq_assets_object_bucket_object_key")
        ),
    )
    with op.batch_alter_table("assets", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_assets_task_id"), ["task_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_assets_tenant_id"), ["tenant_id"], unique=False)

    op.create_table(
        "callback_events",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("provider", sa.String(length=60), nullable=False),
        sa.Column("webhook_id", sa.String(length=200), nullable=False),
        sa.Column("provider_job_id", sa.String(length=200), nullable=True),
        sa.Column("body", sa.LargeBinary(), nullable=False),
        sa.Column("received_at", sa.BigInteger(), nullable=False),
        sa.Column(
            "status", sa.String(length=20), nullable=False, comment="received | applied | unmatched"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_callback_events")),
        sa.UniqueConstraint(
            "provider", "webhook_id", name=op.f("uq_callback_events_provider_webhook_id")
        ),
    )
    op.create_table(
        "credit_accounts",
        sa.Column("tenant_id", sa.String(length=36), nullable=False),
        sa.Column("available", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", name=op.f("pk_credit_accounts")),
    )
    op.create_table(
        "credit_ledger",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("tenant_id", sa.String(length=36), nullable=False),
        sa.Column("user_id", sa.String(length=36), nullable=True),
        sa.Column("task_id", sa.String(length=36), nullable=True),
        sa.Column("business_type", sa.String(length=60), nullable=False),
        sa.Column("business_id", sa.String(length=100), nullable=False),
        sa.Column("type", sa.String(length=20), nullable=False),
        sa.Column("amount", sa.BigInteger(), nullable=False, comment="the business amount, >= 0"),
        sa.Column("balance_delta", sa.BigInteger(), nullable=False, comment="effect on available"),
        sa.Column("currency_or_credit", sa.String(length=20), nullable=False),
        sa.Column("status", sa.String(length=20), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_credit_ledger")),
        sa.UniqueConstraint(
            "business_type", "business_id", name=op.f("uq_credit_ledger_business_type_business_id")
        ),
    )
    with op.batch_alter_table("credit_ledger", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_credit_ledger_task_id"), ["task_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_credit_ledger_tenant_id"), ["tenant_id"], unique=False)

    op.create_table(
        "generation_tasks",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("tenant_id", sa.String(length=36), nullable=False),
        sa.Column(
            "user_id", sa.String(length=36), nullable=True, comment="the API key that created it"
        ),
        sa.Column("project_id", sa.String(length=36), nullable=True),
        sa.Column("idempotency_key", sa.String(length=255), nullable=False),
        sa.Column("mode", sa.String(length=40), nullable=False),
        sa.Column("requested_model", sa.String(length=100), nullable=False),
        sa.Column("normalized_params", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(length=30), nullable=False),
        sa.Column("status_version", sa.BigInteger(), nullable=False),
        sa.Column("progress", sa.Float(), nullable=True),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("current_attempt_id", sa.String(length=36), nullable=True),
        sa.Column("attempt_count", sa.Integer(), nullable=False),
        sa.Column("estimated_cost", sa.BigInteger(), nullable=False),
        sa.Column("reserved_amount", sa.BigInteger(), nullable=False),
        sa.Column("actual_cost", sa.BigInteger(), nullable=True),
        sa.Column("result_asset_id", sa.String(length=36), nullable=True),
        sa.Column("failure_class", sa.String(length=40), nullable=True),
        sa.Column("failure_code", sa.String(length=100), nullable=True),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        sa.Column(
            "queued_at", sa.BigInteger(), nullable=False, comment="when it last became QUEUED"
        ),
        sa.Column("terminal_at", sa.BigInteger(), nullable=True),
        sa.Column(
            "deadline_at",
            sa.BigInteger(),
            nullable=True,
            comment="when the scanner looks at it if it is still in this status",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_generation_tasks")),
        sa.UniqueConstraint(
            "tenant_id",
            "idempotency_key",
            name=op.f("uq_generation_tasks_tenant_id_idempotency_key"),
        ),
    )
    with op.batch_alter_table("generation_tasks", schema=None) as batch_op:
        batch_op.create_index(
            "ix_generation_tasks_status_deadline", ["status", "deadline_at"], unique=False
        )
        batch_op.create_index(
            "ix_generation_tasks_tenant_created", ["tenant_id", "created_at", "id"], unique=False
        )

    op.create_table(
        "provider_jobs",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("task_id", sa.String(length=36), nullable=False),
        sa.Column("attempt_id", sa.String(length=36), nullable=False),
        sa.Column("tenant_id", sa.String(length=36), nullable=False),
        sa.Column("provider", sa.String(length=60), nullable=False),
        sa.Column("provider_job_id", sa.String(length=200), nullable=False),
        sa.Column("provider_request_key", sa.String(length=100), nullable=True),
        sa.Column("normalized_status", sa.String(length=30), nullable=False),
        sa.Column("raw_status", sa.String(length=60), nullable=True),
        sa.Column("progress", sa.Float(), nullable=True),
        sa.Column(
            "observed_at_ms", sa.BigInteger(), nullable=True, comment="provider clock, orders"
        ),
        sa.Column("last_observed_at", sa.BigInteger(), nullable=True),
        sa.Column("next_poll_at", sa.BigInteger(), nullable=True),
        sa.Column("poll_count", sa.Integer(), nullable=False),
        sa.Column("output_ref", sa.JSON(), nullable=True, comment="output metadata, never a URL"),
        sa.Column("actual_cost", sa.BigInteger(), nullable=True),
        sa.Column("raw_response_ref", sa.String(length=200), nullable=True),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_provider_jobs")),
        sa.UniqueConstraint("attempt_id", name=op.f("uq_provider_jobs_attempt_id")),
        sa.UniqueConstraint(
            "provider", "provider_job_id", name=op.f("uq_provider_jobs_provider_provider_job_id")
        ),
    )
    with op.batch_alter_table("provider_jobs", schema=None) as batch_op:
        batch_op.create_index("ix_provider_jobs_next_poll", ["next_poll_at"], unique=False)
        batch_op.create_index(batch_op.f("ix_provider_jobs_task_id"), ["task_id"], unique=False)

    op.create_table(
        "task_attempts",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("task_id", sa.String(length=36), nullable=False),
        sa.Column("attempt_no", sa.Integer(), nullable=False),
        sa.Column("provider", sa.String(length=60), nullable=False),
        sa.Column("model", sa.String(length=100), nullable=False),
        sa.Column("dispatch_token", sa.String(length=64), nullable=False),
        sa.Column("provider_request_key", sa.String(length=100), nullable=False),
        sa.Column("status", sa.String(length=30), nullable=False),
        sa.Column(
            "slots", sa.JSON(), nullable=False, comment="slot lease names this attempt holds"
        ),
        sa.Column("submit_started_at", sa.BigInteger(), nullable=True),
        sa.Column("submit_finished_at", sa.BigInteger(), nullable=True),
        sa.Column("unknown_since", sa.BigInteger(), nullable=True),
        sa.Column("error_class", sa.String(length=40), nullable=True),
        sa.Column("error_code", sa.String(length=100), nullable=True),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_task_attempts")),
        sa.UniqueConstraint("dispatch_token", name=op.f("uq_task_attempts_dispatch_token")),
        sa.UniqueConstraint(
            "provider_request_key", name=op.f("uq_task_attempts_provider_request_key")
        ),
        sa.UniqueConstraint(
            "task_id", "attempt_no", name=op.f("uq_task_attempts_task_id_attempt_no")
        ),
    )
    with op.batch_alter_table("task_attempts", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_task_attempts_task_id"), ["task_id"], unique=False)

    op.create_table(
        "task_events",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("task_id", sa.String(length=36), nullable=False),
        sa.Column("tenant_id", sa.String(length=36), nullable=False),
        sa.Column("from_status", sa.String(length=30), nullable=True),
        sa.Column("to_status", sa.String(length=30), nullable=False),
        sa.Column("status_version", sa.BigInteger(), nullable=False),
        sa.Column("cause", sa.String(length=100), nullable=False, comment="event type or command"),
        sa.Column("cause_id", sa.String(length=36), nullable=True),
        sa.Column("detail", sa.JSON(), nullable=False),
        sa.Column("at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_task_events")),
    )
    with op.batch_alter_table("task_events", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_task_events_task_id"), ["task_id"], unique=False)


def downgrade() -> None:
    """Drop the generation pipeline's tables."""
    with op.batch_alter_table("task_events", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_task_events_task_id"))

    op.drop_table("task_events")
    with op.batch_alter_table("task_attempts", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_task_attempts_task_id"))

    op.drop_table("task_attempts")
    with op.batch_alter_table("provider_jobs", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_provider_jobs_task_id"))
        batch_op.drop_index("ix_provider_jobs_next_poll")

    op.drop_table("provider_jobs")
    with op.batch_alter_table("generation_tasks", schema=None) as batch_op:
        batch_op.drop_index("ix_generation_tasks_tenant_created")
        batch_op.drop_index("ix_generation_tasks_status_deadline")

    op.drop_table("generation_tasks")
    with op.batch_alter_table("credit_ledger", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_credit_ledger_tenant_id"))
        batch_op.drop_index(batch_op.f("ix_credit_ledger_task_id"))

    op.drop_table("credit_ledger")
    op.drop_table("credit_accounts")
    op.drop_table("callback_events")
    with op.batch_alter_table("assets", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_assets_tenant_id"))
        batch_op.drop_index(batch_op.f("ix_assets_task_id"))

    op.drop_table("assets")
