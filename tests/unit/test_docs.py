"""The reference docs stay true to the code they describe."""

from __future__ import annotations

from pathlib import Path

import pytest

from aigc_hub import plugins
from aigc_hub.cli.main import app
from aigc_hub.cli.topics import merged_catalog
from aigc_hub.pipeline import PipelineBase
from aigc_hub.settings import Settings

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_topics_doc_lists_every_installed_topic_with_its_partitions() -> None:
    text = (DOCS / "topics.md").read_text()
    for spec in merged_catalog(plugins.load(None)):
        assert f"| `{spec.name}` | {spec.pipeline} | {spec.partitions} |" in text, spec.name


def test_settings_doc_names_every_setting() -> None:
    text = (DOCS / "settings.md").read_text()
    for name in Settings.model_fields:
        assert f"AIGC_HUB_{name.upper()}" in text, name


@pytest.mark.parametrize("pipeline", plugins.load(None), ids=lambda p: p.name)
def test_settings_doc_names_every_setting_of_every_pipeline(pipeline: PipelineBase) -> None:
    assert pipeline.settings is not None
    text = (DOCS / "settings.md").read_text()
    for name in pipeline.settings.model_fields:
        assert f"{pipeline.env_prefix}{name.upper()}" in text, name


def test_cli_doc_names_every_command() -> None:
    text = (DOCS / "cli.md").read_text()
    commands = [c.name for c in app.registered_commands]
    groups = [g.name for g in app.registered_groups]
    for name in [*commands, *groups]:
        assert f"aigc-hub {name}" in text, name


def test_metrics_doc_names_every_handling_outcome() -> None:
    from aigc_hub.core.outcomes import HandlingOutcome

    line = next(
        ln for ln in (DOCS / "metrics.md").read_text().splitlines() if "consumed_records" in ln
    )
    for outcome in HandlingOutcome:
        assert f"`{outcome.value}`" in line, outcome
