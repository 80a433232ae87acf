"""Anchoring avcc's transparency-log roots on an EVM chain through web3.py, at most once.

Many works share one anchor: each keeps its inclusion proof in the log, and the signed log
root covering it is what goes on chain, in one transaction from the hub's account to itself
(or to a configured address), value 0, whose data field is the versioned payload of
:mod:`aigc_hub.pipelines.avcc.evm_anchors` (``b"AVCC1"`` + 8-byte tree size + 32-byte root).

The recipe, whose point is that a transaction is never sent twice blindly:

1. A row for this tree size exists: resume it (reconcile, below); send nothing new.
2. Read what the transaction needs from the node (chain id, the account's pending nonce,
   fees) first: no database transaction is open across a call to the node.
3. In ONE short write transaction: lock the account's row in ``avcc_evm_senders``
   (``SELECT ... FOR UPDATE``; on SQLite the hub's ``BEGIN IMMEDIATE`` already serializes
   writers), take the nonce ``max(next_nonce, pending count)``, sign the transaction
   LOCALLY, and commit the anchor row (tree size, nonce, the raw signed bytes, their hash,
   status SENT) BEFORE anything is broadcast. From then on that hash names the one
   transaction that may carry this anchor; broadcasting the same bytes again cannot land twice.
4. Broadcast. A refusal ("already known", "nonce too low") is not an error: ask the chain.
5. Wait, bounded and polling, for the receipt and ``confirmations`` blocks on top of it;
   record CONFIRMED and the block, or FAILED with the reason when it reverted.

A row left SENT (a crash or a timeout between 3 and 5) is reconciled by reading the chain: a
receipt means CONFIRMED; no receipt while the account's nonce is past the row's means another
transaction took the nonce, so the row is FAILED with that reason and nothing new is sent;
otherwise the SAME signed bytes are broadcast again.

The client is web3's async one (``AsyncWeb3`` over ``AsyncHTTPProvider``): it speaks plain
JSON-RPC over aiohttp, so no thread is needed. Its built-in retry loop is switched off: a call
that fails becomes a :class:`~aigc_hub.core.errors.RetryableError` at once, and the hub's retry
policy decides when to try again.
"""

from __future__ import annotations

try:  # first, so a missing client names the extra to install
    import web3  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the installation
    raise ImportError("EVM anchoring needs web3: pip install 'aigc-hub[evm]'") from exc

import asyncio
import logging
from collections.abc import Awaitable
from typing import TypeVar

import aiohttp
import sqlalchemy as sa
from eth_account import Account
from eth_account.signers.local import LocalAccount
from eth_typing import HexStr
from eth_utils.address import to_checksum_address
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from web3 import AsyncHTTPProvider, AsyncWeb3
from web3.exceptions import TransactionNotFound, Web3RPCError
from web3.types import Nonce, TxParams, TxReceipt, Wei

from aigc_hub.core import failpoints as fp
from aigc_hub.core.clock import Clock, SystemClock
from aigc_hub.core.errors import (
    ConfigurationError,
    Conflict,
    PermanentError,
    RetryableError,
)
from aigc_hub.pipelines.avcc.evm_anchors import AnchorStatus, AnchorTx, encode_anchor
from aigc_hub.pipelines.avcc.evm_tables import evm_anchors, evm_senders
from aigc_hub.store.dialects import dialect_of
from aigc_hub.store.engine import reader

T = TypeVar("T")

log = logging.getLogger(__name__)

#: 21000 plus at most 22800 - 21000 for 45 bytes of calldata (EIP-2028 pricing, EIP-7623's
#: floor) when the recipient has no code. Fixed rather than estimated, so the signed bytes
#: depend on no answer of the node that could differ on a retry.
ANCHOR_GAS = 30_000

#: Failpoints: after the row is committed and before the broadcast; right after it.
BEFORE_BROADCAST = "avcc.evm.before_broadcast"
AFTER_BROADCAST = "avcc.evm.after_broadcast"


def connect(rpc_url: str, rpc_timeout: float) -> AsyncWeb3[AsyncHTTPProvider]:
    """An async web3 client for ``rpc_url``; it connects on its first call, not here."""
    provider = AsyncHTTPProvider(
        rpc_url,
        request_kwargs={"timeout": aiohttp.ClientTimeout(total=rpc_timeout)},
        # web3's retry loop would sleep and resend inside one call; the hub retries instead.
        exception_retry_configuration=None,
    )
    return AsyncWeb3(provider)


async def ask(rpc_url: str, what: str, call: Awaitable[T]) -> T:
    """Await one node call; an unreachable or failing node becomes a RetryableError."""
    try:
        return await call
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        raise RetryableError(f"EVM node {rpc_url} unreachable ({what}): {exc!r}") from exc
    except Web3RPCError as exc:
        raise RetryableError(f"EVM node {rpc_url} failed {what}: {exc}") from exc


async def receipt_of(w3: AsyncWeb3[AsyncHTTPProvider], tx_hash: str) -> TxReceipt | None:
    """The transaction's receipt, or None while it is not mined (or unknown)."""
    url = str(w3.provider.endpoint_uri)
    try:
        call = w3.eth.get_transaction_receipt(HexStr(tx_hash))
        return await ask(url, "eth_getTransactionReceipt", call)
    except RetryableError as exc:
        if isinstance(exc.__cause__, TransactionNotFound):
            return None
        raise


async def verify_anchor_on_chain(
    rpc_url: str,
    tx_hash: str,
    tree_size: int,
    root: bytes,
    *,
    sender: str | None = None,
    rpc_timeout: float = 10.0,
) -> bool:
    """True when ``tx_hash`` is mined, succeeded, and its data is exactly this anchor (sent
    by ``sender`` when given). Read-only; RetryableError when the node cannot answer."""
    expected = encode_anchor(tree_size, root)
    w3 = connect(rpc_url, rpc_timeout)
    try:
        receipt = await receipt_of(w3, tx_hash)
        if receipt is None or receipt["status"] != 1:
            return False
        tx = await ask(rpc_url, "eth_getTransactionByHash", w3.eth.get_transaction(HexStr(tx_hash)))
        if sender is not None and tx["from"] != to_checksum_address(sender):
            return False
        return bytes(tx["input"]) == expected
    finally:
        await w3.provider.disconnect()


class EvmAnchorer:
    """Anchors log roots from one account, at most one transaction per tree size.

    Safe to use from several tasks and processes at once: nonces are allocated under a lock
    in the database, and every transaction is recorded before it is broadcast. Close it with
    :meth:`aclose` (or ``async with``).
    """

    def __init__(
        self,
        engine: AsyncEngine,
        rpc_url: str,
        private_key: str,
        chain_id: int | None = None,
        confirmations: int = 0,
        *,
        to: str | None = None,
        receipt_timeout: float = 60.0,
        poll_interval: float = 0.5,
        rpc_timeout: float = 10.0,
        clock: Clock | None = None,
        failpoints: fp.Failpoints = fp.NONE,
    ) -> None:
        if confirmations < 0:
            raise ConfigurationError(f"confirmations must be >= 0, not {confirmations}")
        self._engine = engine
        self._rpc_url = rpc_url
        try:
            self._account: LocalAccount = Account.from_key(private_key)
        except ValueError:  # not chained: its message may quote the key
            raise ConfigurationError("the EVM private key is not a valid secp256k1 key") from None
        self._configured_chain_id = chain_id
        self._chain_id: int | None = None
        self._confirmations = confirmations
        self._to = to_checksum_address(to) if to is not None else self._account.address
        self._receipt_timeout = receipt_timeout
        self._poll_interval = poll_interval
        self._clock = clock or SystemClock()
        self._failpoints = failpoints
        self._w3 = connect(rpc_url, rpc_timeout)

    @property
    def sender(self) -> str:
        """The checksummed address the anchors are sent from."""
        return str(self._account.address)

    async def __aenter__(self) -> EvmAnchorer:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the node connections."""
        await self._w3.provider.disconnect()

    async def find(self, tree_size: int) -> AnchorTx | None:
        """The recorded anchor of ``tree_size``, or None."""
        async with reader(self._engine) as conn:
            return await _select(conn, tree_size)

    async def anchor(self, tree_size: int, root: bytes) -> AnchorTx:
        """Anchor ``root`` as the log root of ``tree_size``; CONFIRMED on return.

        Idempotent by tree size: a recorded anchor is resumed, never sent anew. Raises
        Conflict if it was recorded with another root, PermanentError if its transaction
        failed (reverted, or lost its nonce), RetryableError if the node is unreachable or
        the receipt does not come in time (the row stays SENT for :meth:`reconcile`).
        """
        data = encode_anchor(tree_size, root)
        anchor = await self.find(tree_size)
        fresh = anchor is None
        if anchor is None:
            anchor, fresh = await self._record_new(tree_size, root, data)
        if anchor.root != root:
            raise Conflict(f"tree size {tree_size} is anchored with another root")
        if anchor.status is AnchorStatus.SENT:
            if fresh:
                self._failpoints.hit(BEFORE_BROADCAST)
                anchor = await self._broadcast(anchor)
            else:
                anchor = await self._reconcile_one(anchor)
        if anchor.status is AnchorStatus.FAILED:
            raise PermanentError(f"anchor of tree size {tree_size} failed: {anchor.failure}")
        return anchor

    async def reconcile(self) -> list[AnchorTx]:
        """Settle every row left SENT on this chain by reading it; the rows as they end up.

        Rows go in nonce order, and the first RetryableError (node unreachable, a receipt
        short of its confirmations in time) stops the pass and is raised: a later nonce
        cannot be mined before an earlier one anyway.
        """
        chain_id = await self._node_chain_id()
        async with reader(self._engine) as conn:
            rows = await conn.execute(
                sa.select(evm_anchors)
                .where(
                    evm_anchors.c.status == AnchorStatus.SENT.value,
                    evm_anchors.c.chain_id == chain_id,
                )
                .order_by(evm_anchors.c.sender, evm_anchors.c.nonce)
            )
            pending = [AnchorTx.from_row(row) for row in rows.mappings()]
        return [await self._reconcile_one(anchor) for anchor in pending]

    # --- recording ------------------------------------------------------------------------

    async def _record_new(self, tree_size: int, root: bytes, data: bytes) -> tuple[AnchorTx, bool]:
        """Sign and commit a new SENT row (or find the row another writer committed first);
        the row, and whether it is ours and new."""
        chain_id = await self._node_chain_id()
        pending_nonce = await self._ask(
            "eth_getTransactionCount",
            self._w3.eth.get_transaction_count(self._account.address, "pending"),
        )
        fees = await self._fees()
        try:
            async with self._engine.begin() as conn:
                next_nonce = await self._lock_sender(conn, chain_id)
                existing = await _select(conn, tree_size)
                if existing is not None:
                    return existing, False
                nonce = max(next_nonce, pending_nonce)
                tx: TxParams = {
                    "chainId": chain_id,
                    "nonce": Nonce(nonce),
                    "to": self._to,
                    "value": Wei(0),
                    "data": data,
                    "gas": ANCHOR_GAS,
                }
                tx.update(fees)
                signed = self._account.sign_transaction(tx)  # type: ignore[arg-type]
                now = self._clock.now_ms()
                await conn.execute(
                    evm_anchors.insert().values(
                        tree_size=tree_size,
                        root=root,
                        chain_id=chain_id,
                        sender=self.sender,
                        nonce=nonce,
                        raw_tx=bytes(signed.raw_transaction),
                        tx_hash=signed.hash.to_0x_hex(),
                        status=AnchorStatus.SENT.value,
                        created_at=now,
                        updated_at=now,
                    )
                )
                await conn.execute(
                    evm_senders.update()
                    .where(*_sender_is(chain_id, self.sender))
                    .values(next_nonce=nonce + 1)
                )
                anchor = await _select(conn, tree_size)
        except sa.exc.IntegrityError:
            # Another account's anchorer committed this tree size first: resume its row.
            anchor = await self.find(tree_size)
            if anchor is None:
                raise
            return anchor, False
        assert anchor is not None  # inserted just above, in this transaction
        return anchor, True

    async def _lock_sender(self, conn: AsyncConnection, chain_id: int) -> int:
        """Take the account's allocation lock in ``conn``'s transaction; its next nonce."""
        await conn.execute(
            dialect_of(conn)
            .insert(evm_senders)
            .values(chain_id=chain_id, sender=self.sender, next_nonce=0)
            .on_conflict_do_nothing()
        )
        # FOR UPDATE holds concurrent allocators (other processes too) until we commit;
        # SQLite renders no FOR UPDATE: its BEGIN IMMEDIATE has taken the writer lock already.
        result = await conn.execute(
            sa.select(evm_senders.c.next_nonce)
            .where(*_sender_is(chain_id, self.sender))
            .with_for_update()
        )
        return int(result.scalar_one())

    async def _settle(
        self, anchor: AnchorTx, status: AnchorStatus, *, block: int | None, failure: str | None
    ) -> AnchorTx:
        """Move a SENT row to its outcome (unless another process did); the row as stored."""
        async with self._engine.begin() as conn:
            await conn.execute(
                evm_anchors.update()
                .where(
                    evm_anchors.c.tree_size == anchor.tree_size,
                    evm_anchors.c.status == AnchorStatus.SENT.value,
                )
                .values(
                    status=status.value,
                    block_number=block,
                    failure=failure,
                    updated_at=self._clock.now_ms(),
                )
            )
            stored = await _select(conn, anchor.tree_size)
        assert stored is not None  # rows are never deleted
        return stored

    # --- the chain ------------------------------------------------------------------------

    async def _broadcast(self, anchor: AnchorTx) -> AnchorTx:
        """Send the row's signed bytes and wait for the outcome; a refusal asks the chain."""
        try:
            await self._w3.eth.send_raw_transaction(anchor.raw_tx)
        except Web3RPCError as refusal:
            # "already known" / "nonce too low" may mean it is in the pool or mined already.
            if not await self._node_knows(anchor.tx_hash):
                if await self._chain_nonce(anchor.sender) > anchor.nonce:
                    return await self._nonce_taken(anchor)
                raise RetryableError(f"the node refused {anchor.tx_hash}: {refusal}") from refusal
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            # It may have arrived: the row stays SENT, and reconcile() asks the chain.
            raise RetryableError(f"broadcast of {anchor.tx_hash} unconfirmed: {exc!r}") from exc
        self._failpoints.hit(AFTER_BROADCAST)
        return await self._await_outcome(anchor)

    async def _reconcile_one(self, anchor: AnchorTx) -> AnchorTx:
        """Read the chain about a SENT row; rebroadcast its same bytes only if they may land."""
        # The nonce first: read after the receipt, a just-mined anchor would look "taken".
        chain_nonce = await self._chain_nonce(anchor.sender)
        if await receipt_of(self._w3, anchor.tx_hash) is not None:
            return await self._await_outcome(anchor)
        if chain_nonce > anchor.nonce:
            return await self._nonce_taken(anchor)
        return await self._broadcast(anchor)

    async def _await_outcome(self, anchor: AnchorTx) -> AnchorTx:
        """Poll for the receipt and the confirmations (bounded); record the outcome."""
        try:
            async with asyncio.timeout(self._receipt_timeout):
                while True:
                    receipt = await receipt_of(self._w3, anchor.tx_hash)
                    if receipt is not None and await self._deep_enough(receipt):
                        break
                    await asyncio.sleep(self._poll_interval)
        except TimeoutError as exc:
            raise RetryableError(
                f"{anchor.tx_hash} not confirmed within {self._receipt_timeout:g}s; "
                "it stays SENT until reconcile() finds it"
            ) from exc
        block = int(receipt["blockNumber"])
        if receipt["status"] == 1:
            return await self._settle(anchor, AnchorStatus.CONFIRMED, block=block, failure=None)
        reason = f"{anchor.tx_hash} reverted in block {block} (gas used {receipt['gasUsed']})"
        return await self._settle(anchor, AnchorStatus.FAILED, block=block, failure=reason)

    async def _nonce_taken(self, anchor: AnchorTx) -> AnchorTx:
        # Should not happen (nonces are allocated under a lock): someone else used the key.
        # Sending a new transaction could anchor twice if ours were only delayed: report it.
        reason = (
            f"nonce {anchor.nonce} of {anchor.sender} was taken by another transaction; "
            f"{anchor.tx_hash} can never be mined"
        )
        log.error("avcc anchor of tree size %d failed: %s", anchor.tree_size, reason)
        return await self._settle(anchor, AnchorStatus.FAILED, block=None, failure=reason)

    async def _deep_enough(self, receipt: TxReceipt) -> bool:
        if self._confirmations == 0:
            return True
        latest = await self._ask("eth_blockNumber", self._w3.eth.block_number)
        return latest - int(receipt["blockNumber"]) >= self._confirmations

    async def _node_knows(self, tx_hash: str) -> bool:
        try:
            call = self._w3.eth.get_transaction(HexStr(tx_hash))
            await self._ask("eth_getTransactionByHash", call)
        except RetryableError as exc:
            if isinstance(exc.__cause__, TransactionNotFound):
                return False
            raise
        return True

    async def _chain_nonce(self, sender: str) -> int:
        """How many of ``sender``'s transactions are mined."""
        call = self._w3.eth.get_transaction_count(to_checksum_address(sender), "latest")
        return await self._ask("eth_getTransactionCount", call)

    async def _node_chain_id(self) -> int:
        """The node's chain id (asked once); ConfigurationError if it is not the one set."""
        if self._chain_id is None:
            node_chain = await self._ask("eth_chainId", self._w3.eth.chain_id)
            configured = self._configured_chain_id
            if configured is not None and configured != node_chain:
                raise ConfigurationError(
                    f"EVM node {self._rpc_url} serves chain {node_chain}, not {configured}"
                )
            self._chain_id = node_chain
        return self._chain_id

    async def _fees(self) -> TxParams:
        """EIP-1559 fees (the common 2 x base fee + tip cap), or a legacy gas price."""
        block = await self._ask("eth_getBlockByNumber", self._w3.eth.get_block("latest"))
        if "baseFeePerGas" not in block:
            return {"gasPrice": await self._ask("eth_gasPrice", self._w3.eth.gas_price)}
        tip = await self._ask("eth_maxPriorityFeePerGas", self._w3.eth.max_priority_fee)
        max_fee = 2 * int(block["baseFeePerGas"]) + tip
        return {"maxFeePerGas": Wei(max_fee), "maxPriorityFeePerGas": tip}

    async def _ask(self, what: str, call: Awaitable[T]) -> T:
        return await ask(self._rpc_url, what, call)


def _sender_is(chain_id: int, sender: str) -> tuple[sa.ColumnElement[bool], ...]:
    return (evm_senders.c.chain_id == chain_id, evm_senders.c.sender == sender)


async def _select(conn: AsyncConnection, tree_size: int) -> AnchorTx | None:
    result = await conn.execute(sa.select(evm_anchors).where(evm_anchors.c.tree_size == tree_size))
    row = result.mappings().first()
    return AnchorTx.from_row(row) if row is not None else None
