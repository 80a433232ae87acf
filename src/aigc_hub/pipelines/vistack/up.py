"""``aigc-hub up`` on embedded defaults serves one transcoder beside the hub, on
``AIGC_HUB_VISTACK_TRANSCODER_ADDRESS``, so an uploaded video is published with nothing else
running. At scale the transcoders run on their own (``aigc-hub vistack transcoder serve``):
set ``AIGC_HUB_VISTACK_RUN_TRANSCODER=false``.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from aigc_hub.core.errors import ConfigurationError
from aigc_hub.media import tools as media_tools
from aigc_hub.pipeline import UpContext

from .settings import VistackSettings
from .state import NAME

if TYPE_CHECKING:
    from aigc_hub.bootstrap import Hub

LOOPBACK = {"127.0.0.1", "localhost", "::1"}


def wants_embedded_transcoder(settings: VistackSettings) -> bool:
    """True when asked to run one here and its address is on this machine."""
    host = urlsplit(f"//{settings.transcoder_address}").hostname or ""
    return settings.run_transcoder and host in LOOPBACK


@contextlib.asynccontextmanager
async def transcoder_hook(hub: Hub, up: UpContext) -> AsyncIterator[None]:
    """Vistack's ``up`` hook: serve a transcoder (when wanted) until ``up`` stops."""
    if not any(p.name == NAME for p in hub.pipelines):
        yield
        return
    settings = VistackSettings()
    if not wants_embedded_transcoder(settings) or hub.blobs is None:
        yield
        return
    problems = media_tools.missing()
    if problems:
        up.warn("videos cannot be transcoded here: " + "; ".join(map(str, problems)))
        yield
        return
    from .transcoder.server import start
    from .transcoder.service import TranscoderService

    try:
        running = await start(TranscoderService(hub.blobs), settings.transcoder_address)
    except ConfigurationError as exc:
        up.warn(f"no transcoder started ({exc}): is one already running there?")
        yield
        return
    up.say(f"vistack transcoder on {running.address}")
    try:
        yield
    finally:
        await running.stop(5.0)
