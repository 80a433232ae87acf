"""The receipt of a notarized work: what anyone holding it and the log's public key can check
offline, with no call to the hub.

The JSON form (:meth:`Receipt.to_json`), version 1, keys in this order, bytes as lowercase
hex::

    {"version": 1,
     "leaf_index": 5,
     "leaf_hash": "<32 bytes>",                  SHA-256(0x00 || data)
     "inclusion_path": ["<32 bytes>", ...],      RFC 9162 audit path, leaf level first
     "tree_head": {"log_id": "<32 bytes>", "tree_size": 8, "root_hash": "<32 bytes>",
                   "timestamp_ms": 1767225600000, "signature": "<64 bytes>"}}

The receipt holds the leaf's hash, not its data: the holder of the work's record gives the
data to :func:`verify_receipt` to bind the receipt to it.

:func:`verify_receipt` raises one error class, ``merkle.VerificationError``, an
``InvalidInput``: a receipt that does not verify is bad input from whoever presents it (HTTP
422, a CLI usage error), never a reason to retry; and as a ``PermanentError`` it goes straight
to the dead-letter queue if a handler meets one. Its ``field`` and message say which check
failed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

import pydantic

from aigc_hub.pipelines.avcc import merkle, tree_heads
from aigc_hub.pipelines.avcc.merkle import HASH_SIZE, VerificationError
from aigc_hub.pipelines.avcc.tree_heads import SignedTreeHead

RECEIPT_VERSION: Literal[1] = 1

Hash = Annotated[bytes, pydantic.Field(min_length=HASH_SIZE, max_length=HASH_SIZE)]


class Receipt(pydantic.BaseModel):
    """Leaf ``leaf_index`` with hash ``leaf_hash`` is in the tree that ``tree_head`` signs."""

    model_config = pydantic.ConfigDict(
        frozen=True, extra="forbid", strict=True, ser_json_bytes="hex", val_json_bytes="hex"
    )

    version: Literal[1] = RECEIPT_VERSION
    leaf_index: int = pydantic.Field(ge=0)
    leaf_hash: Hash
    inclusion_path: tuple[Hash, ...]
    tree_head: SignedTreeHead

    def to_json(self) -> str:
        """The receipt in its stable JSON form (see the module docstring)."""
        return self.model_dump_json()

    @classmethod
    def from_json(cls, text: str | bytes) -> Receipt:
        """A receipt from its JSON form; :class:`VerificationError` (``field="receipt"``) when
        the text is not a well-formed version 1 receipt."""
        try:
            return cls.model_validate_json(text)
        except pydantic.ValidationError as error:
            problems = "; ".join(
                f"{'.'.join(str(part) for part in problem['loc']) or 'receipt'}: {problem['msg']}"
                for problem in error.errors()
            )
            raise VerificationError("receipt", f"not a valid receipt: {problems}") from None


@dataclass(frozen=True)
class VerifiedReceipt:
    """What a verified receipt proves: the log ``log_id`` signed, at ``timestamp_ms``, a tree
    of ``tree_size`` leaves whose leaf ``leaf_index`` has ``leaf_hash`` (the hash of the data
    given, when ``data_checked``)."""

    log_id: str
    leaf_index: int
    leaf_hash: bytes
    tree_size: int
    root_hash: bytes
    timestamp_ms: int
    data_checked: bool


def verify_receipt(
    receipt: Receipt, public_key_pem: bytes, data: bytes | None = None
) -> VerifiedReceipt:
    """Check, offline, in this order: the head is of the log of ``public_key_pem`` (another
    log's receipt is refused, naming both ids), its signature is valid, the leaf hash is that
    of ``data`` (when given), and the inclusion path leads from the leaf to the head's root.

    Raises :class:`VerificationError` for the first check that fails (``field``: public_key,
    log_id, signature, data, leaf_index or inclusion_path).
    """
    public_key = tree_heads.load_public_key(public_key_pem)
    head = receipt.tree_head
    tree_heads.verify_head(head, public_key)
    if data is not None:
        data_hash = merkle.leaf_hash(data)
        if data_hash != receipt.leaf_hash:
            raise VerificationError(
                "data",
                f"the data's leaf hash {data_hash.hex()} is not the receipt's "
                f"{receipt.leaf_hash.hex()}",
            )
    merkle.verify_inclusion(
        receipt.leaf_hash,
        receipt.leaf_index,
        head.tree_size,
        receipt.inclusion_path,
        head.root_hash,
    )
    return VerifiedReceipt(
        log_id=head.log_id,
        leaf_index=receipt.leaf_index,
        leaf_hash=receipt.leaf_hash,
        tree_size=head.tree_size,
        root_hash=head.root_hash,
        timestamp_ms=head.timestamp_ms,
        data_checked=data is not None,
    )
