"""``aigc-hub topics``: the topic catalog, seeded and declared by installed pipelines."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated

import typer
from rich.table import Table

from aigc_hub.cli import common
from aigc_hub.core.errors import ConfigurationError
from aigc_hub.messaging import catalog
from aigc_hub.pipeline import Pipeline

app = common.new_app("topics", "Inspect the topic catalog.")

_UNITS_MS = (("d", catalog.DAY_MS), ("h", 3_600_000), ("min", 60_000), ("s", 1000))


def merged_catalog(pipelines: Iterable[Pipeline]) -> catalog.TopicCatalog:
    """The seeded catalog plus every topic the pipelines declare; a clash names its pipeline."""
    merged = catalog.seeded_catalog()
    for pipeline in pipelines:
        for spec in pipeline.topics:
            try:
                merged.add(spec)
            except ValueError as exc:
                raise ConfigurationError(f"pipeline {pipeline.name!r}: {exc}") from None
    return merged


def human_retention(retention_ms: int | None) -> str:
    """Retention for people: ``forever``, ``7 d``, ``12 h``, ``30 min``, ``45 s`` or ``ms``."""
    if retention_ms is None:
        return "forever"
    for unit, size in _UNITS_MS:
        if retention_ms >= size and retention_ms % size == 0:
            return f"{retention_ms // size} {unit}"
    return f"{retention_ms} ms"


@app.command("list")
def list_topics(
    pipeline: Annotated[
        str | None,
        typer.Option("--pipeline", "-p", help="Only the topics of this pipeline."),
    ] = None,
) -> None:
    """List every topic: partitions, retention, delivery profile and owning pipeline."""
    specs = list(merged_catalog(common.installed_pipelines()))
    if pipeline is not None:
        known = sorted({s.pipeline for s in specs})
        specs = [s for s in specs if s.pipeline == pipeline]
        if not specs:
            common.fail(
                f"no topics for pipeline {pipeline!r} (known: {', '.join(known)})",
                common.ExitCode.NOT_FOUND,
            )
    table = Table()
    table.add_column("topic", no_wrap=True)
    table.add_column("partitions", justify="right")
    table.add_column("retention", justify="right")
    table.add_column("profile")
    table.add_column("pipeline")
    table.add_column("note")
    for spec in specs:
        table.add_row(
            spec.name,
            str(spec.partitions),
            human_retention(spec.retention_ms),
            spec.profile,
            spec.pipeline,
            spec.note,
        )
    out = common.console()
    out.print(table)
    out.print(f"{len(specs)} topics")
