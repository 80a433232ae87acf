"""The scale profile: Backbone I's exactly-once run on Kafka + PostgreSQL + Redis, with two
worker processes in one group and one of them SIGKILLed and restarted mid-run."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from aigc_hub.core.failpoints import Failpoints
from aigc_hub.testing.tansu import KafkaEndpoint
from tests.support import effects as fx
from tests.support.hubs import DoublePublisher, hub_for
from tests.support.redis_dbs import private_redis_url

ROOT = Path(__file__).resolve().parents[2]
N = 10_000
KEYS = 997


def _pairs(settings: object) -> str:
    return ",".join(f"{k}={v}" for k, v in dict(settings).items())  # type: ignore[call-overload]


def _worker(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "aigc_hub", "worker", "--group", fx.GROUP],
            env=env,
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


@pytest.mark.kafka
@pytest.mark.postgres
@pytest.mark.redis
@pytest.mark.slow
async def test_exactly_once_with_two_workers_and_a_sigkill(
    pg_url: str, kafka_endpoint: KafkaEndpoint, tmp_path: Path
) -> None:
    env = {
        **os.environ,
        "AIGC_HUB_BROKER": "kafka",
        "AIGC_HUB_KAFKA_BOOTSTRAP": kafka_endpoint.bootstrap,
        "AIGC_HUB_KAFKA_CONSUMER_CONFIG": _pairs(kafka_endpoint.consumer_settings),
        "AIGC_HUB_KAFKA_PRODUCER_CONFIG": _pairs(kafka_endpoint.producer_settings),
        "AIGC_HUB_DATABASE_URL": pg_url,
        "AIGC_HUB_REDIS_URL": private_redis_url("scale-hub"),
        "AIGC_HUB_DATA_DIR": str(tmp_path),
        "AIGC_HUB_PIPELINES": "tests.support.effects:pipeline",
        "AIGC_HUB_LOG_LEVEL": "WARNING",
        "PYTHONPATH": str(ROOT),
    }
    broker = kafka_endpoint.broker()
    async with hub_for(
        pg_url, DoublePublisher(broker), [fx.pipeline], failpoints=Failpoints()
    ) as hub:  # type: ignore[arg-type]
        log = tmp_path / "workers.log"
        workers = [_worker(env, log), _worker(env, log)]
        stop = asyncio.Event()
        relay = asyncio.create_task(hub.relay.run(stop))
        try:
            for start in range(0, N, 200):
                async with hub.transaction() as conn:
                    await conn.execute(
                        fx.facts.insert(),
                        [{"key": f"task-{i % KEYS}", "n": i} for i in range(start, start + 200)],
                    )
                    await hub.outbox.add(
                        conn, [fx.request(f"task-{i % KEYS}", i) for i in range(start, start + 200)]
                    )

            async def count() -> int:
                return len(await fx.effect_rows(hub.engine))

            deadline = time.monotonic() + 240
            while await count() < N // 3:
                assert time.monotonic() < deadline, log.read_text()[-3000:]
                await asyncio.sleep(0.2)
            os.kill(workers[0].pid, signal.SIGKILL)  # mid-run, no goodbye
            workers[0].wait(10)
            workers[0] = _worker(env, log)  # a supervisor restarts it
            while await count() < N:
                assert time.monotonic() < deadline, log.read_text()[-3000:]
                await asyncio.sleep(0.2)

            async def uncommitted() -> int:
                return sum(p.lag for p in await broker.lag(fx.GROUP, [fx.TOPIC]))

            # Every record (each event twice) handled and committed: late duplicates are in.
            while await uncommitted() > 0:
                assert time.monotonic() < deadline, log.read_text()[-3000:]
                await asyncio.sleep(0.2)

            rows = await fx.effect_rows(hub.engine)
            event_ids = [r[1] for r in rows]
            assert len(rows) == N, f"{len(rows) - len(set(event_ids))} duplicate effects"
            assert len(set(event_ids)) == N
            assert sorted(r[3] for r in rows) == list(range(N))
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
