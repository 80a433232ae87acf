"""`aigc-hub up` on embedded defaults: migrates, serves the API, runs the hub, stops on SIGINT."""

from __future__ import annotations

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
