"""`aigc-hub up` on embedded defaults: migrates, serves the API, runs the hub, stops on SIGINT."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class RunningUp:
    """An ``aigc-hub up`` process serving on ``port``; ``output`` is filled once it stopped."""

    port: int
    output: str = ""


@contextlib.contextmanager
def _up(tmp_path: Path, *, every_pipeline: bool = False, **env: str) -> Iterator[RunningUp]:
    """Start ``aigc-hub up`` in ``tmp_path``, wait until /readyz answers 200 (bounded), and
    stop it with SIGINT on the way out, asserting it exited 0. The tests run hubs without
    pipelines unless told; ``every_pipeline``: as a user runs it, with its defaults."""
    running = RunningUp(_free_port())
    inherited = {
        k: v for k, v in os.environ.items() if not (every_pipeline and k == "AIGC_HUB_PIPELINES")
    }
    full_env = {
        **inherited,
        "AIGC_HUB_API_PORT": str(running.port),
        "AIGC_HUB_LOG_LEVEL": "WARNING",
        "PYTHONPATH": str(ROOT),
        **env,
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "aigc_hub", "up"],
        cwd=tmp_path,
        env=full_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        ready = False
        while not ready and time.monotonic() < deadline and proc.poll() is None:
            with contextlib.suppress(httpx.TransportError):
                response = httpx.get(f"http://127.0.0.1:{running.port}/readyz", timeout=2)
                ready = response.status_code == 200
            time.sleep(0 if ready else 0.2)
        assert ready, "aigc-hub up never became ready"
        yield running
    finally:
        proc.send_signal(signal.SIGINT)
        running.output, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, running.output


def test_up_serves_a_ready_api_and_stops_cleanly(tmp_path: Path) -> None:
    with _up(tmp_path) as up:
        assert httpx.get(f"http://127.0.0.1:{up.port}/healthz", timeout=2).status_code == 200
        assert (tmp_path / "var" / "hub.db").exists() and (tmp_path / "var" / "log.db").exists()
    assert "data lives under" in up.output


def test_up_with_every_pipeline_starts_each_and_serves_their_routes(tmp_path: Path) -> None:
    # As `make up` runs it: no AIGC_HUB_PIPELINES, so every installed pipeline's state is
    # built and every pipeline's `up` hook runs around the hub's start.
    provider = f"http://127.0.0.1:{_free_port()}"
    transcoder = f"127.0.0.1:{_free_port()}"
    with _up(
        tmp_path,
        every_pipeline=True,
        AIGC_HUB_GEN_LOCAL_PROVIDER_URL=provider,
        AIGC_HUB_VISTACK_TRANSCODER_ADDRESS=transcoder,
    ) as up:
        base = f"http://127.0.0.1:{up.port}/v1"
        answers = {
            path: httpx.get(base + path, timeout=5).status_code
            for path in ("/knowledge-bases/kb/documents", "/generation-tasks", "/vistack/videos")
        }
        # vistack's hook serves the transcoder the workers call: it answers gRPC there.
        with socket.create_connection(("127.0.0.1", int(transcoder.rsplit(":", 1)[1])), 5):
            pass
    assert answers == dict.fromkeys(answers, 401), answers  # there, and asking for a key
    assert f"vistack transcoder on {transcoder}" in up.output, up.output
    assert "Traceback" not in up.output


def test_up_says_in_one_line_at_start_that_a_media_tool_is_missing(tmp_path: Path) -> None:
    with _up(
        tmp_path,
        AIGC_HUB_PIPELINES="generation",
        AIGC_HUB_GEN_LOCAL_PROVIDER_URL=f"http://127.0.0.1:{_free_port()}",
        AIGC_HUB_FFPROBE=str(tmp_path / "no-ffprobe-here"),
    ) as up:
        pass
    warnings = [line for line in up.output.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1, up.output
    assert "ffprobe is not an executable at AIGC_HUB_FFPROBE=" in warnings[0]
    assert "ffmpeg" not in warnings[0].split("ffprobe", 1)[0]  # ffmpeg itself was found


def test_up_with_a_garbage_webhook_secret_stops_with_one_line_naming_the_setting(
    tmp_path: Path,
) -> None:
    env = {
        **os.environ,
        "AIGC_HUB_API_PORT": str(_free_port()),
        "AIGC_HUB_LOG_LEVEL": "WARNING",
        "AIGC_HUB_PIPELINES": "generation",
        "AIGC_HUB_GEN_LOCAL_WEBHOOK_SECRETS": "whsec_not base64!",
        "PYTHONPATH": str(ROOT),
    }
    done = subprocess.run(
        [sys.executable, "-m", "aigc_hub", "up"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,  # it stops at once; the bound only turns a hang into a failure
    )
    assert done.returncode == 2, done.stderr  # the documented usage-error exit code
    (line,) = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert "AIGC_HUB_GEN_LOCAL_WEBHOOK_SECRETS: secret 1:" in line
    assert "Traceback" not in done.stderr and "not base64!" not in done.stderr
