"""Tables of settlement (settlement-svc) and of the platform nodes that report playback.

The settlement ledger is the backbone's append-only ledger (:mod:`aigc_hub.reliability.ledger`)
in amounts of fen (0.01 CNY, integers: no float ever holds money). One purchase books one line
per party (the work's tenant, the reporting platform node, the hub), each with its own
business key ``<purchase event id>:<party>``, so a purchase delivered twice is booked once.
A line belongs to the period it was booked into; a period's lines are sealed into one
settlement batch, notarized on the chain as ``chain_type=settlement``.
"""

from __future__ import annotations

import sqlalchemy as sa

from aigc_hub.reliability.ledger import define_ledger_tables
from aigc_hub.store.tables import BigId, metadata

#: Platform nodes (the sites that play coded works) and their keys: each node reports
#: playback with its own key, stored as its SHA-256 (the key is 32 random bytes).
avcc_platform_nodes = sa.Table(
    "avcc_platform_nodes",
    metadata,
    sa.Column("code", sa.String(8), primary_key=True, comment="the node's code, e.g. 8361"),
    sa.Column("name", sa.String(200), nullable=False),
    sa.Column("key_hash", sa.String(64), nullable=False, unique=True),
    sa.Column("created_at", sa.BigInteger, nullable=False),
    sa.Column("revoked_at", sa.BigInteger, nullable=True),
)

#: The ledger: accounts are ``tenant:<id>``, ``node:<code>`` and ``platform``.
settlement_ledger = define_ledger_tables(
    "avcc_settlement",
    metadata,
    sa.Column("period", sa.String(20), nullable=False, comment="the period it was booked into"),
    sa.Column("purchase_id", sa.String(64), nullable=False, comment="the node's event_id"),
    sa.Column("avcc_code", sa.String(64), nullable=False),
    sa.Column("record_id", sa.BigInteger, nullable=False),
    sa.Column("platform_node", sa.String(8), nullable=False),
    sa.Column("occurred_at", sa.BigInteger, nullable=False, comment="the purchase's timestamp"),
    account_column="account",
    # ``tenant:`` and a 36-character tenant id
    account_length=64,
)
# A period's lines are read in id order when it is sealed.
sa.Index(
    "ix_avcc_settlement_ledger_period",
    settlement_ledger.entries.c.period,
    settlement_ledger.entries.c.id,
)

#: One row per settlement period; closing it seals its lines into the batch notarized.
avcc_settlement_periods = sa.Table(
    "avcc_settlement_periods",
    metadata,
    sa.Column("period", sa.String(20), primary_key=True, comment="UTC start, e.g. 20261201T0000"),
    sa.Column("starts_at", sa.BigInteger, nullable=False),
    sa.Column("ends_at", sa.BigInteger, nullable=False),
    sa.Column("status", sa.String(20), nullable=False, comment="OPEN, ANCHORING or ANCHORED"),
    sa.Column("batch_id", sa.BigInteger, nullable=True, unique=True, comment="its chain subject"),
    sa.Column("line_count", sa.BigInteger, nullable=True),
    sa.Column("total_fen", sa.BigInteger, nullable=True),
    sa.Column("lines_root", sa.String(80), nullable=True, comment="Merkle root of its lines"),
    sa.Column("statement", sa.Text, nullable=True, comment="the canonical text notarized"),
    sa.Column("tx_hash", sa.String(80), nullable=True),
    sa.Column("block_height", sa.BigInteger, nullable=True),
    sa.Column("crd_address", sa.String(80), nullable=True),
    sa.Column("chain_proof", sa.JSON, nullable=True),
    sa.Column("closed_at", sa.BigInteger, nullable=True),
    sa.Column("anchored_at", sa.BigInteger, nullable=True),
    sa.Column("updated_at", sa.BigInteger, nullable=False),
    sa.Index("ix_avcc_settlement_periods_status", "status", "ends_at"),
)

#: Anomalies the playback detector (the seed's flink-job) found; one per kind, subject and
#: window, so a redelivered window records nothing twice.
avcc_playback_anomalies = sa.Table(
    "avcc_playback_anomalies",
    metadata,
    sa.Column("id", BigId, primary_key=True, autoincrement=True),
    sa.Column("kind", sa.String(30), nullable=False, comment="spike | ratio | flood | revenue"),
    sa.Column("subject", sa.String(200), nullable=False, comment="a code, node or user hash"),
    sa.Column("window_start", sa.BigInteger, nullable=False),
    sa.Column("window_end", sa.BigInteger, nullable=False),
    sa.Column("observed", sa.Float, nullable=False),
    sa.Column("expected", sa.Float, nullable=False),
    sa.Column("score", sa.Float, nullable=False),
    sa.Column("detail", sa.JSON, nullable=False),
    sa.Column("detected_at", sa.BigInteger, nullable=False),
    sa.UniqueConstraint("kind", "subject", "window_start"),
    sa.Index("ix_avcc_playback_anomalies_detected", "detected_at"),
)
