"""avcc's lag alert and admission gate on real parts (seed 000 §9.3.4).

With review-svc (``avcc-review``) stopped, applications pile up on
``topic.avcc.apply.created``; past 1,000 the lag monitor closes avcc's gate (429 +
Retry-After) and the samples ``/metrics`` exports make the real alert rule fire under promtool.
Review-svc started, the backlog drains, the gate admits again and the rule is quiet.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import subprocess
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import httpx
import yaml  # type: ignore[import-untyped]  # types-PyYAML is not in the dev extra
from prometheus_client.parser import text_string_to_metric_families

from aigc_hub.blobs.keys import object_key
from aigc_hub.core import ids
from aigc_hub.pipelines.avcc import services
from aigc_hub.pipelines.avcc.events import AiToolInfo
from aigc_hub.pipelines.avcc.state import Avcc
from aigc_hub.tenancy import create_tenant
from tests.conftest import service_missing
from tests.support.avcc import AvccStack, apply, avcc_stack, noise_png, sha
from tests.support.hubs import make_broker

RULES = Path(__file__).resolve().parents[2] / "deploy" / "prometheus" / "aigc-hub.rules.yml"
TOPIC = "topic.avcc.apply.created"
REVIEW = "avcc-review"
LAG_METRIC = "aigc_hub_consumer_lag_records"
ALERT = "AigcHubApplyCreatedLagHigh"
#: The seed's line (lag > 1,000): this many waiting do not cross it, one more does.
THRESHOLD = 1_000
#: Review-svc scaled out when it comes back, as the alert's run book says to.
SCALED_OUT = 64


@contextlib.asynccontextmanager
async def lagging_stack(db_url: str, tmp_path: Path) -> AsyncIterator[AvccStack]:
    """The avcc stack with review-svc not started and the lag monitor sampling every 0.1 s
    (the test waits on its samples: let them come often)."""
    others = ["avcc-code", "avcc-chain", "avcc-embed"]
    broker = make_broker("embedded", tmp_path)
    async with avcc_stack(
        db_url,
        broker,
        tmp_path,
        groups=others,
        scan=False,
        lag=True,
        hub_options={"lag_interval_s": 0.1},
    ) as stack:
        yield stack


async def apply_directly(avcc: Avcc, tenant_id: str, n: int) -> None:
    """``n`` applications through code-svc's own command (the API's precheck and
    transaction, without HTTP), a hundred at a time so their commits group.

    Each work leaves the store once its application is recorded, so review-svc rejects it at
    its integrity check: the review's cost is not under test here, and it is most of the
    drain's time. Measured on two cores: 1,000 tiny texts reviewed in full (moderation, the
    text model) ~145 s, 16-pixel PNGs ~127 s; rejected at integrity, 64 in flight, 8-16 s.
    """

    async def one(i: int) -> None:
        text = f"backlog work {i}".encode()
        key = object_key(tenant_id, "avcc-work", ids.new_id_str(), "work.txt")
        await avcc.store.put(key, text, "text/plain")
        body = services.Apply(
            content_url=f"blob:{key}",
            content_hash=sha(text),
            ai_tool_info=AiToolInfo(model_name="Stable-Diffusion-XL", model_version="v1.0"),
        )
        await services.apply(avcc, tenant_id=tenant_id, body=body, idempotency_key=f"bk-{i}")
        await avcc.store.delete(key)

    for start in range(0, n, 100):
        await asyncio.gather(*(one(i) for i in range(start, min(n, start + 100))))


async def scrape(client: httpx.AsyncClient, name: str) -> list[tuple[dict[str, str], float]]:
    """The samples of metric ``name`` that ``/metrics`` exports: (labels, value) each."""
    text = (await client.get("/metrics")).text
    return [
        (sample.labels, sample.value)
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name
    ]


async def exported_lag(client: httpx.AsyncClient) -> dict[str, float]:
    """review-svc's lag on the topic per partition, as ``/metrics`` exports it."""
    return {
        labels["partition"]: value
        for labels, value in await scrape(client, LAG_METRIC)
        if labels["group"] == REVIEW and labels["topic"] == TOPIC
    }


async def gate_gauge(client: httpx.AsyncClient) -> float:
    """``aigc_hub_admission_gate_open{pipeline="avcc"}`` as exported."""
    samples = await scrape(client, "aigc_hub_admission_gate_open")
    [value] = [v for labels, v in samples if labels["pipeline"] == "avcc"]
    return value


def lag_totals(client: httpx.AsyncClient, total: float) -> Callable[[], Awaitable[bool]]:
    """A condition: the exported lag, summed over partitions, is ``total``."""

    async def reached() -> bool:
        return sum((await exported_lag(client)).values()) == total

    return reached


async def until(reached: Callable[[], Awaitable[bool]], timeout_s: float) -> None:
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
    """Prometheus' ``humanize`` (``%.4g`` and an SI prefix) for values below a million."""
    return f"{value / 1000:.4g}k" if value >= 1000 else f"{value:.4g}"


def _expected_alert(total: float) -> dict[str, Any]:
    """The alert as the real rule renders it for review-svc lagging ``total`` records."""
    data = yaml.safe_load(RULES.read_text())
    rule = next(r for g in data["groups"] for r in g["rules"] if r["alert"] == ALERT)
    rendered = {
        name: text.replace("{{ $labels.group }}", REVIEW)
        .replace("{{ $labels.topic }}", TOPIC)
        .replace("{{ $value | humanize }}", _humanize(total))
        for name, text in rule["annotations"].items()
    }
    labels = {**rule["labels"], "group": REVIEW, "topic": TOPIC}
    return {"exp_labels": labels, "exp_annotations": rendered}


def promtool_evaluates(lag: Mapping[str, float], tmp_path: Path, *, fires: bool) -> None:
    """``promtool test rules`` on the real rule file, fed the exported per-partition samples:
    ALERT fires (its labels and rendered annotations) or stays quiet."""
    series = [
        {
            "series": f'{LAG_METRIC}{{group="{REVIEW}", topic="{TOPIC}", partition="{p}"}}',
            "values": f"{value:g}x2",
        }
        for p, value in sorted(lag.items())
    ]
    case = {
        "eval_time": "1m",
        "alertname": ALERT,
        "exp_alerts": [_expected_alert(sum(lag.values()))] if fires else [],
    }
    test = {
        "rule_files": [str(RULES)],
        "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": series, "alert_rule_test": [case]}],
    }
    path = tmp_path / ("fires.test.yml" if fires else "quiet.test.yml")
    path.write_text(yaml.safe_dump(test, sort_keys=False))
    result = subprocess.run(
        [_promtool(), "test", "rules", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


async def test_review_stopped_past_1000_closes_the_gate_and_fires_the_alert_until_drained(
    sqlite_url: str, tmp_path: Path
) -> None:
    async with lagging_stack(sqlite_url, tmp_path) as stack:
        tenant, key = await create_tenant(stack.hub.engine, "busy-studio")
        await apply_directly(stack.avcc, tenant.id, THRESHOLD)
        async with httpx.AsyncClient(
            base_url=stack.api_url, headers={"Authorization": f"Bearer {key}"}, trust_env=False
        ) as client:
            # 1,000 waiting is on the line, not past it: the API still admits
            await until(lag_totals(client, THRESHOLD), 30)
            on_the_line = await apply(client, noise_png(1))
            assert on_the_line.status_code == 201, on_the_line.text

            await until(lag_totals(client, THRESHOLD + 1), 30)
            refused = await apply(client, noise_png(2))
            assert refused.status_code == 429, refused.text
            assert 1 <= int(refused.headers["retry-after"]) <= 300
            assert refused.headers["content-type"].startswith("application/problem+json")
            problem = refused.json()
            assert problem["status"] == 429 and problem["pipeline"] == "avcc"
            assert f"{REVIEW} is {THRESHOLD + 1} records behind on {TOPIC}" in problem["detail"]
            assert await gate_gauge(client) == 0
            promtool_evaluates(await exported_lag(client), tmp_path, fires=True)

            stack.start_group(REVIEW, concurrency=SCALED_OUT)
            await until(lag_totals(client, 0), 120)
            admitted = await apply(client, noise_png(3))
            assert admitted.status_code == 201, admitted.text
            assert await gate_gauge(client) == 1
            promtool_evaluates(await exported_lag(client), tmp_path, fires=False)
