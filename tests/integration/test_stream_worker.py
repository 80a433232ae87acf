"""``aigc-hub worker --group`` runs a stream group in its own process, as it runs a handler
group: it drains the group's lag on the embedded log and stops cleanly on SIGTERM; an
unknown group is refused with the stream groups among the known ones."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from aigc_hub.cli import main
from aigc_hub.cli.common import ExitCode
from aigc_hub.messaging.embedded import EmbeddedBroker
from tests.support.hubs import hub_for, wait_until
from tests.support.streams import WORKER_GROUP, WORKER_TOPIC, lag_of, publish, worker_pipeline

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = 60.0


def _env(tmp_path: Path, sqlite_url: str) -> dict[str, str]:
    """The worker's environment: this checkout's code, the test database and embedded log."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIGC_HUB_")}
    return env | {
        "AIGC_HUB_BROKER": "embedded",
        "AIGC_HUB_DATABASE_URL": sqlite_url,
        "AIGC_HUB_LOG_PATH": str(tmp_path / "log.db"),
        "AIGC_HUB_DATA_DIR": str(tmp_path / "var"),
        "AIGC_HUB_PIPELINES": "tests.support.streams:worker_pipeline",
        "AIGC_HUB_LOG_LEVEL": "WARNING",
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)]),
        "NO_COLOR": "1",
    }


def _worker(tmp_path: Path, sqlite_url: str) -> subprocess.Popen[bytes]:
    """``aigc-hub worker --group WORKER_GROUP``, its output in ``tmp_path/worker.log``."""
    with (tmp_path / "worker.log").open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "aigc_hub", "worker", "--group", WORKER_GROUP],
            env=_env(tmp_path, sqlite_url),
            cwd=tmp_path,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


async def test_worker_runs_a_stream_group_until_its_lag_is_zero_and_stops_on_sigterm(
    sqlite_url: str, tmp_path: Path
) -> None:
    broker = EmbeddedBroker(tmp_path / "log.db")
    async with hub_for(sqlite_url, broker, [worker_pipeline]):
        await publish(broker, WORKER_TOPIC, 200)
        assert await lag_of(broker, WORKER_GROUP, WORKER_TOPIC) == 200
        worker = _worker(tmp_path, sqlite_url)
        try:

            async def drained() -> bool:
                assert worker.poll() is None, (tmp_path / "worker.log").read_text()
                return await lag_of(broker, WORKER_GROUP, WORKER_TOPIC) == 0

            await wait_until(drained, timeout=TIMEOUT_S)
            worker.send_signal(signal.SIGTERM)
            code = await asyncio.to_thread(worker.wait, TIMEOUT_S)
            assert code == 0, (tmp_path / "worker.log").read_text()
        finally:
            if worker.poll() is None:
                worker.kill()


def test_worker_refuses_an_unknown_group_and_lists_the_stream_groups(
    sqlite_url: str, tmp_path: Path
) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "aigc_hub", "worker", "--group", "no-such-group"],
        env=_env(tmp_path, sqlite_url),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    assert result.returncode == ExitCode.NOT_FOUND, result.stderr
    assert "no-such-group" in result.stderr and WORKER_GROUP in result.stderr


def test_worker_help_says_it_runs_stream_groups() -> None:
    result = CliRunner().invoke(main.app, ["worker", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "stream groups" in result.output
