"""`aigc-hub up` on embedded defaults: migrates, serves the API, runs the hub, stops on SIGINT."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_up_serves_a_ready_api_and_stops_cleanly(tmp_path: Path) -> None:
    port = _free_port()
    env = {
        **os.environ,
        "AIGC_HUB_API_PORT": str(port),
        "AIGC_HUB_LOG_LEVEL": "WARNING",
        "PYTHONPATH": str(ROOT),
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "aigc_hub", "up"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        ready = None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                ready = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2)
                if ready.status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        assert ready is not None and ready.status_code == 200, ready and ready.text
        assert httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200
        assert (tmp_path / "var" / "hub.db").exists() and (tmp_path / "var" / "log.db").exists()
    finally:
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out
    assert "data lives under" in out


def test_up_says_in_one_line_at_start_that_a_media_tool_is_missing(tmp_path: Path) -> None:
    port, provider_port = _free_port(), _free_port()
    env = {
        **os.environ,
        "AIGC_HUB_BUILTIN_PIPELINES": "generation",
        "AIGC_HUB_API_PORT": str(port),
        "AIGC_HUB_GEN_LOCAL_PROVIDER_URL": f"http://127.0.0.1:{provider_port}",
        "AIGC_HUB_FFPROBE": str(tmp_path / "no-ffprobe-here"),
        "AIGC_HUB_LOG_LEVEL": "WARNING",
        "PYTHONPATH": str(ROOT),
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "aigc_hub", "up"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        ready = False
        while not ready and time.monotonic() < deadline:
            with contextlib.suppress(httpx.TransportError):
                ready = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200
            time.sleep(0 if ready else 0.2)
        assert ready
    finally:
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out
    warnings = [line for line in out.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1, out
    assert "ffprobe is not an executable at AIGC_HUB_FFPROBE=" in warnings[0]
    assert "ffmpeg" not in warnings[0].split("ffprobe", 1)[0]  # ffmpeg itself was found


def test_up_with_a_garbage_webhook_secret_stops_with_one_line_naming_the_setting(
    tmp_path: Path,
) -> None:
    env = {
        **os.environ,
        "AIGC_HUB_API_PORT": str(_free_port()),
        "AIGC_HUB_LOG_LEVEL": "WARNING",
        "AIGC_HUB_BUILTIN_PIPELINES": "generation",
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
