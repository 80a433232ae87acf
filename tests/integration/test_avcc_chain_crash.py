"""chain-svc SIGKILLed between submit and confirm: ``aigc-hub worker --group avcc-chain``
processes on the test's SQLite database and embedded log, the first killed by a failpoint
right after its chain transaction, the second finishing the job. Every work is anchored
exactly once: one leaf per work on the verifiable log, and on the EVM node one anchoring
transaction, whose hash the work's record carries."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from aigc_hub.pipelines.avcc.models import avcc_log_leaves, evm_anchors
from tests.support.avcc import apply, avcc_stack, noise_png, wait_status
from tests.support.evm_node import EvmNode, rpc, running_node
from tests.support.hubs import make_broker
from tests.support.workers import worker_process

ROOT = Path(__file__).resolve().parents[2]
GROUPS_BUT_CHAIN = ["avcc-review", "avcc-code", "avcc-embed"]


@pytest.fixture(scope="module")
def evm() -> Iterator[EvmNode]:
    with running_node() as node:
        yield node


def chain_worker(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    return worker_process("avcc-chain", env, log)


@pytest.mark.parametrize("chain", ["log", "evm"])
async def test_a_chain_worker_killed_between_submit_and_confirm_anchors_each_work_once(
    sqlite_url: str, tmp_path: Path, chain: str, request: pytest.FixtureRequest
) -> None:
    settings: dict[str, str] = {"chain": chain}
    if chain == "evm":
        node: EvmNode = request.getfixturevalue("evm")
        settings |= {"evm_rpc_url": node.url, "evm_private_key": node.private_keys[0]}
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "src"), str(ROOT)])),
        "AIGC_HUB_BROKER": "embedded",
        "AIGC_HUB_DATABASE_URL": sqlite_url,
        "AIGC_HUB_LOG_PATH": str(tmp_path / "log.db"),
        "AIGC_HUB_DATA_DIR": str(tmp_path / "worker"),
        "AIGC_HUB_PIPELINES": "avcc",
        "AIGC_HUB_AVCC_LOG_KEY_PATH": str(tmp_path / "log-key.pem"),
        **{f"AIGC_HUB_AVCC_{k.upper()}": v for k, v in settings.items()},
    }
    log = tmp_path / "worker.log"
    broker = make_broker("embedded", tmp_path)
    async with avcc_stack(
        sqlite_url, broker, tmp_path, groups=GROUPS_BUT_CHAIN, **settings
    ) as stack:
        sender = stack.avcc.chain.anchorer.sender if chain == "evm" else ""  # type: ignore[attr-defined]
        nonce_before = (
            int(rpc(node.url, "eth_getTransactionCount", [sender, "latest"]), 16)
            if chain == "evm"
            else 0
        )
        async with stack.client(await stack.tenant("studio")) as client:
            ids = [
                (await apply(client, noise_png(500 + i))).json()["avcc_record_id"] for i in range(3)
            ]
            doomed = chain_worker(
                env | {"AIGC_HUB_FAILPOINTS": "avcc.chain.after_submit=kill"}, log
            )
            try:
                # Waited in a thread: the hub in this process keeps running meanwhile.
                exited = await asyncio.to_thread(doomed.wait, 120)
                assert exited == -signal.SIGKILL, log.read_text()[-3000:]
            finally:
                if doomed.poll() is None:
                    doomed.kill()
            async with stack.hub.engine.connect() as conn:
                leaves_after_kill = (
                    await conn.execute(sa.select(sa.func.count()).select_from(avcc_log_leaves))
                ).scalar_one()
            assert leaves_after_kill >= 1  # the kill came after a submit
            survivor = chain_worker(env, log)
            try:
                coded = [await wait_status(client, i, "CODED", timeout_s=120) for i in ids]
            finally:
                survivor.send_signal(signal.SIGTERM)
                await asyncio.to_thread(survivor.wait, 30)
        async with stack.hub.engine.connect() as conn:
            leaf_rows = (
                await conn.execute(
                    sa.select(avcc_log_leaves.c.entry_key, avcc_log_leaves.c.leaf_index)
                )
            ).all()
            anchors = (await conn.execute(sa.select(evm_anchors))).all()
    leaves = {key: index for key, index in leaf_rows}
    # One leaf per work: the redelivered statements found theirs instead of appending again.
    assert sorted(leaves) == sorted(f"copyright_main:{i}" for i in ids)
    if chain == "evm":
        nonce_after = int(rpc(node.url, "eth_getTransactionCount", [sender, "latest"]), 16)
        # Every anchoring transaction the chain holds is one recorded row, each sent once.
        assert nonce_after - nonce_before == len(anchors) >= 1
        assert {c["chain"]["tx_hash"] for c in coded} <= {a.tx_hash for a in anchors}
        assert all(a.status == "CONFIRMED" for a in anchors)
    else:
        assert {c["chain"]["tx_hash"] for c in coded} == {c["chain"]["tx_hash"] for c in coded}
    assert len({c["avcc_code"] for c in coded}) == len(ids)
