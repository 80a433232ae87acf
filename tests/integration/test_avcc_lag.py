"""avcc's lag alert and admission gate on real parts (seed 000 §9.3.4).

With review-svc (``avcc-review``) stopped, applications pile up on
``topic.avcc.apply.created``; past 1,000 the lag monitor closes avcc's gate (429 +
Retry-After) and the samples ``/metrics`` exports make the real alert rule fire under promtool.
Review-svc started, the backlog drains, the gate admits again and the rule is quiet.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping
from pathlib import Path

import httpx

from aigc_hub.blobs.keys import object_key
from aigc_hub.core import ids
from aigc_hub.pipelines.avcc import services
from aigc_hub.pipelines.avcc.events import AiToolInfo
from aigc_hub.pipelines.avcc.state import Avcc
from aigc_hub.tenancy import create_tenant
from tests.support.alerts import (
    exported_lag,
    gate_gauge,
    lag_totals,
    promtool_evaluates_lag,
    until,
)
from tests.support.avcc import AvccStack, apply, avcc_stack, noise_png, sha
from tests.support.hubs import make_broker

TOPIC = "topic.avcc.apply.created"
REVIEW = "avcc-review"
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


def promtool_evaluates(lag: Mapping[str, float], tmp_path: Path, *, fires: bool) -> None:
    promtool_evaluates_lag(ALERT, REVIEW, TOPIC, lag, tmp_path, fires=fires)


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
            await until(lag_totals(client, REVIEW, TOPIC, THRESHOLD), 30)
            on_the_line = await apply(client, noise_png(1))
            assert on_the_line.status_code == 201, on_the_line.text

            await until(lag_totals(client, REVIEW, TOPIC, THRESHOLD + 1), 30)
            refused = await apply(client, noise_png(2))
            assert refused.status_code == 429, refused.text
            assert 1 <= int(refused.headers["retry-after"]) <= 300
            assert refused.headers["content-type"].startswith("application/problem+json")
            problem = refused.json()
            assert problem["status"] == 429 and problem["pipeline"] == "avcc"
            assert f"{REVIEW} is {THRESHOLD + 1} records behind on {TOPIC}" in problem["detail"]
            assert await gate_gauge(client, "avcc") == 0
            promtool_evaluates(await exported_lag(client, REVIEW, TOPIC), tmp_path, fires=True)

            stack.start_group(REVIEW, concurrency=SCALED_OUT)
            await until(lag_totals(client, REVIEW, TOPIC, 0), 120)
            admitted = await apply(client, noise_png(3))
            assert admitted.status_code == 201, admitted.text
            assert await gate_gauge(client, "avcc") == 1
            promtool_evaluates(await exported_lag(client, REVIEW, TOPIC), tmp_path, fires=False)
