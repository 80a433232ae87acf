"""Each pipeline's own CLI sub-app, mounted on the root CLI as ``aigc-hub <alias> …``.

A pipeline names its Typer app in ``Pipeline.cli`` (``module:attribute``). Every installed
pipeline's group is mounted, plus those ``AIGC_HUB_PIPELINES`` adds by ``module:attribute``,
so ``aigc-hub gen …`` works whichever pipelines a hub process runs. A pipeline that cannot be
loaded gets no group here; the commands that run pipelines report why in one line.
"""

from __future__ import annotations

import importlib
import os

import typer

from aigc_hub import plugins
from aigc_hub.core.errors import ConfigurationError
from aigc_hub.pipeline import PipelineBase


def mount(app: typer.Typer) -> None:
    """Add every loadable pipeline's CLI sub-app to ``app`` under the pipeline's short name."""
    taken = {g.name for g in app.registered_groups} | {c.name for c in app.registered_commands}
    for pipeline in _loadable():
        if not pipeline.cli or pipeline.short_name in taken:
            continue
        sub_app = _typer_app(pipeline.cli)
        if sub_app is not None:
            app.add_typer(sub_app, name=pipeline.short_name)
            taken.add(pipeline.short_name)


def _loadable() -> list[PipelineBase]:
    # The raw variable, not Settings(): a bad unrelated setting must not break `--help`.
    selected = os.environ.get(plugins.SETTING) or ""
    references = [e.strip() for e in selected.split(",") if ":" in e]
    found: list[PipelineBase] = []
    for entry in [*plugins.installed(), *references]:
        try:
            found += plugins.load(entry)
        except ConfigurationError:
            continue
    return found


def _typer_app(reference: str) -> typer.Typer | None:
    module_name, _, attribute = reference.partition(":")
    try:
        target: object = importlib.import_module(module_name)
        for part in attribute.split("."):
            target = getattr(target, part)
    except Exception:  # a broken plugin's CLI must not break every other command
        return None
    return target if isinstance(target, typer.Typer) else None
