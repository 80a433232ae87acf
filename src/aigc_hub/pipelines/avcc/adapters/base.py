"""The ``Chain`` a work is notarized on: one protocol, two implementations.

* ``log`` (embedded default): our verifiable transparency log. ``tx_hash`` is the work's
  leaf hash, ``block_height`` the size of the signed tree head that includes it,
  ``crd_address`` the log's id (the hash of its public key).
* ``evm``: the same log, whose signed roots are anchored in transactions on an EVM chain.
  ``tx_hash`` is the anchoring transaction, ``block_height`` its block, ``crd_address`` the
  anchoring account.

Either way every work keeps its own inclusion proof (``proof``), which anyone can check
offline with the log's public key (``aigc-hub avcc verify``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from ..statements import Statement


@dataclass(frozen=True)
class Notarized:
    """A statement's place on the chain: the seed's §9.2.3 fields and the receipt."""

    record_id: int
    chain_type: str
    tx_hash: str
    block_height: int
    crd_address: str
    proof: dict[str, object]


class Chain(Protocol):
    """Notarizes statements; idempotent per ``Statement.entry_key``: a statement already on
    the chain answers its existing place, never a second one."""

    name: str

    async def notarize(self, statements: Sequence[Statement]) -> list[Notarized]:
        """Put ``statements`` on the chain (many per transaction) and answer each one's place,
        in order. RetryableError when the chain cannot be reached."""
        ...

    async def reconcile(self) -> int:
        """Settle submissions whose outcome is unknown by reading the chain; how many."""
        ...

    def public_key_pem(self) -> bytes:
        """The log's public key: what verifies every receipt of this chain offline."""
        ...

    async def close(self) -> None:
        """Release connections."""
        ...
