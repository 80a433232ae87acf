"""The web console at ``/console``: DLQ browser, live dashboard, task explorer, gallery,
avcc's human review queue, vistack's videos and generation's editing projects.

Server-rendered (Jinja2) with a little vanilla JS and no build step or CDN (the HLS player,
hls.js, is vendored under ``static/vendor``). Operators log in with an admin API key and
reach every page; a tenant logs in with its own key and reaches only the gallery of its own
tasks (:mod:`.auth`). Every action goes through the same stores and jobs as the admin API
and is audited the same way. Mount it with::

    app.include_router(console.router(), prefix=console.PREFIX, include_in_schema=False)
    app.mount(console.STATIC_PATH, console.static_files(), name="console-static")
"""

from __future__ import annotations

from fastapi import APIRouter
from starlette.staticfiles import StaticFiles

from aigc_hub.interfaces.console import (
    auth,
    dashboard,
    dlq,
    gallery,
    playback,
    projects,
    reviews,
    tasks,
    videos,
)
from aigc_hub.interfaces.console.rendering import PREFIX, STATIC_DIR

#: Where the stylesheet and script are served.
STATIC_PATH = f"{PREFIX}/static"

__all__ = ["PREFIX", "STATIC_PATH", "router", "static_files"]


def router() -> APIRouter:
    """Every console page, to be included under :data:`PREFIX`."""
    combined = APIRouter()
    parts = (
        auth.router,
        dlq.router,
        dashboard.router,
        tasks.router,
        gallery.router,
        reviews.router,
        playback.router,
        videos.router,
        projects.router,
    )
    for part in parts:
        combined.include_router(part)
    return combined


def static_files() -> StaticFiles:
    """The console's CSS and JS, and the vendored player (shipped inside the package)."""
    return StaticFiles(directory=STATIC_DIR)
