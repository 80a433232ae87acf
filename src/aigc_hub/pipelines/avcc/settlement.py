"""settlement-svc's rules, pure and table-tested: how a purchase is split between the parties,
which period a moment belongs to, and the exact bytes of a line and of a batch's statement.

* **Split.** A purchase of ``n`` fen gives the work's tenant ``floor(n × creator_bps / 10000)``,
  the reporting platform node ``floor(n × node_bps / 10000)`` and the hub (``platform``) the
  rest, so every rounding remainder is the hub's and the three lines sum to ``n`` exactly.
* **Periods** are UTC-aligned intervals of ``period_s`` seconds (a multiple of 60) from the
  epoch; a period's id is its start, ``YYYYMMDDTHHMMZ`` (``20261201T0000Z``), and its batch id
  the same digits as an integer (``202612010000``), the chain subject ``settlement:<id>``.
* **A line's leaf** in its batch's Merkle tree is the canonical JSON (sorted keys, no
  whitespace, ASCII) of exactly :data:`LINE_FIELDS`; the tree's leaves are the period's lines
  in ledger id order. The batch's **statement** (what the chain notarizes) names the period,
  its count, total and ``lines_root``; nothing private (accounts stay off the chain).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from aigc_hub.core.errors import ConfigurationError, InvalidInput

from . import merkle
from .statements import canonical

#: The ledger's business type of a purchase's lines; business id ``<purchase_id>:<party>``.
BUSINESS_TYPE = "avcc.purchase"
#: The ledger entry kind of a share credited to an account.
CREDIT = "credit"
PLATFORM_ACCOUNT = "platform"
STATEMENT_VERSION = 1
LINE_VERSION = 1
#: The fields of a line hashed into its batch's tree, in the order a reader lists them.
LINE_FIELDS = (
    "v",
    "id",
    "period",
    "account",
    "amount",
    "purchase_id",
    "avcc_code",
    "record_id",
    "platform_node",
    "occurred_at",
)
_PERIOD_FORMAT = "%Y%m%dT%H%MZ"


class Party(StrEnum):
    """Who a purchase's line credits."""

    TENANT = "tenant"
    NODE = "node"
    PLATFORM = "platform"


class PeriodStatus(StrEnum):
    """A period's life: lines are booked while OPEN; sealed into its batch (ANCHORING, never
    booked into again); its statement confirmed on the chain (ANCHORED)."""

    OPEN = "OPEN"
    ANCHORING = "ANCHORING"
    ANCHORED = "ANCHORED"


class InvalidPeriod(InvalidInput):
    """Not a period id (``YYYYMMDDTHHMMZ``)."""

    def __init__(self, period: str) -> None:
        super().__init__("period", f"{period!r} is not a period id like 20261201T0000Z")


@dataclass(frozen=True)
class Share:
    """One party's part of a purchase, in fen."""

    party: Party
    account: str
    amount: int


def split(
    revenue_fen: int, *, tenant_id: str, platform_node: str, creator_bps: int, node_bps: int
) -> list[Share]:
    """The purchase's three shares (tenant, node, platform), summing to ``revenue_fen``."""
    if revenue_fen < 0:
        raise ValueError("a purchase is never negative")
    if creator_bps + node_bps > 10_000:
        raise ConfigurationError(
            f"creator_share_bps + node_share_bps = {creator_bps + node_bps} exceeds 10000"
        )
    creator = revenue_fen * creator_bps // 10_000
    node = revenue_fen * node_bps // 10_000
    return [
        Share(Party.TENANT, tenant_account(tenant_id), creator),
        Share(Party.NODE, f"node:{platform_node}", node),
        Share(Party.PLATFORM, PLATFORM_ACCOUNT, revenue_fen - creator - node),
    ]


def tenant_account(tenant_id: str) -> str:
    """The ledger account of a tenant's shares."""
    return f"tenant:{tenant_id}"


def business_id(purchase_id: str, party: Party) -> str:
    """The line's business key in the ledger: one line per purchase and party, ever."""
    return f"{purchase_id}:{party.value}"


@dataclass(frozen=True)
class Period:
    """A settlement period: ``[starts_at, ends_at)`` in epoch ms, and its id."""

    id: str
    starts_at: int
    ends_at: int

    @property
    def batch_id(self) -> int:
        """The period's settlement batch id (its id's digits): the chain subject."""
        return batch_id_of(self.id)

    def next(self) -> Period:
        """The period right after this one."""
        return period_of(self.ends_at, (self.ends_at - self.starts_at) // 1000)


def period_of(at_ms: int, period_s: int) -> Period:
    """The period holding the moment ``at_ms`` (UTC-aligned from the epoch)."""
    if period_s <= 0 or period_s % 60:
        raise ConfigurationError(f"a settlement period is whole minutes, not {period_s} s")
    length = period_s * 1000
    start = at_ms - at_ms % length
    return Period(time.strftime(_PERIOD_FORMAT, time.gmtime(start // 1000)), start, start + length)


def parse_period(period: str) -> str:
    """``period`` checked to be a period id; :class:`InvalidPeriod` otherwise."""
    try:
        parsed = time.strptime(period, _PERIOD_FORMAT)
    except (ValueError, TypeError):
        raise InvalidPeriod(period) from None
    if time.strftime(_PERIOD_FORMAT, parsed) != period:
        raise InvalidPeriod(period)
    return period


def batch_id_of(period: str) -> int:
    """``20261201T0000Z`` → ``202612010000``."""
    return int(parse_period(period).replace("T", "").removesuffix("Z"))


@dataclass(frozen=True)
class Line:
    """One ledger line of the settlement ledger, as booked."""

    id: int
    period: str
    account: str
    amount: int
    purchase_id: str
    avcc_code: str
    record_id: int
    platform_node: str
    occurred_at: int

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Line:
        """A line from a row of the ledger's entries table."""
        return cls(
            id=int(row["id"]),
            period=str(row["period"]),
            account=str(row["account"]),
            amount=int(row["amount"]),
            purchase_id=str(row["purchase_id"]),
            avcc_code=str(row["avcc_code"]),
            record_id=int(row["record_id"]),
            platform_node=str(row["platform_node"]),
            occurred_at=int(row["occurred_at"]),
        )

    def text(self) -> str:
        """The line's canonical JSON, exactly :data:`LINE_FIELDS`: its leaf's data."""
        return canonical(
            {
                "v": LINE_VERSION,
                "id": self.id,
                "period": self.period,
                "account": self.account,
                "amount": self.amount,
                "purchase_id": self.purchase_id,
                "avcc_code": self.avcc_code,
                "record_id": self.record_id,
                "platform_node": self.platform_node,
                "occurred_at": self.occurred_at,
            }
        )


def lines_tree(texts: Iterable[str]) -> merkle.MerkleTree:
    """The batch's tree: one leaf per line text, in the order given (ledger id order)."""
    return merkle.MerkleTree(merkle.leaf_hash(t.encode()) for t in texts)


def statement_text(
    *, issuer: str, period: Period, line_count: int, total_fen: int, lines_root: bytes
) -> str:
    """The canonical statement of a sealed period: what the chain notarizes."""
    return canonical(
        {
            "v": STATEMENT_VERSION,
            "chain_type": "settlement",
            "issuer": issuer,
            "batch_id": period.batch_id,
            "period": period.id,
            "starts_at": period.starts_at,
            "ends_at": period.ends_at,
            "line_count": line_count,
            "total_fen": total_fen,
            "lines_root": lines_root.hex(),
        }
    )


def statement_fields(text: str) -> dict[str, object]:
    """A statement's fields (InvalidInput when the text is not a settlement statement)."""
    try:
        value = json.loads(text)
    except ValueError:
        raise InvalidInput("statement", "not JSON") from None
    if not isinstance(value, dict) or value.get("chain_type") != "settlement":
        raise InvalidInput("statement", "not a settlement statement")
    return value
