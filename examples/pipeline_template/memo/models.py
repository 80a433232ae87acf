"""The pipeline's table, on the hub's one ``metadata`` (its migration creates it)."""

from __future__ import annotations

import sqlalchemy as sa

from aigc_hub.store.tables import metadata

notes = sa.Table(
    "memo_notes",
    metadata,
    sa.Column("id", sa.String(36), primary_key=True, comment="UUIDv7"),
    sa.Column("tenant_id", sa.String(36), nullable=False),
    sa.Column("text", sa.Text, nullable=False),
    sa.Column("created_at", sa.BigInteger, nullable=False),
    sa.Column("stamped_at", sa.BigInteger, nullable=True, comment="set by memo-stamper"),
    sa.Column("archived_at", sa.BigInteger, nullable=True, comment="set by memo-archiver"),
)
