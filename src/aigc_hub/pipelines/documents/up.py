"""``aigc-hub up``'s word about the documents pipeline: one line at start when this hub has
no embedding model (the ``ml`` extra is missing), saying how to get one; uploads are then
refused with 503 rather than queued for a model that is not there."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from aigc_hub.pipeline import UpContext

from .adapters.embedder import AbsentEmbedder
from .state import STATE

if TYPE_CHECKING:
    from aigc_hub.bootstrap import Hub


@contextlib.asynccontextmanager
async def model_check(hub: Hub, up: UpContext) -> AsyncIterator[None]:
    """Warn once when the documents pipeline runs without its embedding model."""
    embedder = hub.state_of(STATE).embedder
    if isinstance(embedder, AbsentEmbedder):
        up.warn(f"documents cannot be indexed here: {embedder.reason}")
    yield
