"""avcc's playback page in the console: the analytics sink's lag beside its insert rate, the
stored totals, plays per code over the last minutes (an SVG chart drawn here, no script
library), and the anomalies the detector found. It reloads itself every few seconds."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.responses import HTMLResponse

from aigc_hub.bootstrap import Hub
from aigc_hub.interfaces.console.auth import ConsoleRoute, OperatorDep
from aigc_hub.interfaces.console.rendering import page
from aigc_hub.interfaces.console.review_facts import avcc_of
from aigc_hub.interfaces.http.auth import hub_of
from aigc_hub.pipelines.avcc.analytics.base import CodeSeries
from aigc_hub.pipelines.avcc.playback_views import playback_view

HubDep = Annotated[Hub, Depends(hub_of)]
router = APIRouter(route_class=ConsoleRoute)

#: The chart's drawing area in SVG user units.
WIDTH, HEIGHT = 720, 200
#: One colour per charted code, in legend order.
COLOURS = ("#1f6feb", "#d1242f", "#1a7f37", "#9a6700", "#8250df")


@dataclass(frozen=True)
class Line:
    """One code's polyline on the chart."""

    avcc_code: str
    colour: str
    points: str
    total: int


def chart_lines(
    series: list[CodeSeries], since_ms: int, until_ms: int, bucket_s: int
) -> list[Line]:
    """Polylines of plays per bucket, x by time over [since, until), y scaled to the busiest
    bucket; buckets without plays are drawn at zero."""
    step = bucket_s * 1000
    first = since_ms - since_ms % step
    buckets = range(first, until_ms, step)
    peak = max((plays for s in series for _, plays in s.points), default=0) or 1
    span = max(until_ms - first, 1)
    lines = []
    for colour, one in zip(COLOURS, series, strict=False):
        plays = dict(one.points)
        xy = (
            f"{(b - first) / span * WIDTH:.1f},{HEIGHT - plays.get(b, 0) / peak * HEIGHT:.1f}"
            for b in buckets
        )
        lines.append(Line(one.avcc_code, colour, " ".join(xy), sum(plays.values())))
    return lines


@router.get("/playback", response_class=HTMLResponse)
async def playback_page(
    request: Request,
    who: OperatorDep,
    hub: HubDep,
    minutes: Annotated[int, Query(ge=1, le=1440)] = 15,
) -> Response:
    avcc = avcc_of(hub)
    if avcc is None:
        message = "This hub does not run the avcc pipeline, so it has no playback."
        return page(
            request, "error.html", status_code=404, who=who, title="Not found", message=message
        )
    bucket_s = max(1, minutes * 60 // 90)  # about 90 points a line
    view = await playback_view(avcc, window_s=minutes * 60, bucket_s=bucket_s)
    lines = chart_lines(view.series, view.since_ms, hub.clock.now_ms(), bucket_s)
    return page(
        request,
        "playback.html",
        who=who,
        view=view,
        lines=lines,
        minutes=minutes,
        width=WIDTH,
        height=HEIGHT,
    )
