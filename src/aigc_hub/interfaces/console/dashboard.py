"""The live dashboard: lag and oldest-message age per group and topic, outbox, throughput.

The numbers come from the very functions behind ``GET /admin/lag`` and ``GET /admin/outbox``,
so the page and the API never disagree. ``stats.json`` is polled by the page every 2 s;
throughput is the change of the summed committed offsets (consumed) and end offsets
(produced) between two polls, computed in the browser, so the server keeps no state.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import HTMLResponse, JSONResponse
from pydantic import BaseModel

from aigc_hub.bootstrap import Hub
from aigc_hub.interfaces.console.auth import ConsoleRoute, OperatorDep
from aigc_hub.interfaces.console.rendering import page
from aigc_hub.interfaces.http import admin
from aigc_hub.interfaces.http.auth import hub_of
from aigc_hub.interfaces.http.problems import Problem

HubDep = Annotated[Hub, Depends(hub_of)]
router = APIRouter(route_class=ConsoleRoute)


class LagRow(BaseModel):
    """One (group, topic): lag, oldest unconsumed age, and offsets for throughput."""

    group: str
    topic: str
    lag: int
    oldest_age_s: float
    breached: bool
    consumed: int
    produced: int


class Stats(BaseModel):
    """One dashboard sample."""

    at_ms: int
    broker_reachable: bool
    total_lag: int
    oldest_age_s: float
    outbox_backlog: int
    outbox_oldest_age_s: float
    dead_letters_pending: int
    consumed: int
    produced: int
    lag: list[LagRow]


async def sample(hub: Hub) -> Stats:
    """Read lag, outbox and pending dead letters now, as the admin API reports them."""
    rows: list[LagRow] = []
    reachable = True
    try:
        lag = await admin.lag(hub)
    except Problem:
        reachable = False
    else:
        rows = [
            LagRow(
                group=x.group,
                topic=x.topic,
                lag=x.lag,
                oldest_age_s=x.oldest_age_s,
                breached=x.breached,
                consumed=sum(p.committed for p in x.partitions),
                produced=sum(p.end_offset for p in x.partitions),
            )
            for x in lag.items
        ]
    outbox = await admin.outbox(hub)
    return Stats(
        at_ms=hub.clock.now_ms(),
        broker_reachable=reachable,
        total_lag=sum(r.lag for r in rows),
        oldest_age_s=max((r.oldest_age_s for r in rows), default=0.0),
        outbox_backlog=outbox.backlog,
        outbox_oldest_age_s=outbox.oldest_age_s,
        dead_letters_pending=await hub.dlq.count(),
        consumed=sum(r.consumed for r in rows),
        produced=sum(r.produced for r in rows),
        lag=rows,
    )


@router.get("/dashboard", response_class=HTMLResponse)
async def dashboard(request: Request, who: OperatorDep, hub: HubDep) -> Response:
    return page(request, "dashboard.html", who=who, stats=await sample(hub))


@router.get("/stats.json")
async def stats(who: OperatorDep, hub: HubDep) -> Response:
    return JSONResponse((await sample(hub)).model_dump())
