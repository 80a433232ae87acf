"""What is notarized for a work: one canonical JSON statement per (chain type, record).

The statement binds the work's bytes (``content_hash``) to its review (``report_hash``,
level, score) and to the issuer, and names nothing private: no tenant, no object key, no
URL. Canonical form: keys sorted, no whitespace, ASCII only (equal to RFC 8785 for these
strings and integers), so anyone re-serializing the same fields gets the same bytes and the
same leaf hash.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .events import ChainType

if TYPE_CHECKING:
    from .settings import AvccSettings

VERSION = 1


@dataclass(frozen=True)
class Statement:
    """One work to notarize on one chain type; ``entry_key`` makes notarizing it idempotent."""

    record_id: int
    chain_type: ChainType
    #: O works are the fast path: their batch is sealed at once.
    urgent: bool
    body: bytes

    @property
    def entry_key(self) -> str:
        """The log's idempotency key of this statement."""
        return f"{self.chain_type}:{self.record_id}"


def statement_body(
    *,
    record_id: int,
    chain_type: ChainType,
    issuer: str,
    content_hash: str,
    report_hash: str,
    final_level: str,
    overall_score: float,
    model_name: str,
    model_version: str,
    reviewed_at_ms: int,
) -> str:
    """The canonical statement text (what the leaf hashes)."""
    return canonical(
        {
            "v": VERSION,
            "avcc_record_id": record_id,
            "chain_type": chain_type,
            "issuer": issuer,
            "content_hash": content_hash,
            "report_hash": report_hash,
            "final_level": final_level,
            "overall_score": overall_score,
            "ai_tool_info": {"model_name": model_name, "model_version": model_version},
            "reviewed_at": reviewed_at_ms,
        }
    )


def canonical(value: Mapping[str, object]) -> str:
    """Sorted keys, no whitespace, ASCII: one text for one value."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def statement_of(settings: AvccSettings, row: Mapping[str, Any]) -> str:
    """The statement an approved record is notarized with (the same text every time)."""
    s = settings
    return statement_body(
        record_id=int(row["id"]),
        chain_type="copyright_main",
        issuer=f"MA.{s.country}.{s.issuer}.{s.platform_node}",
        content_hash=row["content_hash"],
        report_hash=row["report_hash"],
        final_level=row["final_level"],
        overall_score=float(row["overall_score"]),
        model_name=row["model_name"],
        model_version=row["model_version"],
        reviewed_at_ms=int(row["reviewed_at"]),
    )
