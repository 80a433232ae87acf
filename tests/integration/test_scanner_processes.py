"""Scanner leadership across processes: one leader; SIGKILL it and a peer takes over."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from aigc_hub.core.clock import SystemClock
from aigc_hub.reliability.leases import DatabaseLeases
from aigc_hub.store import engine as store_engine
from tests.support.redis_dbs import private_redis_url

ROOT = Path(__file__).resolve().parents[2]
TTL_MS = 2_000


def _scan_process(env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "aigc_hub", "scan"],
        env=env,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


@pytest.fixture(params=["database-leases", pytest.param("redis-leases", marks=pytest.mark.redis)])
def leases_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def scan_env(sqlite_url: str, tmp_path: Path, leases_kind: str) -> Iterator[dict[str, str]]:
    env = {
        **os.environ,
        "AIGC_HUB_DATABASE_URL": sqlite_url,
        "AIGC_HUB_DATA_DIR": str(tmp_path),
        "AIGC_HUB_SCANNER_LEASE_TTL_MS": str(TTL_MS),
        "AIGC_HUB_LAG_INTERVAL_S": "1",
        "PYTHONPATH": str(ROOT),
    }
    if leases_kind == "redis-leases":
        env["AIGC_HUB_REDIS_URL"] = private_redis_url("scanner-leases")
    yield env


async def _holder(env: dict[str, str]) -> str | None:
    if "AIGC_HUB_REDIS_URL" in env:
        from aigc_hub.cache.redis import RedisCache

        async with RedisCache.from_url(env["AIGC_HUB_REDIS_URL"]) as cache:
            held = await cache.leases.holder("scanner:outbox-age")
        return held[0] if held else None
    engine = store_engine.create_engine(env["AIGC_HUB_DATABASE_URL"])
    try:
        held = await DatabaseLeases(engine, SystemClock()).holder("scanner:outbox-age")
    finally:
        await engine.dispose()
    return held[0] if held else None


async def _wait_holder(
    env: dict[str, str], *, other_than: str | None, timeout: float
) -> tuple[str, float]:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        holder = await _holder(env)
        if holder is not None and holder != other_than:
            return holder, time.monotonic() - started
        time.sleep(0.05)  # noqa: ASYNC251 - polling another process, nothing to await here
    raise TimeoutError("no new scanner leader")


@pytest.mark.slow
async def test_one_leader_and_a_peer_takes_over_after_sigkill(scan_env: dict[str, str]) -> None:
    procs = [_scan_process(scan_env), _scan_process(scan_env)]
    try:
        first, _ = await _wait_holder(scan_env, other_than=None, timeout=30)
        pid = int(first.split(":")[1])
        assert pid in {p.pid for p in procs}
        leader = next(p for p in procs if p.pid == pid)
        follower = next(p for p in procs if p.pid != pid)
        time.sleep(TTL_MS / 1000)  # noqa: ASYNC251 - leadership stays put while both live
        assert await _holder(scan_env) == first

        os.kill(leader.pid, signal.SIGKILL)
        leader.wait(10)
        second, took = await _wait_holder(scan_env, other_than=first, timeout=30)
        assert int(second.split(":")[1]) == follower.pid
        # the lease runs out at most one TTL after the kill; the follower asks every TTL/3
        assert took <= (TTL_MS / 1000) * (1 + 1 / 3) + 0.5, took
        print(f"takeover after SIGKILL: {took:.2f} s (lease TTL {TTL_MS / 1000:.1f} s)")
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
