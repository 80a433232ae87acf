"""The embedded profile's crash test: ``aigc-hub worker`` OS processes on one SQLite database
and the embedded log, one of them SIGKILLed mid-run and restarted; every event takes effect
exactly once (the twin of ``test_scale_profile`` on Kafka + PostgreSQL)."""

from __future__ import annotations

import asyncio
import functools
import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
import sqlalchemy as sa

from aigc_hub.messaging import embedded_schema as log_schema
from aigc_hub.messaging.embedded import EmbeddedBroker
from aigc_hub.store import engine as store_engine
from tests.support import effects as fx
from tests.support.hubs import DoublePublisher, hub_for

ROOT = Path(__file__).resolve().parents[2]
N = 3_000
KEYS = 997


def _worker(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "aigc_hub", "worker", "--group", fx.GROUP],
            env=env,
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def _tail(log: Path) -> str:
    return log.read_text(errors="replace")[-3000:]


async def _poll(
    what: str, check: Callable[[], Awaitable[bool]], *, log: Path, deadline: float
) -> None:
    """Poll ``check`` until true; past ``deadline`` fail with the workers' log tail."""
    while not await check():
        assert time.monotonic() < deadline, f"{what} not reached:\n{_tail(log)}"
        await asyncio.sleep(0.05)


async def _owners(log_path: Path) -> dict[str, list[int]]:
    """Per live owner of a partition of the effects group: its partitions' ids, from the log."""
    engine = store_engine.create_engine(f"sqlite:///{log_path}")
    gp = log_schema.group_partitions
    now_ms = int(time.time() * 1000)
    try:
        async with engine.connect() as conn:
            rows = await conn.execute(
                sa.select(gp.c.owner, gp.c.tp_id).where(
                    gp.c.grp == fx.GROUP, gp.c.owner.is_not(None), gp.c.lease_expires_ms > now_ms
                )
            )
            owners: dict[str, list[int]] = {}
            for owner, tp_id in rows:
                owners.setdefault(owner, []).append(tp_id)
            return owners
    finally:
        await engine.dispose()


async def _pending(log_path: Path, tp_ids: list[int]) -> int:
    """Records of ``tp_ids`` not yet committed by the effects group."""
    engine = store_engine.create_engine(f"sqlite:///{log_path}")
    p, gp = log_schema.partitions, log_schema.group_partitions
    try:
        async with engine.connect() as conn:
            behind = await conn.execute(
                sa.select(sa.func.sum(p.c.next_offset - gp.c.committed))
                .join_from(p, gp, gp.c.tp_id == p.c.id)
                .where(gp.c.grp == fx.GROUP, p.c.id.in_(tp_ids))
            )
            return int(behind.scalar_one() or 0)
    finally:
        await engine.dispose()


@pytest.mark.slow
async def test_embedded_workers_one_sigkilled_mid_run_every_effect_exactly_once(
    sqlite_url: str, tmp_path: Path
) -> None:
    log_path = tmp_path / "log.db"
    env = {
        **os.environ,
        "AIGC_HUB_BROKER": "embedded",
        "AIGC_HUB_DATABASE_URL": sqlite_url,
        "AIGC_HUB_LOG_PATH": str(log_path),
        "AIGC_HUB_DATA_DIR": str(tmp_path),
        "AIGC_HUB_PIPELINES": "tests.support.effects:pipeline",
        "AIGC_HUB_LOG_LEVEL": "WARNING",
        "PYTHONPATH": str(ROOT),
    }
    inner = EmbeddedBroker(log_path)
    out = tmp_path / "workers.log"
    async with hub_for(sqlite_url, DoublePublisher(inner), [fx.pipeline]) as hub:  # type: ignore[arg-type]
        for start in range(0, N, 200):
            async with hub.transaction() as conn:
                await hub.outbox.add(
                    conn, [fx.request(f"task-{i % KEYS}", i) for i in range(start, start + 200)]
                )

        async def effect_count() -> int:
            return len(await fx.effect_rows(hub.engine))

        wait = functools.partial(_poll, log=out, deadline=time.monotonic() + 90)
        # The doomed worker joins alone and takes every partition, so its member id is known.
        workers = [_worker(env, out)]
        await wait("first worker owns partitions", lambda: _owners_count(log_path, 1))
        (doomed,) = await _owners(log_path)
        workers.append(_worker(env, out))
        await wait("both workers own partitions", lambda: _owners_count(log_path, 2))

        stop = asyncio.Event()
        relay = asyncio.create_task(hub.relay.run(stop))
        try:

            async def a_third_done() -> bool:
                return await effect_count() >= N // 3

            await wait("a third of the effects", a_third_done)
            held = (await _owners(log_path))[doomed]
            # Mid-run: the doomed worker still has uncommitted records on its partitions.
            assert await _pending(log_path, held) > 0
            os.kill(workers[0].pid, signal.SIGKILL)  # no goodbye: its leases just run out
            workers[0].wait(10)
            assert workers[0].returncode == -signal.SIGKILL
            assert await effect_count() < N
            workers[0] = _worker(env, out)  # a supervisor restarts it

            async def all_consumed() -> bool:
                # Every record (each event twice) handled and committed: late duplicates
                # would have written their rows by then.
                lag = await inner.lag(fx.GROUP, [fx.TOPIC])
                return sum(p.end_offset for p in lag) == 2 * N and sum(p.lag for p in lag) == 0

            await wait("every record consumed", all_consumed)
        finally:
            stop.set()
            await relay
            for w in workers:
                if w.poll() is None:
                    w.send_signal(signal.SIGTERM)
            for w in workers:
                try:
                    w.wait(30)
                except subprocess.TimeoutExpired:
                    w.kill()

        rows = await fx.effect_rows(hub.engine)
        distinct = len({r[1] for r in rows})
        assert distinct == N, f"{N - distinct} lost effects"
        assert len(rows) == N, f"{len(rows) - distinct} duplicate effects"
        assert sorted(r[3] for r in rows) == list(range(N))
        print(f"{N} events, {2 * N} records, one worker SIGKILLed: {len(rows)} effects")


async def _owners_count(log_path: Path, want: int) -> bool:
    return len(await _owners(log_path)) == want
