"""The hub's alert rules judged by promtool on what a running hub exports.

A test scrapes ``/metrics`` of a real API, feeds the samples of one metric to
``promtool test rules`` against the real rule file, and states whether an alert fires
(with its labels and annotations as the rule renders them) or stays quiet.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import httpx
import yaml  # type: ignore[import-untyped]  # types-PyYAML is not in the dev extra
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import service_missing

RULES = Path(__file__).resolve().parents[2] / "deploy" / "prometheus" / "aigc-hub.rules.yml"
LAG_METRIC = "aigc_hub_consumer_lag_records"


async def scrape(client: httpx.AsyncClient, name: str) -> list[tuple[dict[str, str], float]]:
    """The samples of metric ``name`` that ``/metrics`` exports: (labels, value) each."""
    text = (await client.get("/metrics")).text
    return [
        (sample.labels, sample.value)
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name
    ]


async def gate_gauge(client: httpx.AsyncClient, pipeline: str) -> float:
    """``aigc_hub_admission_gate_open{pipeline=…}`` as exported (1 open, 0 closed)."""
    samples = await scrape(client, "aigc_hub_admission_gate_open")
    [value] = [v for labels, v in samples if labels["pipeline"] == pipeline]
    return value


async def exported_lag(client: httpx.AsyncClient, group: str, topic: str) -> dict[str, float]:
    """The group's lag on the topic per partition, as ``/metrics`` exports it."""
    return {
        labels["partition"]: value
        for labels, value in await scrape(client, LAG_METRIC)
        if labels["group"] == group and labels["topic"] == topic
    }


def lag_totals(
    client: httpx.AsyncClient, group: str, topic: str, total: float
) -> Callable[[], Awaitable[bool]]:
    """A condition: the exported lag, summed over partitions, is ``total``."""

    async def reached() -> bool:
        return sum((await exported_lag(client, group, topic)).values()) == total

    return reached


async def until(reached: Callable[[], Awaitable[bool]], timeout_s: float) -> None:
    """Poll ``reached`` until it holds; TimeoutError after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not await reached():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not reached in time")
        await asyncio.sleep(0.05)


def _promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        service_missing("promtool", "install the Debian package 'prometheus' to get it")
        raise AssertionError("unreachable")
    return found


def _humanize(value: float) -> str:
    """Prometheus' ``humanize`` (``%.4g`` and an SI prefix) for values below a billion."""
    if value >= 1_000_000:
        return f"{value / 1_000_000:.4g}M"
    return f"{value / 1000:.4g}k" if value >= 1000 else f"{value:.4g}"


def _expected_alert(alert: str, group: str, topic: str, total: float) -> dict[str, Any]:
    """The alert as the real rule renders it for ``group`` lagging ``total`` on ``topic``."""
    data = yaml.safe_load(RULES.read_text())
    rule = next(r for g in data["groups"] for r in g["rules"] if r.get("alert") == alert)
    rendered = {
        name: text.replace("{{ $labels.group }}", group)
        .replace("{{ $labels.topic }}", topic)
        .replace("{{ $value | humanize }}", _humanize(total))
        for name, text in rule["annotations"].items()
    }
    labels = {**rule["labels"], "group": group, "topic": topic}
    return {"exp_labels": labels, "exp_annotations": rendered}


def promtool_evaluates_lag(
    alert: str,
    group: str,
    topic: str,
    lag: Mapping[str, float],
    tmp_path: Path,
    *,
    fires: bool,
) -> None:
    """``promtool test rules`` on the real rule file, fed the exported per-partition lag
    samples: ``alert`` fires (its labels and rendered annotations) or stays quiet."""
    series = [
        {
            "series": f'{LAG_METRIC}{{group="{group}", topic="{topic}", partition="{p}"}}',
            "values": f"{value:g}x2",
        }
        for p, value in sorted(lag.items())
    ]
    case = {
        "eval_time": "1m",
        "alertname": alert,
        "exp_alerts": [_expected_alert(alert, group, topic, sum(lag.values()))] if fires else [],
    }
    test = {
        "rule_files": [str(RULES)],
        "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": series, "alert_rule_test": [case]}],
    }
    path = tmp_path / f"{alert}-{'fires' if fires else 'quiet'}.test.yml"
    path.write_text(yaml.safe_dump(test, sort_keys=False))
    result = subprocess.run(
        [_promtool(), "test", "rules", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
