"""``aigc-hub schemas``: check and export the event payload schemas of installed pipelines."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from aigc_hub.cli import common
from aigc_hub.schemas import compat, export
from aigc_hub.schemas.registry import SchemaRegistry

app = common.new_app(
    "schemas", "Check and export the event payload schemas of installed pipelines."
)


def installed_registry() -> SchemaRegistry:
    """The schema registry of every installed pipeline (see ``AIGC_HUB_PIPELINES``)."""
    pipelines = common.installed_pipelines()
    if not pipelines:
        common.error_console().print(
            f"[yellow]note:[/] no pipelines installed; set {common.PIPELINES_ENV}="
            "module:attribute,..."
        )
    return SchemaRegistry.from_pipelines(pipelines)


@app.command("check")
def check() -> None:
    """Check that each event type's versions are 1, 2, 3… and only add fields with defaults.

    Exits with code 6 (INCOMPATIBLE) when any rule is broken, after listing the problems.
    """
    registry = installed_registry()
    problems = compat.check(registry)
    if problems:
        table = Table()
        for column in ("event type", "versions", "field", "problem"):
            table.add_column(column, no_wrap=column != "problem")
        for p in problems:
            old = f"v{p.old_version}" if p.old_version is not None else "-"
            table.add_row(p.event_type, f"{old} → v{p.new_version}", p.field or "", p.problem)
        common.console().print(table)
        common.fail(
            f"{len(problems)} compatibility problem(s) in {len(registry.names())} event types",
            common.ExitCode.INCOMPATIBLE,
        )
    common.console().print(
        f"{len(registry.names())} event types, {len(registry)} versions: compatible"
    )


@app.command("export")
def export_schemas(
    directory: Annotated[
        Path,
        typer.Argument(
            help="Directory to write into (created if missing).", metavar="DIR", file_okay=False
        ),
    ],
) -> None:
    """Write one JSON Schema per event type and version, as DIR/<type>.v<version>.json."""
    paths = export.export(installed_registry(), directory)
    common.console().print(f"wrote {len(paths)} schema files to {directory}", markup=False)
