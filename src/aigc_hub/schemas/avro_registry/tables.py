"""Tables of the Avro schema registry: schemas by id, subjects' versions, compatibility levels.

A schema row is never deleted, so an id names one schema for ever: Kafka records written
with it may outlive every version that used it, and SQLite would hand a deleted top id out
again. A version row is soft-deleted first (``deleted_at`` set), then may be removed for good.
"""

from __future__ import annotations

import sqlalchemy as sa

from aigc_hub.store.tables import BigId, metadata

#: Every distinct schema ever registered, under the id records carry (the Confluent wire id).
schema_registry_schemas = sa.Table(
    "schema_registry_schemas",
    metadata,
    sa.Column("id", BigId, primary_key=True, autoincrement=True),
    sa.Column("schema_type", sa.String(20), nullable=False, comment="AVRO"),
    sa.Column(
        "fingerprint",
        sa.String(64),
        nullable=False,
        unique=True,
        comment="sha256 of the type and the canonical form: one row per schema",
    ),
    sa.Column("schema", sa.Text, nullable=False, comment="the text served, compact JSON"),
    sa.Column("created_at", sa.BigInteger, nullable=False),
)

#: The versions of each subject; (subject, version) is never reused while its row exists.
schema_registry_versions = sa.Table(
    "schema_registry_versions",
    metadata,
    sa.Column("subject", sa.String(255), primary_key=True),
    sa.Column("version", sa.Integer, primary_key=True),
    sa.Column(
        "schema_id",
        sa.BigInteger,
        sa.ForeignKey("schema_registry_schemas.id"),
        nullable=False,
        index=True,
    ),
    sa.Column("created_at", sa.BigInteger, nullable=False),
    sa.Column("deleted_at", sa.BigInteger, nullable=True, comment="soft-deleted when set"),
)

#: Compatibility levels: one row per subject that has its own, and '' for the global one.
schema_registry_config = sa.Table(
    "schema_registry_config",
    metadata,
    sa.Column("subject", sa.String(255), primary_key=True, comment="'' is the global level"),
    sa.Column("compatibility", sa.String(30), nullable=False),
    sa.Column("updated_at", sa.BigInteger, nullable=False),
)
