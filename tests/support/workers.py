"""``aigc-hub worker --group G`` as a real process, for crash tests (SIGKILL, restart)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def worker_process(group: str, env: Mapping[str, str], log: Path) -> subprocess.Popen[bytes]:
    """Start a worker of consumer group ``group`` with ``env``; its output goes to ``log``."""
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "aigc_hub", "worker", "--group", group],
            env=dict(env),
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
