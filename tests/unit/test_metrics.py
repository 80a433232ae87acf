"""Metrics: the exposition parses, docs/metrics.md lists exactly them, the exporter serves."""

from __future__ import annotations

import re
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import REGISTRY, generate_latest
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.parser import text_string_to_metric_families
from tests.support import effects as fx
from tests.support.hubs import hub_for, make_broker

from aigc_hub.observability import exporter, metrics
from aigc_hub.pipelines.avcc import metrics as avcc_metrics
from aigc_hub.pipelines.avcc.handlers import sink as avcc_sink
from aigc_hub.pipelines.vistack import metrics as vistack_metrics
from aigc_hub.pipelines.vistack.transcoder import metrics as transcoder_metrics

DOCS = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"
ROW = re.compile(r"^\| `(aigc_hub_[a-z0-9_]+)` \| (\w+) \| ([^|]+) \|", re.MULTILINE)
SAMPLE_LABEL = "test-sample"
#: The backbone's metrics and those pipelines declare (docs/metrics.md lists them all).
ALL = (
    *metrics.ALL,
    *avcc_sink.METRICS,
    *avcc_metrics.ALL,
    *vistack_metrics.ALL,
    *transcoder_metrics.ALL,
)


def _documented() -> dict[str, tuple[str, tuple[str, ...]]]:
    """Documented metric name -> (type, label names), from the table in docs/metrics.md."""
    rows: dict[str, tuple[str, tuple[str, ...]]] = {}
    for name, kind, labels in ROW.findall(DOCS.read_text()):
        assert name not in rows, f"{name} documented twice"
        names = tuple(x.strip() for x in labels.split(",")) if labels.strip() != "—" else ()
        rows[name] = (kind, names)
    return rows


def _exposed_name(metric: MetricWrapperBase) -> str:
    family = metric.describe()[0]
    return f"{family.name}_total" if family.type == "counter" else family.name


@pytest.fixture
def touched() -> Iterator[None]:
    """Give every metric one sample (labels from the docs), then remove the labelled ones."""
    documented = _documented()
    children: list[tuple[MetricWrapperBase, tuple[str, ...]]] = []
    for metric in ALL:
        kind, label_names = documented[_exposed_name(metric)]
        values = tuple(SAMPLE_LABEL for _ in label_names)
        target = metric.labels(*values) if label_names else metric
        if label_names:
            children.append((metric, values))
        if kind == "counter":
            target.inc()  # type: ignore[attr-defined]
        elif kind == "gauge":
            target.set(1)  # type: ignore[attr-defined]
        else:
            target.observe(0.5)  # type: ignore[attr-defined]
    yield
    for metric, values in children:
        metric.remove(*values)


def test_names_are_prefixed_unique_and_counters_end_in_total() -> None:
    names = [_exposed_name(m) for m in ALL]
    assert len(names) == len(set(names)) == len(ALL)
    assert all(n.startswith("aigc_hub_") for n in names)
    for metric, name in zip(ALL, names, strict=True):
        assert name.endswith("_total") == (metric.describe()[0].type == "counter"), name


def test_existing_objects_keep_their_names() -> None:
    assert _exposed_name(metrics.PUBLISHED) == "aigc_hub_published_records_total"
    assert _exposed_name(metrics.CONSUMED) == "aigc_hub_consumed_records_total"
    assert _exposed_name(metrics.HANDLER_SECONDS) == "aigc_hub_handler_duration_seconds"
    assert _exposed_name(metrics.DEAD_LETTERS) == "aigc_hub_dead_letters_total"
    assert _exposed_name(metrics.INBOX_DUPLICATES) == "aigc_hub_inbox_duplicates_total"


def test_docs_list_exactly_the_metrics_with_their_types_and_labels(touched: None) -> None:
    documented = _documented()
    assert set(documented) == {_exposed_name(m) for m in ALL}
    for metric in ALL:
        kind, _ = documented[_exposed_name(metric)]
        assert kind == metric.describe()[0].type, _exposed_name(metric)
    # Label names are checked by the fixture: .labels() with the documented count succeeded.


def test_exposition_parses_and_shows_every_documented_metric(touched: None) -> None:
    text = generate_latest(REGISTRY).decode()
    samples = [s for f in text_string_to_metric_families(text) for s in f.samples]
    for name, (kind, label_names) in _documented().items():
        series = f"{name}_bucket" if kind == "histogram" else name
        sample_labels = {label: SAMPLE_LABEL for label in label_names}
        assert any(
            s.name == series and sample_labels.items() <= s.labels.items() for s in samples
        ), name


def test_only_documented_series_are_exposed(touched: None) -> None:
    documented = _documented()
    allowed = {
        f"{name}{suffix}"
        for name, (kind, _) in documented.items()
        for suffix in (("_bucket", "_sum", "_count") if kind == "histogram" else ("",))
    }
    text = generate_latest(REGISTRY).decode()
    ours = {
        s.name
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name.startswith("aigc_hub_")
    }
    assert ours <= allowed, ours - allowed  # e.g. no undocumented *_created series


def test_publishing_counts_records_per_topic_and_errors() -> None:
    def value(name: str, **labels: str) -> float:
        return REGISTRY.get_sample_value(name, labels) or 0.0

    ok_before = value("aigc_hub_published_records_total", topic="t.metrics.a")
    batches_before = value("aigc_hub_publish_batch_duration_seconds_count")
    with metrics.publishing(["t.metrics.a", "t.metrics.b", "t.metrics.a"]):
        pass
    assert value("aigc_hub_published_records_total", topic="t.metrics.a") == ok_before + 2
    err = {"topic": "t.metrics.a", "error_class": "ConnectionError"}
    err_before = value("aigc_hub_publish_errors_total", **err)
    with pytest.raises(ConnectionError), metrics.publishing(["t.metrics.a"]):
        raise ConnectionError("broker down")
    assert value("aigc_hub_publish_errors_total", **err) == err_before + 1
    assert value("aigc_hub_published_records_total", topic="t.metrics.a") == ok_before + 2
    assert value("aigc_hub_publish_batch_duration_seconds_count") == batches_before + 2


async def test_relay_counts_published_records_per_topic(sqlite_url: str, tmp_path: Path) -> None:
    before = REGISTRY.get_sample_value("aigc_hub_published_records_total", {"topic": fx.TOPIC})
    async with hub_for(sqlite_url, make_broker("memory", tmp_path), [fx.make_pipeline()]) as hub:
        async with hub.transaction() as conn:
            await hub.outbox.add(conn, [fx.request(f"k{i}", i) for i in range(3)])
        assert await hub.relay.drain() == 3
    after = REGISTRY.get_sample_value("aigc_hub_published_records_total", {"topic": fx.TOPIC})
    assert (after or 0.0) - (before or 0.0) == 3


def test_exporter_serves_metrics_on_loopback_and_stops() -> None:
    server = exporter.start_exporter(0)
    try:
        assert server.host == "127.0.0.1" and server.port > 0
        with urllib.request.urlopen(server.url, timeout=10) as response:
            assert response.status == 200
            text = response.read().decode()
    finally:
        server.close()
    server.close()  # idempotent
    names = {f.name for f in text_string_to_metric_families(text)}
    assert "aigc_hub_handler_duration_seconds" in names
    with pytest.raises(OSError), urllib.request.urlopen(server.url, timeout=2):
        pass
