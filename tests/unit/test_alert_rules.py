"""The Prometheus alert rules: valid, tested by promtool, and true to the seeds and our metrics.

The YAML half always runs (names and numbers); the promtool half needs ``promtool`` (Debian
package ``prometheus``): it skips locally without it and fails under CI.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml  # type: ignore[import-untyped]  # types-PyYAML is not in the dev extra
from tests.conftest import service_missing

from aigc_hub import plugins
from aigc_hub.cli.topics import merged_catalog
from aigc_hub.observability import metrics
from aigc_hub.pipelines.avcc import metrics as avcc_metrics
from aigc_hub.pipelines.vistack import metrics as vistack_metrics
from aigc_hub.pipelines.vistack.transcoder import metrics as transcoder_metrics

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "aigc-hub.rules.yml"
RULE_TESTS = ROOT / "deploy" / "prometheus" / "aigc-hub.rules.test.yml"
DOCS = ROOT / "docs" / "metrics.md"

# alert -> (threshold, for, what the expression must contain). Sources: seed 003 §10.2
# (lag > 5000 for 5m; P99 > 30 s for 3m; > 10 dead letters in 10m for 5m), seed 000 §9.3.4
# (apply.created lag > 1000 or older than 1 min; playback lag > 50000), seed 000 §9.3.3 (any
# dead letter of avcc's topics: P2), seed 000 §9.2.4 (the flink-job's anomalies: any), and
# ours (outbox 60 s). The documents pipeline has seed 003 §10.2's three of its own.
EXPECTED: dict[str, tuple[float, str | None, tuple[str, ...]]] = {
    "AigcHubConsumerLagHigh": (5000, "5m", ("aigc_hub_consumer_lag_records",)),
    "AigcHubHandlerLatencyHigh": (
        30,
        "3m",
        ("histogram_quantile(0.99,", "aigc_hub_handler_duration_seconds_bucket"),
    ),
    "AigcHubDeadLetterAccumulation": (
        10,
        "5m",
        ("increase(aigc_hub_dead_letters_total{", "}[10m])"),
    ),
    "AigcHubDocumentsConsumerLagHigh": (5000, "5m", ("aigc_hub_consumer_lag_records",)),
    "AigcHubDocumentsProcessingLatencyHigh": (
        30,
        "3m",
        ("histogram_quantile(0.99,", "aigc_hub_handler_duration_seconds_bucket"),
    ),
    "AigcHubDocumentsDeadLetterAccumulation": (
        10,
        "5m",
        ("increase(aigc_hub_dead_letters_total{", "}[10m])"),
    ),
    # Seed 002's roadmap: a transcode given up after its 7 attempts alerts at once.
    "AigcHubVistackTranscodeGaveUp": (0, None, ("aigc_hub_vistack_transcode_gave_up_total",)),
    "AigcHubAvccDeadLetter": (
        0,
        None,
        ("aigc_hub_dead_letters_pending", 'topic=~"topic[.](avcc|review|chain|playback)[.].+"'),
    ),
    "AigcHubApplyCreatedLagHigh": (
        1000,
        None,
        ("aigc_hub_consumer_lag_records", 'topic="topic.avcc.apply.created"'),
    ),
    "AigcHubApplyCreatedLagOld": (
        60,
        None,
        ("aigc_hub_consumer_oldest_unconsumed_age_seconds", 'topic="topic.avcc.apply.created"'),
    ),
    "AigcHubPlaybackLagHigh": (
        50000,
        None,
        ("aigc_hub_consumer_lag_records", 'topic="topic.playback.event"'),
    ),
    "AigcHubAvccPlaybackAnomaly": (
        0,
        None,
        ("increase(aigc_hub_avcc_playback_anomalies_total[5m])", "sum by (kind)"),
    ),
    "AigcHubOutboxStale": (60, None, ("aigc_hub_outbox_oldest_unpublished_age_seconds",)),
}

#: Severities the rules use: Alertmanager's usual two, and the seed's own level where it names
#: one (seed 000 §9.3.3: a dead letter of avcc raises a "P2" alert).
SEVERITIES = ("warning", "critical", "P2")

# PromQL words the rules may use besides metric names.
PROMQL_WORDS = {
    "sum", "max", "min", "avg", "count", "by", "without", "rate", "increase",
    "histogram_quantile", "and", "or", "unless", "on", "ignoring", "bool",
}  # fmt: skip


def _rules() -> list[dict[str, Any]]:
    data = yaml.safe_load(RULES.read_text())
    return [rule for group in data["groups"] for rule in group["rules"]]


def _metric_names(expr: str) -> set[str]:
    """Identifiers in ``expr`` that are not PromQL words, label matchers or groupings."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    text = re.sub(r"\{[^}]*\}", "", text)
    text = re.sub(r"\b(?:by|without|on|ignoring)\s*\([^)]*\)", "", text)
    text = re.sub(r"\[[^\]]*\]", "", text)
    return set(re.findall(r"[A-Za-z_:][A-Za-z0-9_:]*", text)) - PROMQL_WORDS


def _exposed_series() -> set[str]:
    names: set[str] = set()
    for metric in (*metrics.ALL, *avcc_metrics.ALL, *vistack_metrics.ALL, *transcoder_metrics.ALL):
        for family in metric.describe():
            names.add(f"{family.name}_total" if family.type == "counter" else family.name)
            if family.type == "histogram":
                names |= {f"{family.name}_bucket", f"{family.name}_sum", f"{family.name}_count"}
    return names


def _slug(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading."""
    text = heading.strip().lower()
    return re.sub(r"[^a-z0-9 _-]", "", text).replace(" ", "-")


def test_rules_are_the_expected_alerts() -> None:
    assert sorted(r["alert"] for r in _rules()) == sorted(EXPECTED)


def test_rules_use_only_our_metrics() -> None:
    exposed = _exposed_series()
    for rule in _rules():
        used = _metric_names(rule["expr"])
        assert used, rule["alert"]
        assert used <= exposed, (rule["alert"], used - exposed)


def test_thresholds_and_durations_match_the_seeds() -> None:
    for rule in _rules():
        threshold, for_, needles = EXPECTED[rule["alert"]]
        expr = " ".join(rule["expr"].split())
        match = re.search(r">\s*([0-9.]+)$", expr)
        assert match, (rule["alert"], expr)
        assert float(match.group(1)) == threshold, rule["alert"]
        assert rule.get("for") == for_, rule["alert"]
        for needle in needles:
            assert needle in expr, (rule["alert"], needle)


def test_generic_lag_rule_leaves_out_topics_with_their_own_rule() -> None:
    rule = next(r for r in _rules() if r["alert"] == "AigcHubConsumerLagHigh")
    assert 'topic!="topic.avcc.apply.created"' in rule["expr"]
    assert 'topic!="topic.playback.event"' in rule["expr"]


def _matchers(alert: str, label: str, op: str) -> list[str]:
    rule = next(r for r in _rules() if r["alert"] == alert)
    return re.findall(rf'{label}{op}"([^"]+)"', rule["expr"])


def test_documents_rules_watch_its_topics_and_groups_and_the_generic_rules_leave_them() -> None:
    from aigc_hub.pipelines.documents import events

    installed = plugins.load(None)  # every installed pipeline: only documents' may match
    others = {spec.name for spec in merged_catalog(installed)}
    other_groups = {spec.group for p in installed for spec in (*p.handlers, *p.streams)}
    topics = {spec.name for spec in events.TOPICS}
    groups = {events.CHUNKING_SVC, events.EMBEDDING_SVC, events.STORAGE_SVC, events.ANALYSIS_SVC}
    [lag] = _matchers("AigcHubDocumentsConsumerLagHigh", "topic", "=~")
    [dead] = _matchers("AigcHubDocumentsDeadLetterAccumulation", "topic", "=~")
    [slow] = _matchers("AigcHubDocumentsProcessingLatencyHigh", "group", "=~")
    assert lag == dead
    assert {t for t in topics | others if re.fullmatch(lag, t)} == topics
    assert {g for g in groups | other_groups if re.fullmatch(slow, g)} == groups
    # the backbone's rules of the same meaning leave documents' topics and groups out
    assert _matchers("AigcHubConsumerLagHigh", "topic", "!~") == [lag]
    assert _matchers("AigcHubDeadLetterAccumulation", "topic", "!~") == [lag]
    assert _matchers("AigcHubHandlerLatencyHigh", "group", "!~") == [slow]
    for alert in EXPECTED:
        if alert.startswith("AigcHubDocuments"):
            rule = next(r for r in _rules() if r["alert"] == alert)
            assert rule["annotations"]["summary"].startswith("Documents: "), alert


def test_avcc_dead_letter_rule_watches_exactly_avccs_topics_at_p2() -> None:
    rule = next(r for r in _rules() if r["alert"] == "AigcHubAvccDeadLetter")
    assert rule["labels"]["severity"] == "P2"
    [pattern] = re.findall(r'topic=~"([^"]+)"', rule["expr"])
    catalog = merged_catalog(plugins.load(None))
    watched = {spec.name for spec in catalog if re.fullmatch(pattern, spec.name)}
    avcc = {spec.name for spec in catalog if spec.pipeline == "avcc"}
    # topic.avcc.*, topic.review.*, topic.chain.* (seed 000 §9.3.2's families) are all avcc's
    assert watched == avcc
    assert "topic.system.dlq" not in watched and "topic.system.retry" not in watched


def test_every_rule_has_severity_and_a_run_book_in_the_docs() -> None:
    docs = DOCS.read_text()
    anchors = {_slug(line.lstrip("#")) for line in docs.splitlines() if line.startswith("#")}
    for rule in _rules():
        assert rule["labels"]["severity"] in SEVERITIES, rule["alert"]
        path, _, anchor = rule["annotations"]["runbook"].partition("#")
        assert path == "docs/metrics.md", rule["alert"]
        assert anchor in anchors, (rule["alert"], anchor)


def test_rule_tests_cover_every_alert_firing_and_not_firing() -> None:
    data = yaml.safe_load(RULE_TESTS.read_text())
    fires: set[str] = set()
    quiet: set[str] = set()
    for test in data["tests"]:
        for case in test["alert_rule_test"]:
            (fires if case.get("exp_alerts") else quiet).add(case["alertname"])
    assert fires == set(EXPECTED)
    assert quiet == set(EXPECTED)


def _promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        service_missing("promtool", "install the Debian package 'prometheus' to get it")
        raise AssertionError("unreachable")
    return found


@pytest.mark.parametrize(
    ("command", "path"),
    [(["check", "rules"], RULES), (["test", "rules"], RULE_TESTS)],
    ids=["check", "test"],
)
def test_promtool(command: list[str], path: Path) -> None:
    result = subprocess.run(
        [_promtool(), *command, path.name],
        cwd=path.parent,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout
