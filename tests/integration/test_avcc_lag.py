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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml  # type: ignore[import-untyped]  # types-PyYAML is not in the dev extra
from prometheus_client.parser import text_string_to_metric_families

from aigc_hub.blobs.keys import object_key
from aigc_hub.blobs.local import LocalBlobStore
from aigc_hub.bootstrap import Hub
from aigc_hub.core import ids
from aigc_hub.hub_config import HubConfig
from aigc_hub.interfaces.http.app import create_app
from aigc_hub.interfaces.http.limits import Limits
from aigc_hub.pipelines.avcc import services
from aigc_hub.pipelines.avcc.chains import make_chain
from aigc_hub.pipelines.avcc.events import AiToolInfo
from aigc_hub.pipelines.avcc.likeness import StoredLikeness
from aigc_hub.pipelines.avcc.pipeline import pipeline as avcc_pipeline
from aigc_hub.pipelines.avcc.settings import AvccSettings
from aigc_hub.pipelines.avcc.state import STATE, Avcc
from aigc_hub.store import engine as store_engine
from aigc_hub.tenancy import create_tenant
from tests.conftest import service_missing
from tests.support.avcc import apply, noise_png, sha
from tests.support.hubs import make_broker
from tests.support.served import serve

RULES = Path(__file__).resolve().parents[2] / "deploy" / "prometheus" / "aigc-hub.rules.yml"
TOPIC = "topic.avcc.apply.created"
REVIEW = "avcc-review"
LAG_METRIC = "aigc_hub_consumer_lag_records"
ALERT = "AigcHubApplyCreatedLagHigh"
#: The seed's line (lag > 1,000): this many waiting do not cross it, one more does.
THRESHOLD = 1_000
#: Review-svc scaled out when it comes back, as the alert's run book says to.
SCALED_OUT = 64


@dataclass
class LaggingStack:
    """avcc's hub running every group but review-svc, the lag monitor sampling every
    0.1 s, its API served on loopback."""

    hub: Hub
    api_url: str
    stop: asyncio.Event
    tasks: list[asyncio.Task[None]]

    @property
    def avcc(self) -> Avcc:
        return self.hub.state_of(STATE)

    def start_review(self) -> None:
        """Bring review-svc up (with SCALED_OUT records in flight) until the stack stops."""
        [spec] = [s for s in self.hub.handler_specs if s.group == REVIEW]
        runtime = self.hub.runtime(spec, concurrency=SCALED_OUT)
        self.tasks.append(asyncio.create_task(runtime.run(self.stop)))


@contextlib.asynccontextmanager
async def lagging_stack(db_url: str, tmp_path: Path) -> AsyncIterator[LaggingStack]:
    """The avcc stack of ``tests.support.avcc`` (embedded log, local blobs), review-svc not
    started."""
    config = HubConfig(
        engine=store_engine.create_engine(db_url),
        broker=make_broker("embedded", tmp_path),
        blobs=LocalBlobStore(tmp_path / "blobs", secret=b"test-blob-secret"),
        lag_interval_s=0.1,  # the test waits on the monitor's samples: let them come often
    )
    settings = AvccSettings(log_key_path=str(tmp_path / "log-key.pem"))

    def build(hub: Hub, _settings: object) -> Avcc:
        return Avcc(
            hub, settings, make_chain(hub, settings, tmp_path), StoredLikeness(hub.engine), tmp_path
        )

    hub = Hub(config, [avcc_pipeline.with_state(build)])
    await hub.start()
    others = [s.group for s in hub.handler_specs if s.group != REVIEW]
    stop = asyncio.Event()
    tasks = [asyncio.create_task(hub.run(stop, groups=others, lag=True))]
    try:
        async with serve(create_app(hub, limits=Limits(rate_per_s=5_000, burst=5_000))) as url:
            yield LaggingStack(hub, url, stop, tasks)
    finally:
        stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 30)
        await hub.close()


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

            stack.start_review()
            await until(lag_totals(client, 0), 120)
            admitted = await apply(client, noise_png(3))
            assert admitted.status_code == 201, admitted.text
            assert await gate_gauge(client) == 1
            promtool_evaluates(await exported_lag(client), tmp_path, fires=False)
