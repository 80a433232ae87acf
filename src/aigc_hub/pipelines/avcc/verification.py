"""Offline verification of a code's proof: what ``aigc-hub avcc verify`` runs.

A proof (``chain_proof`` of a record, the ``proof`` of ``GET /v1/avcc/codes/{code}``, and
the C2PA manifest's) is ``{"v": 1, "statement": <canonical JSON text>, "receipt": <the
log's receipt>, "anchor": <the EVM anchor or null>}``. Verifying needs nothing but the proof
and the log's public key: the code's check character, that the statement is this code's
work, the log's signature over its tree head, and the inclusion of the statement's leaf.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from aigc_hub.core.errors import InvalidInput

from .codes import parse_code
from .merkle import VerificationError
from .receipts import Receipt, verify_receipt

PROOF_VERSION = 1


class ProofRefused(InvalidInput):
    """The proof does not prove the code (the message says which check failed)."""

    def __init__(self, message: str) -> None:
        super().__init__("proof", message)


def make_proof(
    statement: str, receipt: Receipt, anchor: dict[str, object] | None
) -> dict[str, object]:
    """The proof kept with a record and handed out with its code."""
    return {
        "v": PROOF_VERSION,
        "statement": statement,
        "receipt": json.loads(receipt.to_json()),
        "anchor": anchor,
    }


def verify_offline(
    code: str, proof: bytes, public_key_pem: bytes, work: bytes | None = None
) -> dict[str, Any]:
    """What the proof establishes about ``code``; ProofRefused naming the first failed check
    (InvalidCode for a mistyped code)."""
    parts = parse_code(code)
    try:
        document = json.loads(proof)
        statement_text = str(document["statement"])
        statement = json.loads(statement_text)
        receipt = Receipt.from_json(json.dumps(document["receipt"]))
    except (ValueError, KeyError, TypeError) as exc:
        raise ProofRefused(f"not an avcc proof ({exc})") from None
    except VerificationError as exc:
        raise ProofRefused(str(exc)) from None
    if statement.get("avcc_record_id") != parts.record_id:
        raise ProofRefused("the proof's statement is about another work than this code's")
    issuer = f"MA.{parts.country}.{parts.issuer}.{parts.node}"
    if statement.get("issuer") != issuer:
        raise ProofRefused(f"the statement was issued by {statement.get('issuer')}, not {issuer}")
    try:
        checked = verify_receipt(receipt, public_key_pem, data=statement_text.encode())
    except VerificationError as exc:
        raise ProofRefused(str(exc)) from None
    if work is not None:
        digest = f"sha256:{hashlib.sha256(work).hexdigest()}"
        if digest != statement.get("content_hash"):
            raise ProofRefused(f"the work's hash {digest} is not the coded work's")
    return {
        "avcc_code": code.strip().upper(),
        "verified": True,
        "log_id": checked.log_id,
        "tree_size": checked.tree_size,
        "leaf_index": checked.leaf_index,
        "signed_at": checked.timestamp_ms,
        "final_level": statement.get("final_level"),
        "content_hash": statement.get("content_hash"),
        "report_hash": statement.get("report_hash"),
        "work_checked": work is not None,
        "anchor": document.get("anchor"),
    }
