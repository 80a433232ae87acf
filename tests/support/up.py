"""`aigc-hub up` as a test runs it: the CLI in a subprocess, either profile's settings, the
process started on free ports and stopped with Ctrl-C (SIGINT), which must end it cleanly."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import httpx
import pytest

from tests.support.provider import free_port, require_ffmpeg
from tests.support.redis_dbs import private_redis_url

ROOT = Path(__file__).resolve().parents[2]
#: The two profiles every acceptance test of `up` runs on (scale: Kafka on Tansu,
#: PostgreSQL, Redis).
PROFILES = [
    "embedded",
    pytest.param("scale", marks=[pytest.mark.kafka, pytest.mark.postgres, pytest.mark.redis]),
]


def cli(env: Mapping[str, str], cwd: Path, *args: str) -> str:
    """``python -m aigc_hub ARGS``; its stdout (it must succeed)."""
    done = subprocess.run(
        [sys.executable, "-m", "aigc_hub", *args],
        cwd=cwd,
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def profile_env(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, str]:
    """Embedded defaults, or the scale profile: Kafka (Tansu) + PostgreSQL + Redis."""
    if request.param == "embedded":
        return {"AIGC_HUB_DATABASE_URL": f"sqlite:///{tmp_path / 'var' / 'hub.db'}"}
    from tests.integration.test_scale_profile import _pairs

    kafka = request.getfixturevalue("kafka_endpoint")
    return {
        "AIGC_HUB_BROKER": "kafka",
        "AIGC_HUB_KAFKA_BOOTSTRAP": kafka.bootstrap,
        "AIGC_HUB_KAFKA_CONSUMER_CONFIG": _pairs(kafka.consumer_settings),
        "AIGC_HUB_KAFKA_PRODUCER_CONFIG": _pairs(kafka.producer_settings),
        "AIGC_HUB_DATABASE_URL": request.getfixturevalue("pg_url"),
        "AIGC_HUB_REDIS_URL": private_redis_url("scale-hub"),
    }


@contextlib.contextmanager
def hub_up(
    profile: Mapping[str, str], tmp_path: Path, **settings: str
) -> Iterator[tuple[str, dict[str, str], list[str]]]:
    """`aigc-hub up` with the generation pipeline on ``profile`` plus ``settings`` (env);
    yields its URL, its environment and, once it stopped, its output (in the list)."""
    require_ffmpeg()
    api_port, provider_port = free_port(), free_port()
    env = {
        **os.environ,
        **profile,
        "AIGC_HUB_PIPELINES": "generation",
        "AIGC_HUB_API_PORT": str(api_port),
        "AIGC_HUB_GEN_LOCAL_PROVIDER_URL": f"http://127.0.0.1:{provider_port}",
        "AIGC_HUB_GEN_POLL_FIRST_S": "1",
        "AIGC_HUB_LOG_LEVEL": "WARNING",
        "PYTHONPATH": str(ROOT),
        **settings,
    }
    cli(env, tmp_path, "db", "upgrade")
    proc = subprocess.Popen(
        [sys.executable, "-m", "aigc_hub", "up"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    url = f"http://127.0.0.1:{api_port}"
    output: list[str] = []
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{url}/readyz", timeout=2, trust_env=False).status_code == 200:
                    break
            time.sleep(0.2)
        else:  # never ready: fail here, not later with a confusing connection error
            raise AssertionError(f"aigc-hub up not ready on {url} (exit code {proc.poll()})")
        yield url, env, output
    finally:
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
        output.append(out)
    assert proc.returncode == 0, out
