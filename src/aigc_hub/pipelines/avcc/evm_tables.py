"""Tables of avcc's EVM anchoring, on the backbone's ``metadata``.

An anchor row is written, with its signed transaction, BEFORE the transaction is broadcast:
after a crash the row is how a reconciler knows what may be on chain and which exact bytes to
ask about (see :mod:`aigc_hub.pipelines.avcc.adapters.evm`). Times are epoch milliseconds
like the backbone's.
"""

from __future__ import annotations

import sqlalchemy as sa

from aigc_hub.store.tables import metadata

#: One anchoring transaction per log tree size: the log root it carries and its fate.
evm_anchors = sa.Table(
    "avcc_evm_anchors",
    metadata,
    sa.Column("tree_size", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("root", sa.LargeBinary(32), nullable=False, comment="the log's 32-byte root"),
    sa.Column("chain_id", sa.BigInteger, nullable=False),
    sa.Column("sender", sa.String(42), nullable=False, comment="checksummed 0x address"),
    sa.Column("nonce", sa.BigInteger, nullable=False),
    sa.Column("raw_tx", sa.LargeBinary, nullable=False, comment="the signed transaction"),
    sa.Column("tx_hash", sa.String(66), nullable=False, unique=True),
    sa.Column("status", sa.String(20), nullable=False, comment="SENT, CONFIRMED or FAILED"),
    sa.Column("block_number", sa.BigInteger, nullable=True),
    sa.Column("failure", sa.Text, nullable=True, comment="why it is FAILED"),
    sa.Column("created_at", sa.BigInteger, nullable=False),
    sa.Column("updated_at", sa.BigInteger, nullable=False),
    # A nonce is spent once per account and chain: two rows can never race for it.
    sa.UniqueConstraint("chain_id", "sender", "nonce"),
    sa.Index("ix_avcc_evm_anchors_status_nonce", "status", "nonce"),
)

#: One row per sending account: the lock its nonce allocation takes, and the next nonce.
evm_senders = sa.Table(
    "avcc_evm_senders",
    metadata,
    sa.Column("chain_id", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("sender", sa.String(42), primary_key=True),
    sa.Column("next_nonce", sa.BigInteger, nullable=False),
)
