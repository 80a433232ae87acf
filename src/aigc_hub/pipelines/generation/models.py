"""Tables of the generation pipeline (seed 004 §3.5.1), on the backbone's ``metadata``.

Times are epoch milliseconds like the backbone's; money is integer credits (exact on every
engine). Business rows hold asset ids and object keys, never a provider's temporary URL.
"""

from __future__ import annotations

import sqlalchemy as sa

from aigc_hub.store.tables import BigId, metadata

#: One generation request of a tenant; ``status`` moves only through ``states.TRANSITIONS``.
generation_tasks = sa.Table(
    "generation_tasks",
    metadata,
    sa.Column("id", sa.String(36), primary_key=True),
    sa.Column("tenant_id", sa.String(36), nullable=False),
    sa.Column("user_id", sa.String(36), nullable=True, comment="the API key that created it"),
    sa.Column("project_id", sa.String(36), nullable=True),
    sa.Column("idempotency_key", sa.String(255), nullable=False),
    sa.Column("mode", sa.String(40), nullable=False),
    sa.Column("requested_model", sa.String(100), nullable=False),
    sa.Column("normalized_params", sa.JSON, nullable=False),
    sa.Column("status", sa.String(30), nullable=False),
    sa.Column("status_version", sa.BigInteger, nullable=False, default=0),
    sa.Column("progress", sa.Float, nullable=True),
    sa.Column("priority", sa.Integer, nullable=False),
    sa.Column("current_attempt_id", sa.String(36), nullable=True),
    sa.Column("attempt_count", sa.Integer, nullable=False, default=0),
    sa.Column("estimated_cost", sa.BigInteger, nullable=False),
    sa.Column("reserved_amount", sa.BigInteger, nullable=False),
    sa.Column("actual_cost", sa.BigInteger, nullable=True),
    sa.Column("result_asset_id", sa.String(36), nullable=True),
    sa.Column("failure_class", sa.String(40), nullable=True),
    sa.Column("failure_code", sa.String(100), nullable=True),
    sa.Column("created_at", sa.BigInteger, nullable=False),
    sa.Column("updated_at", sa.BigInteger, nullable=False),
    sa.Column("queued_at", sa.BigInteger, nullable=False, comment="when it last became QUEUED"),
    sa.Column("terminal_at", sa.BigInteger, nullable=True),
    sa.Column(
        "deadline_at",
        sa.BigInteger,
        nullable=True,
        comment="when the scanner looks at it if it is still in this status",
    ),
    sa.UniqueConstraint("tenant_id", "idempotency_key"),
    sa.Index("ix_generation_tasks_tenant_created", "tenant_id", "created_at", "id"),
    sa.Index("ix_generation_tasks_status_deadline", "status", "deadline_at"),
)

#: One try at running a task on one provider; its submit has one stable request key.
task_attempts = sa.Table(
    "task_attempts",
    metadata,
    sa.Column("id", sa.String(36), primary_key=True),
    sa.Column("task_id", sa.String(36), nullable=False, index=True),
    sa.Column("attempt_no", sa.Integer, nullable=False),
    sa.Column("provider", sa.String(60), nullable=False),
    sa.Column("model", sa.String(100), nullable=False),
    sa.Column("dispatch_token", sa.String(64), nullable=False, unique=True),
    sa.Column("provider_request_key", sa.String(100), nullable=False, unique=True),
    sa.Column("status", sa.String(30), nullable=False),
    sa.Column("slots", sa.JSON, nullable=False, comment="slot lease names this attempt holds"),
    sa.Column("submit_started_at", sa.BigInteger, nullable=True),
    sa.Column("submit_finished_at", sa.BigInteger, nullable=True),
    sa.Column("unknown_since", sa.BigInteger, nullable=True),
    sa.Column("error_class", sa.String(40), nullable=True),
    sa.Column("error_code", sa.String(100), nullable=True),
    sa.Column("created_at", sa.BigInteger, nullable=False),
    sa.UniqueConstraint("task_id", "attempt_no"),
)

#: The provider's side of an attempt: its job id, what we last observed, when to poll next.
provider_jobs = sa.Table(
    "provider_jobs",
    metadata,
    sa.Column("id", sa.String(36), primary_key=True),
    sa.Column("task_id", sa.String(36), nullable=False, index=True),
    sa.Column("attempt_id", sa.String(36), nullable=False, unique=True),
    sa.Column("tenant_id", sa.String(36), nullable=False),
    sa.Column("provider", sa.String(60), nullable=False),
    sa.Column("provider_job_id", sa.String(200), nullable=False),
    sa.Column("provider_request_key", sa.String(100), nullable=True),
    sa.Column("normalized_status", sa.String(30), nullable=False),
    sa.Column("raw_status", sa.String(60), nullable=True),
    sa.Column("progress", sa.Float, nullable=True),
    sa.Column("observed_at_ms", sa.BigInteger, nullable=True, comment="provider clock, orders"),
    sa.Column("last_observed_at", sa.BigInteger, nullable=True),
    sa.Column("next_poll_at", sa.BigInteger, nullable=True),
    sa.Column("poll_count", sa.Integer, nullable=False, default=0),
    sa.Column("output_ref", sa.JSON, nullable=True, comment="output metadata, never a URL"),
    sa.Column("actual_cost", sa.BigInteger, nullable=True),
    sa.Column("raw_response_ref", sa.String(200), nullable=True),
    sa.Column("created_at", sa.BigInteger, nullable=False),
    sa.Column("updated_at", sa.BigInteger, nullable=False),
    # When the provider's output URL stops working (its answer said so), and when a fetch
    # was last sent on the urgent queue for it: the expiry scanner reads both.
    sa.Column("output_expires_at", sa.BigInteger, nullable=True),
    sa.Column("urgent_fetch_at", sa.BigInteger, nullable=True),
    sa.UniqueConstraint("provider", "provider_job_id"),
    sa.Index("ix_provider_jobs_next_poll", "next_poll_at"),
)

#: Stored media: the object key is the fact, URLs are minted per request.
assets = sa.Table(
    "assets",
    metadata,
    sa.Column("id", sa.String(36), primary_key=True),
    sa.Column("tenant_id", sa.String(36), nullable=False, index=True),
    sa.Column("project_id", sa.String(36), nullable=True),
    sa.Column("kind", sa.String(40), nullable=False),
    sa.Column("source_asset_id", sa.String(36), nullable=True),
    sa.Column("task_id", sa.String(36), nullable=True, index=True),
    sa.Column("object_bucket", sa.String(100), nullable=False),
    sa.Column("object_key", sa.String(500), nullable=False),
    sa.Column("content_type", sa.String(100), nullable=True),
    sa.Column("size_bytes", sa.BigInteger, nullable=True),
    sa.Column("checksum_algo", sa.String(20), nullable=True),
    sa.Column("checksum_value", sa.String(128), nullable=True),
    sa.Column("status", sa.String(20), nullable=False),
    sa.Column("width", sa.Integer, nullable=True),
    sa.Column("height", sa.Integer, nullable=True),
    sa.Column("duration_ms", sa.BigInteger, nullable=True),
    sa.Column("frame_rate_num", sa.Integer, nullable=True),
    sa.Column("frame_rate_den", sa.Integer, nullable=True),
    sa.Column("codec", sa.String(40), nullable=True),
    sa.Column("variant_profile", sa.String(60), nullable=True),
    sa.Column("created_at", sa.BigInteger, nullable=False),
    # The media plane (issue 12): uploads, probe facts, variants and their job key.
    sa.Column("audio_codec", sa.String(40), nullable=True, comment="None: no audio stream"),
    sa.Column("upload_id", sa.String(200), nullable=True, comment="multipart upload in flight"),
    sa.Column("status_reason", sa.String(300), nullable=True, comment="why REJECTED/FAILED"),
    sa.Column("pipeline_version", sa.String(40), nullable=True, comment="variants: media-vN"),
    sa.Column("moderation_verdict", sa.String(20), nullable=True),
    sa.Column("updated_at", sa.BigInteger, nullable=True),
    sa.UniqueConstraint("object_bucket", "object_key"),
    # Seed 004 §3.8.1: a media job is (source, profile, pipeline version); a redelivery finds it.
    sa.UniqueConstraint(
        "source_asset_id", "variant_profile", "pipeline_version", name="uq_assets_variant_job"
    ),
    sa.Index("ix_assets_source_asset_id", "source_asset_id"),
)

#: Append-only credit movements; each has one business key, so no action happens twice.
credit_ledger = sa.Table(
    "credit_ledger",
    metadata,
    sa.Column("id", BigId, primary_key=True, autoincrement=True),
    sa.Column("tenant_id", sa.String(36), nullable=False, index=True),
    sa.Column("user_id", sa.String(36), nullable=True),
    sa.Column("task_id", sa.String(36), nullable=True, index=True),
    sa.Column("business_type", sa.String(60), nullable=False),
    sa.Column("business_id", sa.String(100), nullable=False),
    sa.Column("type", sa.String(20), nullable=False),
    sa.Column("amount", sa.BigInteger, nullable=False, comment="the business amount, >= 0"),
    sa.Column("balance_delta", sa.BigInteger, nullable=False, comment="effect on available"),
    sa.Column("currency_or_credit", sa.String(20), nullable=False),
    sa.Column("status", sa.String(20), nullable=False),
    sa.Column("created_at", sa.BigInteger, nullable=False),
    sa.UniqueConstraint("business_type", "business_id"),
)

#: A tenant's available credits: the running sum of its ledger's ``balance_delta``, kept in
#: the same transaction as each ledger row so a reservation is one guarded update.
credit_accounts = sa.Table(
    "credit_accounts",
    metadata,
    sa.Column("tenant_id", sa.String(36), primary_key=True),
    sa.Column("available", sa.BigInteger, nullable=False),
    sa.Column("updated_at", sa.BigInteger, nullable=False),
)

#: Every webhook as received (verified ones only), deduplicated by the provider's webhook id.
callback_events = sa.Table(
    "callback_events",
    metadata,
    sa.Column("id", BigId, primary_key=True, autoincrement=True),
    sa.Column("provider", sa.String(60), nullable=False),
    sa.Column("webhook_id", sa.String(200), nullable=False),
    sa.Column("provider_job_id", sa.String(200), nullable=True),
    sa.Column("body", sa.LargeBinary, nullable=False),
    sa.Column("received_at", sa.BigInteger, nullable=False),
    sa.Column("status", sa.String(20), nullable=False, comment="received | applied | unmatched"),
    sa.UniqueConstraint("provider", "webhook_id"),
)

#: The history of a task: every transition with its cause (the console's timeline).
task_events = sa.Table(
    "task_events",
    metadata,
    sa.Column("id", BigId, primary_key=True, autoincrement=True),
    sa.Column("task_id", sa.String(36), nullable=False, index=True),
    sa.Column("tenant_id", sa.String(36), nullable=False),
    sa.Column("from_status", sa.String(30), nullable=True),
    sa.Column("to_status", sa.String(30), nullable=False),
    sa.Column("status_version", sa.BigInteger, nullable=False),
    sa.Column("cause", sa.String(100), nullable=False, comment="event type or command"),
    sa.Column("cause_id", sa.String(36), nullable=True),
    sa.Column("detail", sa.JSON, nullable=False),
    sa.Column("at", sa.BigInteger, nullable=False),
)

#: A tenant's editing project (seed 004 §3.5.1 ``projects``): its name and the number of its
#: newest revision, the compare-and-set target of every save.
projects = sa.Table(
    "projects",
    metadata,
    sa.Column("id", sa.String(36), primary_key=True),
    sa.Column("tenant_id", sa.String(36), nullable=False),
    sa.Column("name", sa.String(200), nullable=False),
    sa.Column("head_revision", sa.Integer, nullable=False, comment="0: nothing saved yet"),
    sa.Column("created_at", sa.BigInteger, nullable=False),
    sa.Column("updated_at", sa.BigInteger, nullable=False),
    sa.Index("ix_projects_tenant", "tenant_id", "id"),
)

#: A saved timeline (seed 004 §3.5.1 ``project_revisions``): immutable, numbered from 1 per
#: project; an export fixes one.
project_revisions = sa.Table(
    "project_revisions",
    metadata,
    sa.Column("id", sa.String(36), primary_key=True),
    sa.Column("project_id", sa.String(36), nullable=False),
    sa.Column("tenant_id", sa.String(36), nullable=False),
    sa.Column("number", sa.Integer, nullable=False),
    sa.Column("schema_version", sa.Integer, nullable=False, comment="the timeline's"),
    sa.Column("timeline", sa.JSON, nullable=False),
    sa.Column("created_at", sa.BigInteger, nullable=False),
    sa.UniqueConstraint("project_id", "number"),
)

#: An export (seed 004 §3.3.3 item 10, §3.8.1's render key): a fixed revision rendered with a
#: profile; the same click twice (same revision, profile and Idempotency-Key) is one job.
render_jobs = sa.Table(
    "render_jobs",
    metadata,
    sa.Column("id", sa.String(36), primary_key=True),
    sa.Column("tenant_id", sa.String(36), nullable=False),
    sa.Column("project_id", sa.String(36), nullable=False),
    sa.Column("project_revision_id", sa.String(36), nullable=False),
    sa.Column("revision_number", sa.Integer, nullable=False),
    sa.Column("render_profile", sa.String(40), nullable=False),
    sa.Column("idempotency_key", sa.String(255), nullable=False),
    sa.Column("status", sa.String(20), nullable=False, comment="queued|running|succeeded|…"),
    sa.Column("status_reason", sa.String(300), nullable=True),
    sa.Column("failed_node", sa.String(60), nullable=True, comment="the node that failed"),
    sa.Column("asset_id", sa.String(36), nullable=True, comment="the rendered file's asset"),
    sa.Column("nodes_total", sa.Integer, nullable=False, default=0),
    sa.Column("nodes_ran", sa.Integer, nullable=False, default=0),
    sa.Column("nodes_reused", sa.Integer, nullable=False, default=0),
    sa.Column("current_node", sa.String(60), nullable=True),
    sa.Column("cpu_ms", sa.BigInteger, nullable=False, default=0),
    sa.Column("created_at", sa.BigInteger, nullable=False),
    sa.Column("updated_at", sa.BigInteger, nullable=False),
    sa.UniqueConstraint(
        "project_revision_id", "render_profile", "idempotency_key", name="uq_render_jobs_key"
    ),
    sa.Index("ix_render_jobs_project", "tenant_id", "project_id", "id"),
)

#: Made render-graph nodes kept in the blob store by key, with their size and last use: the
#: cache's bound evicts the least recently used first.
render_cache = sa.Table(
    "render_cache",
    metadata,
    sa.Column("cache_key", sa.String(64), primary_key=True),
    sa.Column("tenant_id", sa.String(36), nullable=False),
    sa.Column("object_key", sa.String(500), nullable=False),
    sa.Column("size_bytes", sa.BigInteger, nullable=False),
    sa.Column("created_at", sa.BigInteger, nullable=False),
    sa.Column("last_used_at", sa.BigInteger, nullable=False),
    sa.Index("ix_render_cache_last_used", "last_used_at"),
)
