"""``aigc-hub topics``: the topic catalog: the backbone's topics and the installed pipelines'.

``topics apply`` provisions the catalog on a Kafka cluster (``--dry-run`` only reports): it
creates missing topics and reports existing ones that differ (it never changes them: Kafka
cannot shrink a topic, and more partitions would move keys), exiting 4 when any differs and
5 when the cluster does not answer.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from aigc_hub.cli import common
from aigc_hub.core.errors import ConfigurationError
from aigc_hub.messaging import catalog
from aigc_hub.pipeline import PipelineBase

if TYPE_CHECKING:
    from aigc_hub.messaging.kafka import TopicDifference, TopicStatus

app = common.new_app("topics", "Inspect the topic catalog; provision it on Kafka.")

#: The environment twin of ``--bootstrap`` (the same variable as the hub's settings).
BOOTSTRAP_ENV = "AIGC_HUB_KAFKA_BOOTSTRAP"

_UNITS_MS = (("d", catalog.DAY_MS), ("h", 3_600_000), ("min", 60_000), ("s", 1000))


def merged_catalog(pipelines: Iterable[PipelineBase]) -> catalog.TopicCatalog:
    """The backbone's topics plus every topic the pipelines declare; a clash names its pipeline."""
    merged = catalog.backbone_catalog()
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


@app.command("apply")
def apply_topics(
    bootstrap: Annotated[
        str,
        typer.Option(
            "--bootstrap",
            envvar=BOOTSTRAP_ENV,
            metavar="HOST:PORT",
            help="Kafka bootstrap servers (comma separated).",
        ),
    ] = "127.0.0.1:9092",
    timeout: Annotated[
        float,
        typer.Option(
            "--timeout",
            envvar="AIGC_HUB_KAFKA_TIMEOUT",
            min=0.1,
            help="Seconds to wait for the cluster to answer.",
        ),
    ] = 10.0,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Only report: list missing topics, create none.")
    ] = False,
) -> None:
    """Create missing catalog topics on Kafka; report (exit 4), never alter, those that differ."""
    try:
        from aigc_hub.messaging import kafka
    except ImportError as exc:
        common.fail(str(exc), common.ExitCode.CONFIGURATION)
    specs = list(merged_catalog(common.installed_pipelines()))
    # librdkafka reports every failed connection attempt; the one error line below says it all.
    client_log = logging.getLogger(kafka.LIBRDKAFKA_LOGGER)
    level = client_log.level
    client_log.setLevel(logging.CRITICAL)
    try:
        statuses = common.run_async(_apply(bootstrap, timeout, specs, dry_run=dry_run))
    finally:
        client_log.setLevel(level)
    table = Table()
    table.add_column("topic", no_wrap=True)
    table.add_column("status")
    table.add_column("partitions", justify="right")
    table.add_column("retention", justify="right")
    table.add_column("difference")
    for status in statuses:
        spec = status.spec
        table.add_row(
            spec.name,
            status.status,
            str(spec.partitions),
            human_retention(spec.retention_ms),
            "; ".join(_difference(d) for d in status.differences),
        )
    out = common.console()
    out.print(table)
    names = ("missing" if dry_run else "created", "unchanged", "differs")
    counts = {name: sum(s.status == name for s in statuses) for name in names}
    out.print(", ".join(f"{n} {name}" for name, n in counts.items()))
    if counts["differs"]:
        common.fail(
            f"{counts['differs']} existing topics differ from the catalog; change them by hand "
            "or change their declarations",
            common.ExitCode.CONFLICT,
        )


async def _apply(
    bootstrap: str, timeout: float, specs: Sequence[catalog.TopicSpec], *, dry_run: bool
) -> list[TopicStatus]:
    from aigc_hub.messaging.kafka import KafkaBroker

    broker = KafkaBroker(bootstrap, request_timeout=timeout)
    try:
        return await (broker.plan(specs) if dry_run else broker.apply(specs))
    finally:
        await broker.close()


def _difference(diff: TopicDifference) -> str:
    if diff.setting == "partitions":
        return f"partitions: declared {diff.declared}, actual {diff.actual}"
    actual = "not set" if diff.actual == "unset" else human_retention(diff.actual)
    return f"retention: declared {human_retention(diff.declared)}, actual {actual}"
