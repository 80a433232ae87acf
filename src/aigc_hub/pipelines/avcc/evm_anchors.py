"""What an EVM anchor of avcc's log is: the data its transaction carries, and its record.

Pure (no I/O, no web3), so a verifier that only has a transaction's bytes can decode them.
The data field of an anchoring transaction is versioned and fixed-size::

    b"AVCC1" | tree_size (8 bytes, unsigned big-endian) | root (32 bytes)     45 bytes
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

import sqlalchemy as sa

from aigc_hub.core.errors import InvalidInput

#: The payload's version tag; a new layout gets a new tag, old anchors keep verifying.
ANCHOR_MAGIC = b"AVCC1"
ROOT_LENGTH = 32
ANCHOR_DATA_LENGTH = len(ANCHOR_MAGIC) + 8 + ROOT_LENGTH


class AnchorStatus(enum.StrEnum):
    """Where an anchoring transaction stands, as far as the hub has read the chain."""

    SENT = "SENT"  # committed and (maybe) broadcast; the chain has not been seen to hold it
    CONFIRMED = "CONFIRMED"  # mined and successful, with the configured confirmations
    FAILED = "FAILED"  # reverted, or its nonce went to another transaction: never retried


@dataclass(frozen=True)
class AnchorTx:
    """One log root's anchoring transaction, as recorded."""

    tree_size: int
    root: bytes
    tx_hash: str
    block_number: int | None
    sender: str
    status: AnchorStatus
    nonce: int
    chain_id: int
    failure: str | None
    raw_tx: bytes = field(repr=False)  # the signed transaction, exactly as broadcast

    @classmethod
    def from_row(cls, row: sa.RowMapping) -> AnchorTx:
        """The record of an ``avcc_evm_anchors`` row."""
        return cls(
            tree_size=row["tree_size"],
            root=bytes(row["root"]),
            tx_hash=row["tx_hash"],
            block_number=row["block_number"],
            sender=row["sender"],
            status=AnchorStatus(row["status"]),
            nonce=row["nonce"],
            chain_id=row["chain_id"],
            failure=row["failure"],
            raw_tx=bytes(row["raw_tx"]),
        )


def encode_anchor(tree_size: int, root: bytes) -> bytes:
    """The data field that anchors ``root`` as the log root of ``tree_size`` entries."""
    if not 0 <= tree_size < 2**64:
        raise InvalidInput("tree_size", f"tree size {tree_size} is not an unsigned 64-bit int")
    if len(root) != ROOT_LENGTH:
        raise InvalidInput("root", f"a log root is {ROOT_LENGTH} bytes, not {len(root)}")
    return ANCHOR_MAGIC + tree_size.to_bytes(8, "big") + bytes(root)


def decode_anchor(data: bytes) -> tuple[int, bytes] | None:
    """``(tree_size, root)`` carried by a transaction's data, or None if it is no anchor."""
    if len(data) != ANCHOR_DATA_LENGTH or not data.startswith(ANCHOR_MAGIC):
        return None
    size_end = len(ANCHOR_MAGIC) + 8
    return int.from_bytes(data[len(ANCHOR_MAGIC) : size_end], "big"), bytes(data[size_end:])
