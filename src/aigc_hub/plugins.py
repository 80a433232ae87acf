"""Finding pipelines: the installed ones are Python entry points; a setting selects among them.

A package adds a pipeline with one line in its ``pyproject.toml``::

    [project.entry-points."aigc_hub.pipelines"]
    documents = "my_package.documents.pipeline:pipeline"

The hub's own pipelines are listed the same way. ``AIGC_HUB_PIPELINES`` selects what runs:
unset means every installed pipeline; otherwise a comma-separated list whose entries are
installed names (``generation``) or, for development and tests, ``module:attribute``
references to a :class:`~aigc_hub.pipeline.Pipeline`; empty means none.

Pipelines are imported by name at run time (never imported by this module), so the backbone
still depends on no pipeline.
"""

from __future__ import annotations

import importlib
from importlib import metadata
from typing import Final

from aigc_hub.core.errors import ConfigurationError
from aigc_hub.pipeline import PipelineBase

#: The entry-point group that lists installed pipelines.
ENTRY_POINT_GROUP: Final = "aigc_hub.pipelines"
#: The setting that selects pipelines (named in every error about it).
SETTING: Final = "AIGC_HUB_PIPELINES"


def installed() -> dict[str, metadata.EntryPoint]:
    """The installed pipelines' entry points by name, sorted by name."""
    found = {ep.name: ep for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)}
    return dict(sorted(found.items()))


def load(selection: str | None) -> list[PipelineBase]:
    """The pipelines ``selection`` names (None: every installed one), in order, each once.

    Raises ConfigurationError naming the setting and the first entry that cannot be loaded.
    """
    available = installed()
    entries = (
        list(available)
        if selection is None
        else [part.strip() for part in selection.split(",") if part.strip()]
    )
    pipelines: list[PipelineBase] = []
    for entry in entries:
        pipeline = _load_entry(entry, available)
        same_name = [p for p in pipelines if p.name == pipeline.name]
        if same_name and same_name[0] is not pipeline:
            raise _bad(entry, f"another pipeline is already named {pipeline.name!r}")
        if not same_name:
            pipelines.append(pipeline)
    return pipelines


def _load_entry(entry: str, available: dict[str, metadata.EntryPoint]) -> PipelineBase:
    if ":" not in entry:
        if entry not in available:
            known = ", ".join(available) or "none"
            raise _bad(entry, f"no installed pipeline has this name (installed: {known})")
        return _checked(entry, _import(entry, available[entry].value))
    return _checked(entry, _import(entry, entry), entry.partition(":")[2])


def _import(entry: str, reference: str) -> object:
    module_name, _, attribute = reference.partition(":")
    if not module_name or not attribute:
        raise _bad(entry, "expected 'module:attribute', e.g. 'my_package.pipeline:pipeline'")
    try:
        target: object = importlib.import_module(module_name)
    except Exception as exc:  # any import-time failure of a plugin is a configuration problem
        detail = f"{type(exc).__name__}: {' '.join(str(exc).split())}"
        raise _bad(entry, f"cannot import {module_name!r}: {detail}") from None
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise _bad(entry, f"module {module_name!r} has no attribute {attribute!r}") from None
    return target


def _checked(entry: str, target: object, attribute: str = "") -> PipelineBase:
    if not isinstance(target, PipelineBase):
        what = repr(attribute) if attribute else "it"
        raise _bad(entry, f"{what} is a {type(target).__name__}, not an aigc_hub Pipeline")
    if target.settings is not None:
        # One naming rule for every pipeline's environment: AIGC_HUB_<SHORT_NAME>_*.
        declared = target.settings.model_config.get("env_prefix", "")
        if declared.upper() != target.env_prefix:
            raise _bad(
                entry,
                f"its settings class {target.settings.__name__} reads env prefix "
                f"{declared!r}; pipeline {target.name!r} needs {target.env_prefix!r}",
            )
    return target


def _bad(entry: str, problem: str) -> ConfigurationError:
    return ConfigurationError(f"{SETTING} entry {entry!r}: {problem}")
