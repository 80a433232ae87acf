"""The package keeps its layers: the backbone names no pipeline or interface, a pipeline no
other pipeline and nothing of the interfaces beyond the HTTP kit (and a provider only in its
up hook), a provider only the backbone, the client nothing else.

The layers are listed once, in :mod:`tests.support.layering`.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.support import layering

SRC = Path(__file__).resolve().parents[2] / "src" / "aigc_hub"

#: A small package in which each module below the first few breaks one rule (or obeys it).
PLANTED = {
    "__init__.py": "",
    "core/__init__.py": "",
    "core/ids.py": "",
    "interfaces/__init__.py": "",
    "interfaces/http/__init__.py": "",
    "interfaces/http/auth.py": "",
    "interfaces/http/kit.py": "from aigc_hub.interfaces.http import auth\n",
    "pipelines/__init__.py": "",
    "pipelines/alpha/__init__.py": "",
    "pipelines/alpha/events.py": "from aigc_hub.providers import sim\n",
    "pipelines/alpha/up.py": "from aigc_hub.providers.sim import app\n",
    "pipelines/alpha/routes.py": """\
        from aigc_hub.core import ids
        from aigc_hub.interfaces.http import kit
        from aigc_hub.interfaces.http.kit import Problem
        from aigc_hub.pipelines.alpha import events
        from . import events as same
        from aigc_hub.interfaces.http import auth
        from aigc_hub.pipelines.beta import models
        """,
    "pipelines/beta/__init__.py": "",
    "pipelines/beta/models.py": "from ..alpha import events\n",
    "runtime/__init__.py": "",
    "runtime/worker.py": """\
        from aigc_hub.core import ids
        from aigc_hub.pipelines.alpha import routes
        """,
    # The import cycle this test was written for: a type-only import plus a function-level
    # one, each invisible to a check of the module's top level.
    "settings.py": """\
        from typing import TYPE_CHECKING

        if TYPE_CHECKING:
            from aigc_hub.interfaces.http.auth import Limits


        def api_limits() -> None:
            import aigc_hub.interfaces.http.kit
        """,
    "store/__init__.py": "from aigc_hub import pipelines\n",
    "client/__init__.py": """\
        from aigc_hub.core import ids
        from aigc_hub.client import _core
        """,
    "client/_core.py": "",
    "testing/__init__.py": """\
        from aigc_hub.pipelines.alpha import events
        from aigc_hub.interfaces.http import kit
        """,
    "cli/__init__.py": """\
        from aigc_hub.pipelines.alpha import routes
        from aigc_hub.interfaces.http import auth
        from aigc_hub.client import _core
        from aigc_hub.testing import FakeProvider
        """,
    "providers/__init__.py": "",
    "providers/sim/__init__.py": """\
        from aigc_hub.core import ids
        from aigc_hub.providers.sim import app
        from aigc_hub.pipelines.alpha import events
        """,
    "providers/sim/app.py": "",
    "cli/common.py": "",
    "cli/kit.py": "from aigc_hub.cli import common\n",
    "pipelines/alpha/cli.py": """\
        from aigc_hub.cli import kit
        from aigc_hub.cli import common
        from aigc_hub.client import _core
        """,
    "newthing.py": "VALUE = 1\n",
}


def _plant(root: Path) -> Path:
    package = root / "aigc_hub"
    for name, text in PLANTED.items():
        path = package / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")
    return package


def test_src_has_no_import_across_the_layers() -> None:
    breaches = layering.check_tree(SRC)
    assert breaches == [], "\n".join(map(str, breaches))


def test_checker_reports_each_planted_bad_import_and_nothing_else(tmp_path: Path) -> None:
    breaches = layering.check_tree(_plant(tmp_path))

    found = {(b.path, b.line, b.imported) for b in breaches}
    assert found == {
        # a pipeline: another pipeline (absolute and relative), a non-kit interface module
        ("aigc_hub/pipelines/alpha/routes.py", 6, "aigc_hub.interfaces.http.auth"),
        ("aigc_hub/pipelines/alpha/routes.py", 7, "aigc_hub.pipelines.beta.models"),
        ("aigc_hub/pipelines/beta/models.py", 1, "aigc_hub.pipelines.alpha.events"),
        # the backbone: a pipeline, the pipelines namespace, interfaces (even the kit),
        # also under TYPE_CHECKING and inside a function
        ("aigc_hub/runtime/worker.py", 2, "aigc_hub.pipelines.alpha.routes"),
        ("aigc_hub/store/__init__.py", 1, "aigc_hub.pipelines"),
        ("aigc_hub/settings.py", 4, "aigc_hub.interfaces.http.auth"),
        ("aigc_hub/settings.py", 8, "aigc_hub.interfaces.http.kit"),
        # the client reaches into the server; test doubles meet the interfaces both ways
        ("aigc_hub/client/__init__.py", 1, "aigc_hub.core.ids"),
        ("aigc_hub/testing/__init__.py", 2, "aigc_hub.interfaces.http.kit"),
        ("aigc_hub/cli/__init__.py", 4, "aigc_hub.testing"),
        # a pipeline's CLI: past the CLI kit, or the client without it
        ("aigc_hub/pipelines/alpha/cli.py", 2, "aigc_hub.cli.common"),
        ("aigc_hub/pipelines/alpha/cli.py", 3, "aigc_hub.client._core"),
        # a provider outside the up hook; a provider (an outside system) imports a pipeline
        ("aigc_hub/pipelines/alpha/events.py", 1, "aigc_hub.providers.sim"),
        ("aigc_hub/providers/sim/__init__.py", 3, "aigc_hub.pipelines.alpha.events"),
        # a module no layer claims
        ("aigc_hub/newthing.py", 1, None),
    }
    rules = {(b.path, b.line): b.rule for b in breaches}
    assert rules["aigc_hub/pipelines/alpha/routes.py", 7] == (
        "pipeline 'alpha' imports pipeline 'beta'"
    )
    assert "HTTP kit" in rules["aigc_hub/pipelines/alpha/routes.py", 6]
    assert rules["aigc_hub/settings.py", 8] == "the backbone may not import the HTTP kit"
    assert "CLI kit" in rules["aigc_hub/pipelines/alpha/cli.py", 2]
    assert "up hook" in rules["aigc_hub/pipelines/alpha/events.py", 1]
    assert rules["aigc_hub/client/__init__.py", 1] == "the client may not import the backbone"


def test_every_listed_layer_member_exists_in_src() -> None:
    for name in layering.BACKBONE | layering.INTERFACES:
        assert (SRC / name).is_dir() or (SRC / f"{name}.py").is_file(), name
    for kit_name in (layering.HTTP_KIT, layering.CLI_KIT):
        kit = SRC.joinpath(*kit_name.split(".")[1:]).with_suffix(".py")
        assert kit.is_file(), kit


def test_pipelines_doc_names_every_layer_member_and_every_kit_name() -> None:
    from aigc_hub.cli import kit as cli_kit
    from aigc_hub.interfaces.http import kit as http_kit

    text = (SRC.parents[1] / "docs" / "pipelines.md").read_text(encoding="utf-8")
    for name in layering.BACKBONE | layering.INTERFACES:
        assert f"`{name}" in text, name
    assert f"`{layering.HTTP_KIT}`" in text
    assert f"`{layering.CLI_KIT}`" in text
    for name in [*http_kit.__all__, *cli_kit.__all__]:
        assert f"`{name}" in text, name


def test_settings_build_the_api_limits_without_loading_the_http_layer() -> None:
    # A fresh interpreter: this process has long imported the HTTP layer for other tests.
    probe = (
        "import sys; from aigc_hub.settings import Settings; "
        "limits = Settings().api_limits(); "
        "print(limits.max_body_bytes, sorted(m for m in sys.modules if "
        "m.startswith('aigc_hub.interfaces')))"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIGC_HUB_")}
    done = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split(" ", 1) == [str(1 << 20), "[]\n"]
