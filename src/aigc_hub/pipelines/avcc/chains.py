"""The two ``Chain`` implementations and the factory that picks one from the settings.

* :class:`LogChain` — the embedded default: a batch of statements is appended to the
  transparency log and one signed tree head covers them all (the batch's "transaction").
* :class:`EvmChain` — the same, then the head's root is anchored in one EVM transaction.
  A work whose leaf an anchored root already covers reuses that anchor: a redelivered
  statement, or one whose worker died between submit and confirm, is never anchored twice.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from aigc_hub.core.errors import ConfigurationError
from aigc_hub.store.engine import reader

from . import tree_heads
from .adapters.base import Chain, Notarized
from .evm_tables import evm_anchors
from .settings import AvccSettings
from .statements import Statement
from .translog import TransparencyLog
from .tree_heads import SignedTreeHead
from .verification import make_proof

if TYPE_CHECKING:
    from aigc_hub.bootstrap import Hub

    from .adapters.evm import EvmAnchorer
    from .evm_anchors import AnchorTx


class LogChain:
    """Statements notarized on the transparency log alone."""

    name = "log"

    def __init__(self, log: TransparencyLog) -> None:
        self.log = log

    def public_key_pem(self) -> bytes:
        """The log's public key."""
        return tree_heads.public_key_pem(self.log.public_key)

    async def notarize(self, statements: Sequence[Statement]) -> list[Notarized]:
        """Append the batch, sign one head over it, answer each leaf's receipt."""
        refs = await self.log.append([(s.entry_key, s.body) for s in statements])
        head = await self.log.seal()
        return [
            await self.place(s, head, ref.leaf_hash)
            for s, ref in zip(statements, refs, strict=True)
        ]

    async def place(
        self, statement: Statement, head: SignedTreeHead, leaf_hash: bytes
    ) -> Notarized:
        """The statement's place under ``head``: its receipt, the seed's fields."""
        receipt = await self.log.prove(statement.entry_key, head)
        return Notarized(
            record_id=statement.record_id,
            chain_type=statement.chain_type,
            tx_hash="0x" + leaf_hash.hex(),
            block_height=head.tree_size,
            crd_address="0x" + self.log.log_id,
            proof=make_proof(statement.body.decode(), receipt, None),
        )

    async def reconcile(self) -> int:
        """Nothing is ever unknown on the log: an append either committed or did not."""
        return 0

    async def close(self) -> None:
        """The log holds no connection of its own."""


class EvmChain:
    """The log's signed roots anchored on an EVM chain (one transaction per batch)."""

    name = "evm"

    def __init__(self, log: LogChain, anchorer: EvmAnchorer, engine: AsyncEngine) -> None:
        self.log = log
        self.anchorer = anchorer
        self._engine = engine

    def public_key_pem(self) -> bytes:
        """The log's public key (the anchors are checked on the chain itself)."""
        return self.log.public_key_pem()

    async def notarize(self, statements: Sequence[Statement]) -> list[Notarized]:
        """Log the batch; anchor one new root for the leaves no anchored root covers yet."""
        refs = await self.log.log.append([(s.entry_key, s.body) for s in statements])
        head = await self.log.log.seal()
        placed: list[Notarized] = []
        # Leaves past the largest anchored tree are covered by none: only a redelivered
        # statement (an older leaf) needs a look-up, so a fresh batch reads the anchors once.
        top = await self._largest_anchored()
        heads: dict[int, tuple[AnchorTx, SignedTreeHead]] = {}
        for statement, ref in zip(statements, refs, strict=True):
            size = await self._covering_size(ref.leaf_index) if ref.leaf_index < top else None
            if size is None:
                size = head.tree_size
            if size not in heads:
                heads[size] = await self._anchor_of(size)
            covering, covering_head = heads[size]
            place = await self.log.place(statement, covering_head, ref.leaf_hash)
            anchor = {
                "chain_id": covering.chain_id,
                "tx_hash": covering.tx_hash,
                "block_number": covering.block_number,
                "sender": covering.sender,
                "tree_size": covering.tree_size,
                "root": covering.root.hex(),
            }
            placed.append(
                replace(
                    place,
                    tx_hash=covering.tx_hash,
                    block_height=int(covering.block_number or 0),
                    crd_address=covering.sender,
                    proof={**place.proof, "anchor": anchor},
                )
            )
        return placed

    async def _largest_anchored(self) -> int:
        """The largest tree size with a live (sent or confirmed) anchor, 0 for none."""
        async with reader(self._engine) as conn:
            size = (
                await conn.execute(
                    sa.select(sa.func.max(evm_anchors.c.tree_size)).where(
                        evm_anchors.c.status != "FAILED"
                    )
                )
            ).scalar_one_or_none()
        return int(size or 0)

    async def _covering_size(self, leaf_index: int) -> int | None:
        """The smallest anchored tree (sent or confirmed) that includes leaf ``leaf_index``."""
        async with reader(self._engine) as conn:
            size = (
                await conn.execute(
                    sa.select(sa.func.min(evm_anchors.c.tree_size)).where(
                        evm_anchors.c.tree_size > leaf_index, evm_anchors.c.status != "FAILED"
                    )
                )
            ).scalar_one_or_none()
        return int(size) if size is not None else None

    async def _anchor_of(self, size: int) -> tuple[AnchorTx, SignedTreeHead]:
        """The anchor of the signed head of ``size``: sent now if it has none, resumed
        (reconciled) if it was left SENT, as recorded if confirmed."""
        signed = await self.log.log.head(size)
        if signed is None:  # anchors are only ever made of signed heads
            raise ConfigurationError(f"tree size {size} has no signed head")
        return await self.anchorer.anchor(size, signed.root_hash), signed

    async def reconcile(self) -> int:
        """Anchors left SENT by a dead process, settled by reading the chain."""
        return len(await self.anchorer.reconcile())

    async def close(self) -> None:
        """Close the node connections."""
        await self.anchorer.aclose()


def make_chain(hub: Hub, settings: AvccSettings, data_dir: Path) -> Chain:
    """The chain the settings name, on the hub's database."""
    key_path = (
        Path(settings.log_key_path) if settings.log_key_path else data_dir / "avcc" / "log-key.pem"
    )
    log = LogChain(TransparencyLog(hub.engine, tree_heads.load_or_create_key(key_path), hub.clock))
    if settings.chain == "log":
        return log
    if not settings.evm_rpc_url or not settings.evm_private_key.get_secret_value():
        raise ConfigurationError(
            "AIGC_HUB_AVCC_CHAIN=evm needs AIGC_HUB_AVCC_EVM_RPC_URL and "
            "AIGC_HUB_AVCC_EVM_PRIVATE_KEY"
        )
    try:
        from .adapters.evm import EvmAnchorer
    except ImportError as exc:  # web3 is the `evm` extra
        raise ConfigurationError(
            "AIGC_HUB_AVCC_CHAIN=evm needs web3: pip install 'aigc-hub[evm]'"
        ) from exc
    anchorer = EvmAnchorer(
        hub.engine,
        settings.evm_rpc_url,
        settings.evm_private_key.get_secret_value(),
        clock=hub.clock,
        failpoints=hub.failpoints,
    )
    return EvmChain(log, anchorer, hub.engine)
