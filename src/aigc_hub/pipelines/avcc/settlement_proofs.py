"""A settlement line's proof and its offline check: what ``aigc-hub avcc settlement
verify-line`` runs.

A line proof is ``{"v": 1, "line": <the line's canonical text>, "leaf_index", "tree_size",
"inclusion_path": [hex...], "lines_root": hex, "statement": <the batch's canonical
statement>, "chain_proof": <the chain's proof of the statement, or null before it is
anchored>}``. Checking it needs nothing else: the line's leaf is on the path to
``lines_root`` (RFC 9162 inclusion), the statement names that root and the line's period,
and with the log's public key, the chain's receipt notarizes that very statement — as a
work's receipt is checked.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from aigc_hub.core.errors import InvalidInput

from . import merkle, settlement
from .merkle import VerificationError
from .receipts import Receipt, verify_receipt

LINE_PROOF_VERSION = 1


class LineProofRefused(InvalidInput):
    """The line proof does not prove the line (the message says which check failed)."""

    def __init__(self, message: str) -> None:
        super().__init__("proof", message)


def make_line_proof(
    texts: Sequence[str], index: int, statement: str, chain_proof: Mapping[str, object] | None
) -> dict[str, object]:
    """The proof of line ``index`` among a sealed period's line texts (ledger id order)."""
    tree = settlement.lines_tree(texts)
    return {
        "v": LINE_PROOF_VERSION,
        "line": texts[index],
        "leaf_index": index,
        "tree_size": tree.size,
        "inclusion_path": [h.hex() for h in tree.inclusion_path(index)],
        "lines_root": tree.root().hex(),
        "statement": statement,
        "chain_proof": dict(chain_proof) if chain_proof else None,
    }


def verify_line(proof: bytes, public_key_pem: bytes | None = None) -> dict[str, Any]:
    """What the proof establishes about its line; :class:`LineProofRefused` naming the
    first failed check. Without a public key the chain's receipt is not checked."""
    try:
        document = json.loads(proof)
        line_text = str(document["line"])
        line = json.loads(line_text)
        index, size = int(document["leaf_index"]), int(document["tree_size"])
        path = [bytes.fromhex(h) for h in document["inclusion_path"]]
        root = bytes.fromhex(str(document["lines_root"]))
        statement_text = str(document["statement"])
        statement = settlement.statement_fields(statement_text)
    except (ValueError, KeyError, TypeError) as exc:
        raise LineProofRefused(f"not a settlement line proof ({exc})") from None
    try:
        merkle.verify_inclusion(merkle.leaf_hash(line_text.encode()), index, size, path, root)
    except VerificationError as exc:
        raise LineProofRefused(f"the line is not in the batch: {exc}") from None
    if statement.get("lines_root") != root.hex() or statement.get("line_count") != size:
        raise LineProofRefused("the statement names another batch than the proof's tree")
    if statement.get("period") != line.get("period"):
        raise LineProofRefused(
            f"the line is of period {line.get('period')}, "
            f"the statement of {statement.get('period')}"
        )
    chain_checked = False
    if public_key_pem is not None:
        chain = document.get("chain_proof")
        if not isinstance(chain, dict) or "receipt" not in chain:
            raise LineProofRefused("the batch is not anchored yet: no chain receipt to check")
        try:
            receipt = Receipt.from_json(json.dumps(chain["receipt"]))
            verify_receipt(receipt, public_key_pem, data=statement_text.encode())
        except VerificationError as exc:
            raise LineProofRefused(f"the chain's receipt: {exc}") from None
        chain_checked = True
    return {
        "verified": True,
        "line": line,
        "period": statement.get("period"),
        "batch_id": statement.get("batch_id"),
        "lines_root": root.hex(),
        "chain_checked": chain_checked,
    }
