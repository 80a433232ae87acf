"""`aigc-hub api --workers 2` on SQLite: two processes serve creates on one socket, each key
creates one task, retries replay, and Ctrl-C stops them all."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from aigc_hub import tenancy
from aigc_hub.bootstrap import Hub
from aigc_hub.hub_config import HubConfig
from aigc_hub.messaging.memory import MemoryBroker
from aigc_hub.pipelines.generation import services
from aigc_hub.store import engine as store_engine
from aigc_hub.store import migrate

ROOT = Path(__file__).resolve().parents[2]
BODY = {"model": "local-v1", "prompt": "two workers", "duration_s": 2, "resolution": "320x180"}
CREATES = 40


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _tenant_with_credits(url: str) -> str:
    hub = Hub(HubConfig(engine=store_engine.create_engine(url), broker=MemoryBroker()))
    try:
        tenant, key = await tenancy.create_tenant(hub.engine, "acme")
        await services.grant_credits(hub, tenant_id=tenant.id, amount=10_000, grant_id="start")
    finally:
        await hub.close()
    return key


def _workers_of(pid: int) -> list[int]:
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return [
        int(c)
        for c in children
        if b"multiprocessing" in Path(f"/proc/{c}/cmdline").read_bytes()
        and b"resource_tracker" not in Path(f"/proc/{c}/cmdline").read_bytes()
    ]


async def _create_twice(base: str, key: str) -> list[tuple[httpx.Response, httpx.Response]]:
    async def one(client: httpx.AsyncClient, i: int) -> tuple[httpx.Response, httpx.Response]:
        headers = {"Authorization": f"Bearer {key}", "Idempotency-Key": f"k-{i}"}
        first = await client.post("/v1/generation-tasks", json=BODY, headers=headers)
        again = await client.post("/v1/generation-tasks", json=BODY, headers=headers)
        return first, again

    # One connection per create: the kernel spreads new connections over the workers.
    async def fresh(i: int) -> tuple[httpx.Response, httpx.Response]:
        async with httpx.AsyncClient(base_url=base, timeout=30, trust_env=False) as client:
            return await one(client, i)

    return await asyncio.gather(*(fresh(i) for i in range(CREATES)))


def test_two_workers_serve_creates_and_stop_on_ctrl_c(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'var' / 'hub.db'}"
    (tmp_path / "var").mkdir()
    migrate.upgrade(url)
    key = asyncio.run(_tenant_with_credits(url))
    port = _free_port()
    env = {
        **os.environ,
        "AIGC_HUB_DATA_DIR": str(tmp_path / "var"),
        "AIGC_HUB_PIPELINES": "generation",
        "AIGC_HUB_GEN_RUN_LOCAL_PROVIDER": "false",
        "AIGC_HUB_API_RATE_PER_S": "1000",
        "AIGC_HUB_API_BURST": "1000",
        "AIGC_HUB_LOG_LEVEL": "WARNING",
        "PYTHONPATH": str(ROOT / "src"),
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "aigc_hub", "api", "--port", str(port), "--workers", "2"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        ready = False
        while not ready and time.monotonic() < deadline and proc.poll() is None:
            with contextlib.suppress(httpx.TransportError):
                ready = httpx.get(f"{base}/readyz", timeout=2, trust_env=False).is_success
            time.sleep(0 if ready else 0.2)
        assert ready, "aigc-hub api --workers 2 never became ready"
        assert len(_workers_of(proc.pid)) == 2
        try:
            answers = asyncio.run(_create_twice(base, key))
        except httpx.TransportError as exc:
            proc.send_signal(signal.SIGINT)
            raise AssertionError(f"{exc!r}; the servers said:\n{proc.communicate(30)[0]}") from exc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        output, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, output
    assert all(first.status_code == 201 for first, _ in answers), output
    assert all(again.content == first.content for first, again in answers)
    assert all(again.headers["idempotent-replayed"] == "true" for _, again in answers)
    assert len({first.json()["task_id"] for first, _ in answers}) == CREATES
