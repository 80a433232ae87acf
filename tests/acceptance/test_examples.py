"""The numbered examples run as a user would run them, and print what they promise."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.mark.parametrize(
    ("script", "expected"),
    [
        ("01_outbox_to_effect.py", "effects: ['你好, 世界!']"),
        ("02_dead_letter_and_replay.py", "replayed; effects: 1"),
    ],
)
def test_example_runs(script: str, expected: str) -> None:
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / script)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert expected in result.stdout
