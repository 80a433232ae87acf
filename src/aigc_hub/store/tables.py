"""Tables the backbone owns: outbox, inbox, dead letters, redeliveries, leases, audit.

Pipelines declare their own tables on the same ``metadata`` so one Alembic chain covers
everything. Autoincrement keys use ``BigInteger`` on PostgreSQL and ``INTEGER`` on SQLite
(SQLite only autoincrements an ``INTEGER PRIMARY KEY``).
"""

from __future__ import annotations

import sqlalchemy as sa

NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

metadata = sa.MetaData(naming_convention=NAMING)

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")

#: Events to publish, written in the producer's transaction; the relay publishes and marks.
outbox = sa.Table(
    "outbox",
    metadata,
    sa.Column("id", BigId, primary_key=True, autoincrement=True),
    sa.Column("event_id", sa.String(36), nullable=False, index=True),
    sa.Column("topic", sa.String(200), nullable=False),
    sa.Column("key", sa.String(200), nullable=False, comment="'' when the record has no key"),
    sa.Column("event_type", sa.String(200), nullable=True),
    sa.Column("schema_version", sa.Integer, nullable=True),
    sa.Column("tenant_id", sa.String(64), nullable=True),
    sa.Column("value", sa.LargeBinary, nullable=False),
    sa.Column("headers", sa.JSON, nullable=False, default=dict),
    sa.Column("created_at", sa.BigInteger, nullable=False),
    sa.Column("published_at", sa.BigInteger, nullable=True),
    sa.Column("attempt_count", sa.Integer, nullable=False, default=0),
    sa.Index(
        "ix_outbox_unpublished",
        "id",
        postgresql_where=sa.text("published_at IS NULL"),
        sqlite_where=sa.text("published_at IS NULL"),
    ),
    sa.Index(
        "ix_outbox_key_unpublished",
        "key",
        "id",
        postgresql_where=sa.text("published_at IS NULL"),
        sqlite_where=sa.text("published_at IS NULL"),
    ),
)

#: One row per (consumer, event) whose effect is committed: the exactly-once guard.
inbox = sa.Table(
    "inbox",
    metadata,
    sa.Column("consumer", sa.String(200), primary_key=True),
    sa.Column("event_id", sa.String(36), primary_key=True),
    sa.Column("processed_at", sa.BigInteger, nullable=False),
    sa.Column("result_code", sa.String(40), nullable=True),
)

#: Messages no consumer could handle, with the reason; listed, replayed or dismissed by people.
dead_letters = sa.Table(
    "dead_letters",
    metadata,
    sa.Column("id", BigId, primary_key=True, autoincrement=True),
    sa.Column("event_id", sa.String(36), nullable=True),
    sa.Column("event_type", sa.String(200), nullable=True),
    sa.Column("tenant_id", sa.String(64), nullable=True),
    sa.Column("topic", sa.String(200), nullable=False),
    sa.Column("partition", sa.Integer, nullable=True),
    sa.Column("offset", sa.BigInteger, nullable=True),
    sa.Column("key", sa.String(200), nullable=True),
    sa.Column("consumer", sa.String(200), nullable=False),
    sa.Column("pipeline", sa.String(100), nullable=False),
    sa.Column("value", sa.LargeBinary, nullable=False),
    sa.Column("headers", sa.JSON, nullable=False),
    sa.Column("error_class", sa.String(200), nullable=False),
    sa.Column("error_message", sa.Text, nullable=False),
    sa.Column("attempts", sa.Integer, nullable=False),
    sa.Column("first_failure_at", sa.BigInteger, nullable=False),
    sa.Column("last_failure_at", sa.BigInteger, nullable=False),
    sa.Column("history", sa.JSON, nullable=False),
    sa.Column("status", sa.String(20), nullable=False),
    sa.Column("created_at", sa.BigInteger, nullable=False),
    sa.Column("resolved_at", sa.BigInteger, nullable=True),
    sa.Index("ix_dead_letters_status_created", "status", "created_at"),
    sa.Index("ix_dead_letters_topic", "topic"),
    sa.Index("ix_dead_letters_consumer", "consumer"),
)

#: Failing keys parked for delayed redelivery; rows of one (consumer, key) wait in seq order.
redeliveries = sa.Table(
    "redeliveries",
    metadata,
    sa.Column("seq", BigId, primary_key=True, autoincrement=True),
    sa.Column("consumer", sa.String(200), nullable=False),
    sa.Column("key", sa.String(200), nullable=False),
    sa.Column("event_id", sa.String(36), nullable=True),
    sa.Column("topic", sa.String(200), nullable=False),
    sa.Column("partition", sa.Integer, nullable=False),
    sa.Column("offset", sa.BigInteger, nullable=False),
    sa.Column("value", sa.LargeBinary, nullable=False),
    sa.Column("headers", sa.JSON, nullable=False),
    sa.Column("attempts", sa.Integer, nullable=False),
    sa.Column("redeliveries", sa.Integer, nullable=False, default=0),
    sa.Column("due_at", sa.BigInteger, nullable=True),
    sa.Column("state", sa.String(20), nullable=False),
    sa.Column("error_class", sa.String(200), nullable=True),
    sa.Column("error_message", sa.Text, nullable=True),
    sa.Column("first_failure_at", sa.BigInteger, nullable=True),
    sa.Column("last_failure_at", sa.BigInteger, nullable=True),
    sa.Column("history", sa.JSON, nullable=False),
    sa.Index("ix_redeliveries_consumer_key_seq", "consumer", "key", "seq"),
    sa.Index("ix_redeliveries_due", "state", "due_at"),
)

#: Named leases with an owner token and a fencing token that only grows.
leases = sa.Table(
    "leases",
    metadata,
    sa.Column("name", sa.String(200), primary_key=True),
    sa.Column("owner", sa.String(100), nullable=False),
    sa.Column("expires_at", sa.BigInteger, nullable=False),
    sa.Column("fencing_token", sa.BigInteger, nullable=False),
)

#: Who did what to what, when, with which result: every operator action lands here.
audit_log = sa.Table(
    "audit_log",
    metadata,
    sa.Column("id", BigId, primary_key=True, autoincrement=True),
    sa.Column("at", sa.BigInteger, nullable=False),
    sa.Column("actor", sa.String(200), nullable=False),
    sa.Column("action", sa.String(100), nullable=False),
    sa.Column("target", sa.String(200), nullable=False),
    sa.Column("result", sa.String(40), nullable=False),
    sa.Column("detail", sa.JSON, nullable=False),
    sa.Index("ix_audit_log_at", "at"),
)

#: Moderation decisions (seed 004 §3.3.3-13): every review of a prompt, an asset or a
#: generated output, with the policy and model that decided it, the rules hit and where the
#: evidence is kept. Appended, never updated; the subject's row holds the latest verdict.
moderation_decisions = sa.Table(
    "moderation_decisions",
    metadata,
    sa.Column("id", BigId, primary_key=True, autoincrement=True),
    sa.Column("tenant_id", sa.String(36), nullable=False),
    sa.Column("subject_kind", sa.String(40), nullable=False, comment="prompt | asset | output"),
    sa.Column("subject_id", sa.String(64), nullable=False),
    sa.Column("stage", sa.String(20), nullable=False, comment="input | output"),
    sa.Column("verdict", sa.String(20), nullable=False),
    sa.Column("policy_version", sa.String(40), nullable=False),
    sa.Column("model_version", sa.String(80), nullable=False),
    sa.Column("hit_rules", sa.JSON, nullable=False),
    sa.Column("evidence_ref", sa.String(300), nullable=True),
    sa.Column("created_at", sa.BigInteger, nullable=False),
    sa.Index("ix_moderation_decisions_subject", "subject_kind", "subject_id"),
)

#: Who may call the HTTP API on whose behalf; every business row carries a ``tenant_id``.
tenants = sa.Table(
    "tenants",
    metadata,
    sa.Column("id", sa.String(36), primary_key=True, comment="UUIDv7"),
    sa.Column("name", sa.String(200), nullable=False, unique=True),
    sa.Column("created_at", sa.BigInteger, nullable=False),
)

#: API keys, stored as the SHA-256 of the secret; a NULL ``tenant_id`` is an admin key.
api_keys = sa.Table(
    "api_keys",
    metadata,
    sa.Column("id", sa.String(36), primary_key=True, comment="UUIDv7"),
    sa.Column("tenant_id", sa.String(36), sa.ForeignKey("tenants.id"), nullable=True, index=True),
    sa.Column("key_hash", sa.String(64), nullable=False, unique=True),
    sa.Column("prefix", sa.String(8), nullable=False, comment="first characters, for display"),
    sa.Column("role", sa.String(10), nullable=False, comment="'tenant' or 'admin'"),
    sa.Column("created_at", sa.BigInteger, nullable=False),
    sa.Column("revoked_at", sa.BigInteger, nullable=True),
)

#: Idempotency-Key records of creating POSTs, per tenant: the claim, then the stored answer.
idempotency_keys = sa.Table(
    "idempotency_keys",
    metadata,
    sa.Column("tenant_id", sa.String(36), primary_key=True),
    sa.Column("key", sa.String(255), primary_key=True),
    sa.Column("fingerprint", sa.String(64), nullable=False, comment="sha256 of method+path+body"),
    sa.Column("status", sa.String(20), nullable=False, comment="'in_flight' or 'done'"),
    sa.Column("response_status", sa.Integer, nullable=True),
    sa.Column("response_headers", sa.JSON, nullable=True),
    sa.Column("response_body", sa.LargeBinary, nullable=True),
    sa.Column("created_at", sa.BigInteger, nullable=False),
    sa.Column("expires_at", sa.BigInteger, nullable=False, index=True),
)

#: Long-running operator jobs of the admin API (bulk replays, purges), with their progress.
admin_jobs = sa.Table(
    "admin_jobs",
    metadata,
    sa.Column("id", sa.String(36), primary_key=True, comment="UUIDv7"),
    sa.Column("kind", sa.String(50), nullable=False),
    sa.Column(
        "status", sa.String(20), nullable=False, comment="'queued', 'running', 'done' or 'failed'"
    ),
    sa.Column("total", sa.Integer, nullable=False),
    sa.Column("done", sa.Integer, nullable=False),
    sa.Column("failed", sa.Integer, nullable=False),
    sa.Column("params", sa.JSON, nullable=False),
    sa.Column("actor", sa.String(200), nullable=False),
    sa.Column("error", sa.Text, nullable=True),
    sa.Column("created_at", sa.BigInteger, nullable=False, index=True),
    sa.Column("updated_at", sa.BigInteger, nullable=False),
    sa.Column("finished_at", sa.BigInteger, nullable=True),
)
