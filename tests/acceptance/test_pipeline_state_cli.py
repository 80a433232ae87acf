"""The hub builds each pipeline's state when it starts, so a process whose pipeline cannot be
built (generation naming an unknown provider) stops at once with one line, instead of
running and failing in every handler and scanner pass."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _aigc_hub(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    full_env = {
        **os.environ,
        "AIGC_HUB_DATA_DIR": str(tmp_path),
        "AIGC_HUB_LOG_LEVEL": "WARNING",
        "PYTHONPATH": str(ROOT),
        **env,
    }
    return subprocess.run(
        [sys.executable, "-m", "aigc_hub", *args],
        cwd=tmp_path,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=120,  # a bound for the old behaviour (scanning on, failing every pass)
    )


def test_scan_with_an_unknown_provider_exits_at_start_with_one_line(tmp_path: Path) -> None:
    upgraded = _aigc_hub(tmp_path, "db", "upgrade")
    assert upgraded.returncode == 0, upgraded.stderr
    result = _aigc_hub(
        tmp_path, "scan", AIGC_HUB_PIPELINES="generation", AIGC_HUB_GEN_PROVIDERS="local,bogus"
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert "unknown providers ['bogus']" in result.stderr
    assert "Traceback" not in result.stderr
