"""A fifth pipeline from the example folder: copied, renamed, one entry point, nothing else.

``examples/pipeline_template`` is copied to ``tmp_path`` and renamed ``memo`` → ``fifth``
(folder, file names and contents), as a newcomer does. Installing it would add one
entry-point line to the environment: ``pip install`` writes the package's
``[project.entry-points."aigc_hub.pipelines"]`` line into an ``entry_points.txt`` of a
``*.dist-info`` folder on ``sys.path``, which ``importlib.metadata`` reads. The test writes
exactly that (the line taken from the copy's ``pyproject.toml``, plus a minimal
``METADATA``) into a tmp folder and puts it and the copy on ``PYTHONPATH``: the same as an
install, without a pip run. Then the real CLI, in subprocesses, must show the new pipeline's
topic, its CLI group, its migration's table, and ``aigc-hub up`` must serve its route, run
its consumer group (a note gets stamped) and its scanner (the note gets archived).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "examples" / "pipeline_template"
NAME = "fifth"


def _copy_renamed(target: Path) -> Path:
    """Copy the template to ``target`` with every ``memo`` renamed ``fifth``; returns it."""
    shutil.copytree(
        TEMPLATE, target, ignore=shutil.ignore_patterns("__pycache__", ".*_cache", "*.egg-info")
    )
    for path in sorted(target.rglob("*"), key=lambda p: len(p.parts), reverse=True):
        if path.is_file():
            text = path.read_text()
            for old, new in (("memo", NAME), ("Memo", NAME.title()), ("MEMO", NAME.upper())):
                text = text.replace(old, new)
            path.write_text(text)
        if "memo" in path.name:
            path.rename(path.with_name(path.name.replace("memo", NAME)))
    return target


def _register_entry_point(package: Path, site: Path) -> None:
    """Write what installing ``package`` adds for the hub: its entry-point line."""
    project = tomllib.loads((package / "pyproject.toml").read_text())["project"]
    (line,) = project["entry-points"]["aigc_hub.pipelines"].items()
    dist_info = site / f"{project['name'].replace('-', '_')}-{project['version']}.dist-info"
    dist_info.mkdir(parents=True)
    (dist_info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n"
    )
    (dist_info / "entry_points.txt").write_text(f"[aigc_hub.pipelines]\n{line[0]} = {line[1]}\n")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Fifth:
    """The renamed copy, registered, and the environment every CLI run of this test uses."""

    def __init__(self, tmp_path: Path) -> None:
        package = _copy_renamed(tmp_path / "pipeline")
        _register_entry_point(package, tmp_path / "site")
        self.cwd = tmp_path
        self.env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(package), str(tmp_path / "site")]),
            "AIGC_HUB_DATA_DIR": str(tmp_path / "var"),
            "AIGC_HUB_LOG_LEVEL": "WARNING",
        }
        self.env.pop("AIGC_HUB_PIPELINES", None)  # unset: every installed pipeline
        self.env.pop("AIGC_HUB_DATABASE_URL", None)

    def cli(self, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        """Run ``aigc-hub args…``; asserts it exited 0."""
        done = subprocess.run(
            [sys.executable, "-m", "aigc_hub", *args],
            cwd=self.cwd,
            env={**self.env, **env},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return done

    @contextlib.contextmanager
    def up(self, **env: str) -> Iterator[str]:
        """``aigc-hub up`` until /readyz answers (bounded); yields the API URL; SIGINT after."""
        port = _free_port()
        proc = subprocess.Popen(
            [sys.executable, "-m", "aigc_hub", "up", "--port", str(port)],
            cwd=self.cwd,
            env={**self.env, **env},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        url = f"http://127.0.0.1:{port}"
        try:
            assert _until(lambda: _ready(url) or proc.poll() is not None)
            assert proc.poll() is None, proc.communicate()[0]
            yield url
        finally:
            proc.send_signal(signal.SIGINT)
            output, _ = proc.communicate(timeout=30)
        assert proc.returncode == 0, output


def _ready(url: str) -> bool:
    with contextlib.suppress(httpx.TransportError):
        return httpx.get(f"{url}/readyz", timeout=2).status_code == 200
    return False


def _until(condition: Callable[[], bool], timeout_s: float = 60.0) -> bool:
    """Poll ``condition`` until it is true or ``timeout_s`` passed."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return False


def test_a_copied_example_folder_plus_one_entry_point_is_a_working_fifth_pipeline(
    tmp_path: Path,
) -> None:
    fifth = Fifth(tmp_path)

    topics = fifth.cli("topics", "list").stdout
    assert re.search(r"fifth\.notes\s*│\s*3\s*│\s*7 d\s*│\s*reliable\s*│\s*fifth", topics)
    assert "generation.dispatch" in topics  # beside the built-in pipelines, not instead

    help_text = fifth.cli("fifth", "--help").stdout
    assert "notes stamped by a consumer" in help_text and "settings" in help_text
    shown = fifth.cli("fifth", "settings", AIGC_HUB_FIFTH_SCAN_EVERY_S="7").stdout
    assert "AIGC_HUB_FIFTH_SCAN_EVERY_S=7.0" in shown

    upgraded = fifth.cli("db", "upgrade").stdout
    assert "fifth_0001" in upgraded
    with contextlib.closing(sqlite3.connect(tmp_path / "var" / "hub.db")) as db:
        columns = {row[1] for row in db.execute("PRAGMA table_info(fifth_notes)")}
        versions = {row[0] for row in db.execute("SELECT version_num FROM alembic_version")}
    assert {"id", "stamped_at", "archived_at"} <= columns
    assert "fifth_0001" in versions

    created = fifth.cli("tenants", "create", "acme").stdout
    key = re.search(r"api key:\s+(\S+)", created)
    assert key is not None, created
    auth = {"Authorization": f"Bearer {key.group(1)}"}

    # Only the fifth pipeline runs, selected by its installed name; its scanner looks often.
    with fifth.up(
        AIGC_HUB_PIPELINES=NAME,
        AIGC_HUB_FIFTH_ARCHIVE_AFTER_S="0",
        AIGC_HUB_FIFTH_SCAN_EVERY_S="0.2",
        AIGC_HUB_SCANNER_LEASE_TTL_MS="1500",
    ) as url:
        written = httpx.post(f"{url}/v1/fifth/notes", json={"text": "hello"}, headers=auth)
        assert written.status_code == 201, written.text
        note_url = f"{url}/v1/fifth/notes/{written.json()['id']}"

        def note() -> dict[str, object]:
            response = httpx.get(note_url, headers=auth, timeout=5)
            assert response.status_code == 200, response.text
            body: dict[str, object] = response.json()
            return body

        assert _until(lambda: note()["stamped_at"] is not None), "the consumer group never ran"
        assert _until(lambda: note()["archived_at"] is not None), "the scanner never ran"
        assert note()["text"] == "hello"
        assert httpx.get(f"{url}/v1/fifth/notes/unknown", headers=auth).status_code == 404


@pytest.mark.postgres
def test_installing_the_fifth_pipeline_later_adds_its_branch_to_a_migrated_postgresql_database(
    tmp_path: Path, pg_url: str
) -> None:
    fifth = Fifth(tmp_path)
    before = fifth.cli("db", "current", AIGC_HUB_DATABASE_URL=pg_url).stdout
    assert "fifth_0001" in before.splitlines()[1]  # head: the branch is known
    assert "fifth_0001" not in before.splitlines()[0]  # current: not applied yet

    fifth.cli("db", "upgrade", AIGC_HUB_DATABASE_URL=pg_url)

    after = fifth.cli("db", "current", AIGC_HUB_DATABASE_URL=pg_url).stdout.splitlines()
    assert after[0].removeprefix("current:").strip() == after[1].removeprefix("head:").strip()
    assert after[0].endswith(",fifth_0001")
    engine = sa.create_engine(sa.make_url(pg_url).set(drivername="postgresql+psycopg"))
    try:
        assert "fifth_notes" in sa.inspect(engine).get_table_names()
    finally:
        engine.dispose()
