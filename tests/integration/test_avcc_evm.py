"""avcc's EVM anchoring against a real py-evm node in its own process, on SQLite and PostgreSQL.

The node (``tests.support.evm_node``) mines each transaction at once, so no test waits for a
block. What the chain holds is read over its JSON-RPC with a plain client, never through the
code under test. Crashes are real: a child process kills itself with SIGKILL at a failpoint.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import signal
import socket
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from eth_account import Account
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine

from aigc_hub.core.errors import (
    ConfigurationError,
    Conflict,
    InvalidInput,
    PermanentError,
    RetryableError,
)
from aigc_hub.core.failpoints import Crash, Failpoints
from aigc_hub.pipelines.avcc.adapters.evm import (
    AFTER_BROADCAST,
    BEFORE_BROADCAST,
    EvmAnchorer,
    verify_anchor_on_chain,
)
from aigc_hub.pipelines.avcc.evm_anchors import AnchorStatus, decode_anchor, encode_anchor
from aigc_hub.pipelines.avcc.evm_tables import evm_anchors, evm_senders
from aigc_hub.store import engine as store_engine
from aigc_hub.store.tables import metadata
from tests.support.evm_node import EvmNode, rpc, running_node

#: A contract whose every call reverts: runtime code PUSH1 0 PUSH1 0 REVERT, and the init code
#: that returns it (PUSH5 <runtime> PUSH1 0 MSTORE PUSH1 5 PUSH1 27 RETURN).
REVERTING_INIT_CODE = bytes.fromhex("6460006000fd" + "600052" + "6005601bf3")


@pytest.fixture(scope="module")
def node() -> Iterator[EvmNode]:
    """One EVM node process for the module (tests read deltas of the chain, not totals)."""
    with running_node() as evm_node:
        yield evm_node


@pytest.fixture
async def engine(db: AsyncEngine) -> AsyncEngine:
    """The test database with the anchoring tables (the integrator's migration adds them)."""
    async with db.begin() as conn:
        await conn.run_sync(lambda sync: metadata.create_all(sync, [evm_anchors, evm_senders]))
    return db


@pytest.fixture
async def anchorers(
    engine: AsyncEngine, node: EvmNode
) -> AsyncIterator[Callable[..., EvmAnchorer]]:
    """Makes anchorers on the test's database and node (the first account's key unless
    told); closes them after the test."""
    made: list[EvmAnchorer] = []

    def make(**options: Any) -> EvmAnchorer:
        options.setdefault("engine", engine)
        options.setdefault("rpc_url", node.url)
        options.setdefault("private_key", node.private_keys[0])
        options.setdefault("poll_interval", 0.01)  # the node mines at once: poll briskly
        made.append(EvmAnchorer(**options))
        return made[-1]

    yield make
    for anchorer in made:
        await anchorer.aclose()


# --- reading the chain on the side ----------------------------------------------------------


def mined_nonce(node: EvmNode, address: str) -> int:
    """How many of ``address``'s transactions the chain holds."""
    return int(rpc(node.url, "eth_getTransactionCount", [address, "latest"]), 16)


def anchors_on_chain(node: EvmNode, root: bytes) -> list[str]:
    """Hashes of every mined transaction whose data anchors ``root``."""
    latest = int(rpc(node.url, "eth_blockNumber"), 16)
    found = []
    for number in range(latest + 1):
        block = rpc(node.url, "eth_getBlockByNumber", [hex(number), True])
        for tx in block["transactions"]:
            anchored = decode_anchor(bytes.fromhex(tx["input"].removeprefix("0x")))
            if anchored is not None and anchored[1] == root:
                found.append(tx["hash"])
    return found


def send_raw(node: EvmNode, key: str, **tx: Any) -> str:
    """Sign ``tx`` (EIP-1559 fees filled in) with ``key`` and broadcast it; its hash."""
    chain_id = int(rpc(node.url, "eth_chainId"), 16)
    fees = {"maxFeePerGas": 3 * 10**9, "maxPriorityFeePerGas": 10**9, "gas": 100_000}
    signed = Account.from_key(key).sign_transaction({"chainId": chain_id, "value": 0, **fees, **tx})
    return str(rpc(node.url, "eth_sendRawTransaction", [signed.raw_transaction.to_0x_hex()]))


def sync_engine(db_url: str) -> sa.Engine:
    """A blocking engine on the test's database, for reads from inside a failpoint."""
    url = make_url(store_engine.normalize_url(db_url))
    sync_driver = "sqlite" if url.get_backend_name() == "sqlite" else "postgresql+psycopg"
    return sa.create_engine(url.set(drivername=sync_driver))


def unused_loopback_url() -> str:
    """A URL on a loopback port nobody listens on: a node that is down."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


# --- a real crash: a child process that SIGKILLs itself at a failpoint ----------------------


def anchor_then_die(
    db_url: str, rpc_url: str, key: str, tree_size: int, root: bytes, at: str
) -> None:
    """In a child process: anchor, with SIGKILL armed at failpoint ``at``."""
    failpoints = Failpoints()
    failpoints.arm(at, lambda: os.kill(os.getpid(), signal.SIGKILL))

    async def run() -> None:
        engine = store_engine.create_engine(db_url)
        async with EvmAnchorer(engine, rpc_url, key, failpoints=failpoints) as anchorer:
            await anchorer.anchor(tree_size, root)

    asyncio.run(run())


async def crash_while_anchoring(
    db_url: str, node: EvmNode, tree_size: int, root: bytes, at: str
) -> None:
    """Run :func:`anchor_then_die` in a fresh (spawned) process; it must die by SIGKILL."""
    args = (db_url, node.url, node.private_keys[0], tree_size, root, at)
    process = multiprocessing.get_context("spawn").Process(target=anchor_then_die, args=args)
    process.start()
    await asyncio.to_thread(process.join, 60)
    assert process.exitcode == -signal.SIGKILL


# --- the payload ------------------------------------------------------------------------------


def test_the_payload_is_the_version_tag_the_size_and_the_root_and_decodes_back() -> None:
    root = bytes(range(32))
    data = encode_anchor(2**40 + 7, root)
    assert data == b"AVCC1" + (2**40 + 7).to_bytes(8, "big") + root
    assert decode_anchor(data) == (2**40 + 7, root)
    assert decode_anchor(b"AVCC2" + data[5:]) is None
    assert decode_anchor(data[:-1]) is None
    with pytest.raises(InvalidInput):
        encode_anchor(5, root[:31])
    with pytest.raises(InvalidInput):
        encode_anchor(-1, root)
    with pytest.raises(InvalidInput):
        encode_anchor(2**64, root)


# --- anchoring --------------------------------------------------------------------------------


async def test_an_anchor_is_one_mined_transaction_whose_data_carries_the_root(
    anchorers: Callable[..., EvmAnchorer], node: EvmNode
) -> None:
    anchorer = anchorers()
    root = os.urandom(32)
    before = mined_nonce(node, anchorer.sender)

    anchor = await anchorer.anchor(17, root)

    assert anchor.status is AnchorStatus.CONFIRMED
    assert anchor.block_number is not None and anchor.tx_hash.startswith("0x")
    assert (anchor.tree_size, anchor.root, anchor.sender) == (17, root, anchorer.sender)
    assert await anchorer.find(17) == anchor
    tx = rpc(node.url, "eth_getTransactionByHash", [anchor.tx_hash])
    assert bytes.fromhex(tx["input"][2:]) == encode_anchor(17, root)
    assert tx["from"] == tx["to"] == anchorer.sender
    assert int(tx["blockNumber"], 16) == anchor.block_number
    assert anchors_on_chain(node, root) == [anchor.tx_hash]
    assert mined_nonce(node, anchorer.sender) == before + 1
    assert await verify_anchor_on_chain(node.url, anchor.tx_hash, 17, root, sender=anchorer.sender)


async def test_verify_rejects_another_root_size_sender_or_an_unknown_transaction(
    anchorers: Callable[..., EvmAnchorer], node: EvmNode
) -> None:
    anchorer = anchorers()
    root = os.urandom(32)
    anchor = await anchorer.anchor(3, root)
    other_sender = Account.from_key(node.private_keys[1]).address

    assert not await verify_anchor_on_chain(node.url, anchor.tx_hash, 3, os.urandom(32))
    assert not await verify_anchor_on_chain(node.url, anchor.tx_hash, 4, root)
    assert not await verify_anchor_on_chain(node.url, anchor.tx_hash, 3, root, sender=other_sender)
    assert not await verify_anchor_on_chain(node.url, "0x" + "11" * 32, 3, root)


async def test_anchoring_a_tree_size_again_returns_its_transaction_and_sends_nothing(
    anchorers: Callable[..., EvmAnchorer], node: EvmNode
) -> None:
    anchorer = anchorers()
    root = os.urandom(32)
    first = await anchorer.anchor(8, root)
    sent = mined_nonce(node, anchorer.sender)

    again = await anchorer.anchor(8, root)
    with pytest.raises(Conflict):
        await anchorer.anchor(8, os.urandom(32))

    assert again == first
    assert mined_nonce(node, anchorer.sender) == sent
    assert anchors_on_chain(node, root) == [first.tx_hash]


async def test_invalid_input_is_refused_before_anything_is_recorded_or_sent(
    anchorers: Callable[..., EvmAnchorer], node: EvmNode
) -> None:
    anchorer = anchorers()
    before = mined_nonce(node, anchorer.sender)

    with pytest.raises(InvalidInput):
        await anchorer.anchor(9, b"not 32 bytes")

    assert await anchorer.find(9) is None
    assert mined_nonce(node, anchorer.sender) == before


async def test_concurrent_anchors_from_two_writers_get_distinct_nonces_and_one_tx_per_size(
    anchorers: Callable[..., EvmAnchorer], node: EvmNode, db_url: str, engine: AsyncEngine
) -> None:
    # Two engines stand for two processes: each has its own connections to the database.
    other_engine = store_engine.create_engine(db_url)
    try:
        first, second = anchorers(), anchorers(engine=other_engine)
        roots = {size: os.urandom(32) for size in range(100, 106)}
        before = mined_nonce(node, first.sender)

        # Every size from both writers at once: each must still go on chain exactly once.
        results = await asyncio.gather(
            *(
                writer.anchor(size, root)
                for size, root in roots.items()
                for writer in (first, second)
            )
        )
    finally:
        await other_engine.dispose()

    by_size = {anchor.tree_size: anchor for anchor in results}
    assert all(anchor.status is AnchorStatus.CONFIRMED for anchor in results)
    assert all(anchor == by_size[anchor.tree_size] for anchor in results)
    assert sorted(anchor.nonce for anchor in by_size.values()) == list(range(before, before + 6))
    assert mined_nonce(node, first.sender) == before + 6
    for size, root in roots.items():
        assert anchors_on_chain(node, root) == [by_size[size].tx_hash]


# --- crashes and reconciliation ---------------------------------------------------------------


async def test_a_crash_after_the_broadcast_is_confirmed_by_reconcile_with_the_same_tx(
    anchorers: Callable[..., EvmAnchorer], node: EvmNode, db_url: str
) -> None:
    anchorer = anchorers()
    root = os.urandom(32)
    before = mined_nonce(node, anchorer.sender)

    await crash_while_anchoring(db_url, node, 21, root, at=AFTER_BROADCAST)

    left = await anchorer.find(21)
    assert left is not None and left.status is AnchorStatus.SENT
    [reconciled] = await anchorer.reconcile()
    assert reconciled.status is AnchorStatus.CONFIRMED
    assert reconciled.tx_hash == left.tx_hash
    assert anchors_on_chain(node, root) == [left.tx_hash]
    assert mined_nonce(node, anchorer.sender) == before + 1
    assert await anchorer.reconcile() == []


async def test_a_crash_before_the_broadcast_leaves_the_signed_tx_and_reconcile_sends_it_once(
    anchorers: Callable[..., EvmAnchorer], node: EvmNode, db_url: str
) -> None:
    anchorer = anchorers()
    root = os.urandom(32)
    before = mined_nonce(node, anchorer.sender)

    await crash_while_anchoring(db_url, node, 22, root, at=BEFORE_BROADCAST)

    left = await anchorer.find(22)
    assert left is not None and left.status is AnchorStatus.SENT
    assert rpc(node.url, "eth_getTransactionByHash", [left.tx_hash]) is None
    assert mined_nonce(node, anchorer.sender) == before
    [reconciled] = await anchorer.reconcile()
    assert reconciled.status is AnchorStatus.CONFIRMED
    assert reconciled.tx_hash == left.tx_hash
    assert anchors_on_chain(node, root) == [left.tx_hash]
    assert mined_nonce(node, anchorer.sender) == before + 1


async def test_anchor_resumes_a_row_left_sent_instead_of_sending_a_new_transaction(
    anchorers: Callable[..., EvmAnchorer], node: EvmNode
) -> None:
    failpoints = Failpoints()
    failpoints.crash_at(BEFORE_BROADCAST)
    crashing = anchorers(failpoints=failpoints)
    root = os.urandom(32)
    with pytest.raises(Crash):
        await crashing.anchor(23, root)
    left = await crashing.find(23)
    assert left is not None

    resumed = await anchorers().anchor(23, root)

    assert resumed.status is AnchorStatus.CONFIRMED and resumed.tx_hash == left.tx_hash
    assert anchors_on_chain(node, root) == [left.tx_hash]


async def test_a_broadcast_refused_because_the_tx_is_already_mined_is_confirmed_not_an_error(
    anchorers: Callable[..., EvmAnchorer], node: EvmNode, db_url: str
) -> None:
    # Another process rebroadcasts the recorded bytes first: ours gets "nonce too low".
    reads = sync_engine(db_url)

    def someone_else_broadcasts_it() -> None:
        with reads.connect() as conn:
            raw = conn.execute(sa.select(evm_anchors.c.raw_tx)).scalar_one()
        rpc(node.url, "eth_sendRawTransaction", ["0x" + bytes(raw).hex()])

    failpoints = Failpoints()
    failpoints.arm(BEFORE_BROADCAST, someone_else_broadcasts_it)
    root = os.urandom(32)
    try:
        anchor = await anchorers(failpoints=failpoints).anchor(24, root)
    finally:
        reads.dispose()

    assert anchor.status is AnchorStatus.CONFIRMED
    assert anchors_on_chain(node, root) == [anchor.tx_hash]


async def test_a_recorded_nonce_taken_by_another_tx_is_failed_and_never_resent(
    anchorers: Callable[..., EvmAnchorer], node: EvmNode
) -> None:
    failpoints = Failpoints()
    failpoints.crash_at(BEFORE_BROADCAST)
    anchorer = anchorers(failpoints=failpoints)
    root = os.urandom(32)
    with pytest.raises(Crash):
        await anchorer.anchor(25, root)
    left = await anchorer.find(25)
    assert left is not None
    # Someone else uses the key and spends the recorded nonce on a plain transfer.
    send_raw(node, node.private_keys[0], nonce=left.nonce, to=anchorer.sender)

    [reconciled] = await anchorer.reconcile()

    assert reconciled.status is AnchorStatus.FAILED
    assert reconciled.failure is not None and "taken by another transaction" in reconciled.failure
    assert anchors_on_chain(node, root) == []
    assert mined_nonce(node, anchorer.sender) == left.nonce + 1
    with pytest.raises(PermanentError, match="taken by another transaction"):
        await anchorer.anchor(25, root)
    assert mined_nonce(node, anchorer.sender) == left.nonce + 1


# --- failures -----------------------------------------------------------------------------------


async def test_an_unreachable_node_is_a_retryable_error_and_records_nothing(
    anchorers: Callable[..., EvmAnchorer],
) -> None:
    down = unused_loopback_url()
    anchorer = anchorers(rpc_url=down)

    with pytest.raises(RetryableError, match="unreachable"):
        await anchorer.anchor(30, os.urandom(32))
    with pytest.raises(RetryableError, match="unreachable"):
        await anchorer.reconcile()
    with pytest.raises(RetryableError, match="unreachable"):
        await verify_anchor_on_chain(down, "0x" + "11" * 32, 30, os.urandom(32))
    assert await anchorer.find(30) is None


async def test_a_bad_key_negative_confirmations_or_another_chain_are_configuration_errors(
    anchorers: Callable[..., EvmAnchorer],
) -> None:
    with pytest.raises(ConfigurationError, match="not a valid") as bad_key:
        anchorers(private_key="0x1234")
    assert "1234" not in str(bad_key.value) and bad_key.value.__cause__ is None
    with pytest.raises(ConfigurationError, match="confirmations"):
        anchorers(confirmations=-1)
    anchorer = anchorers(chain_id=1)

    with pytest.raises(ConfigurationError, match="not 1"):
        await anchorer.anchor(31, os.urandom(32))
    assert await anchorer.find(31) is None


async def test_a_reverted_anchor_is_a_permanent_error_with_its_reason_and_is_not_resent(
    anchorers: Callable[..., EvmAnchorer], node: EvmNode
) -> None:
    deployer = node.private_keys[2]
    deployment = send_raw(
        node,
        deployer,
        nonce=mined_nonce(node, Account.from_key(deployer).address),
        data=REVERTING_INIT_CODE,
    )
    contract = rpc(node.url, "eth_getTransactionReceipt", [deployment])["contractAddress"]
    anchorer = anchorers(to=contract)
    before = mined_nonce(node, anchorer.sender)

    root = os.urandom(32)

    with pytest.raises(PermanentError, match="reverted"):
        await anchorer.anchor(32, root)
    with pytest.raises(PermanentError, match="reverted"):
        await anchorer.anchor(32, root)

    failed = await anchorer.find(32)
    assert failed is not None and failed.status is AnchorStatus.FAILED
    assert failed.block_number is not None
    assert mined_nonce(node, anchorer.sender) == before + 1


async def test_a_transaction_the_node_refuses_stays_sent_as_a_retryable_error(
    anchorers: Callable[..., EvmAnchorer], node: EvmNode
) -> None:
    # An account without funds: the node refuses its transaction, and nothing took the nonce.
    anchorer = anchorers(private_key="0x" + "ab" * 32)

    with pytest.raises(RetryableError, match="refused"):
        await anchorer.anchor(33, os.urandom(32))

    left = await anchorer.find(33)
    assert left is not None and left.status is AnchorStatus.SENT
    assert mined_nonce(node, anchorer.sender) == 0


async def test_a_receipt_short_of_its_confirmations_stays_sent_until_reconcile_sees_them(
    anchorers: Callable[..., EvmAnchorer], node: EvmNode
) -> None:
    anchorer = anchorers(confirmations=2, receipt_timeout=0.1, poll_interval=0.02)
    root = os.urandom(32)

    with pytest.raises(RetryableError, match="not confirmed"):
        await anchorer.anchor(34, root)
    left = await anchorer.find(34)
    assert left is not None and left.status is AnchorStatus.SENT
    rpc(node.url, "evm_mine", [2])
    [reconciled] = await anchorer.reconcile()

    assert reconciled.status is AnchorStatus.CONFIRMED and reconciled.tx_hash == left.tx_hash
    assert anchors_on_chain(node, root) == [left.tx_hash]
