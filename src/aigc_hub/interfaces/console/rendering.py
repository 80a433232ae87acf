"""Jinja2 templates of the console and the filters they use (times, pretty JSON, sizes,
media durations)."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

from fastapi import Request
from fastapi.responses import HTMLResponse
from starlette.templating import Jinja2Templates

#: Where the console is mounted; templates build links from it.
PREFIX = "/console"
HERE = Path(__file__).parent
STATIC_DIR = HERE / "static"

templates = Jinja2Templates(directory=HERE / "templates")


def fmt_ms(value: int | None) -> str:
    """Epoch milliseconds as ``YYYY-MM-DD HH:MM:SS.mmm`` UTC; ``—`` for None."""
    if value is None:
        return "—"
    at = dt.datetime.fromtimestamp(value / 1000, tz=dt.UTC)
    return at.strftime("%Y-%m-%d %H:%M:%S.") + f"{value % 1000:03d}"


def fmt_age(seconds: float | None) -> str:
    """An age in seconds, short: ``850 ms``, ``42.0 s``, ``3 min 5 s``, ``2 h 10 min``."""
    if seconds is None:
        return "—"
    if seconds < 1:
        return f"{round(seconds * 1000)} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min"


def fmt_bytes(value: int | None) -> str:
    """A size in bytes, short: ``812 B``, ``4.2 KiB``, ``17.0 MiB``; ``—`` for None."""
    if value is None:
        return "—"
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{int(size)} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")  # the loop returns at GiB


def fmt_duration(value_ms: int | None) -> str:
    """A media duration in milliseconds as ``m:ss.s``; ``—`` for None."""
    if value_ms is None:
        return "—"
    minutes, ms = divmod(value_ms, 60_000)
    return f"{minutes}:{ms / 1000:04.1f}"


def pretty(value: Any) -> str:
    """Indented JSON that keeps non-ASCII text (Chinese prompts) as it is."""
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False, default=str)


templates.env.filters.update(
    ms=fmt_ms, age=fmt_age, pretty=pretty, bytes=fmt_bytes, duration=fmt_duration
)
templates.env.globals.update(base=PREFIX)


def page(request: Request, name: str, status_code: int = 200, **context: Any) -> HTMLResponse:
    """Render template ``name`` (UTF-8 HTML) with ``context``."""
    return templates.TemplateResponse(request, name, context, status_code=status_code)
