"""Tables of avcc's transparency log, on the backbone's ``metadata``.

One log per database: its leaves, dense from 0, and the heads it signed, one per tree size.
Rows are only ever inserted (the log is append-only). Times are epoch milliseconds.
"""

from __future__ import annotations

import sqlalchemy as sa

from aigc_hub.store.tables import metadata

#: One notarized entry per row; ``leaf_index`` is its position in the tree, 0..n-1, no gaps.
avcc_log_leaves = sa.Table(
    "avcc_log_leaves",
    metadata,
    sa.Column("leaf_index", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column(
        "entry_key",
        sa.String(255),
        nullable=False,
        unique=True,
        comment="the caller's idempotency key, e.g. 'copyright_main:10042'",
    ),
    sa.Column("leaf_hash", sa.LargeBinary(32), nullable=False, comment="SHA-256(0x00 || data)"),
    sa.Column("data", sa.LargeBinary, nullable=False),
    sa.Column("appended_at", sa.BigInteger, nullable=False),
)

#: The signed tree heads; the head of size 0 (the empty root) is the writers' lock row.
avcc_log_heads = sa.Table(
    "avcc_log_heads",
    metadata,
    sa.Column("tree_size", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("log_id", sa.String(64), nullable=False, comment="hex SHA-256 of the public key"),
    sa.Column("root_hash", sa.LargeBinary(32), nullable=False),
    sa.Column("timestamp_ms", sa.BigInteger, nullable=False),
    sa.Column("signature", sa.LargeBinary(64), nullable=False),
)

TABLES = (avcc_log_leaves, avcc_log_heads)
