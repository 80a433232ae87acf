"""``aigc-hub up``'s word about the documents pipeline: one line at start when this hub has
no embedding model (the ``ml`` extra is missing), saying how to get one; uploads are then
refused with 503 rather than queued for a model that is not there."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from aigc_hub.pipeline import UpContext

from .adapters import minilm
from .settings import DocumentsSettings

if TYPE_CHECKING:
    from aigc_hub.bootstrap import Hub


@contextlib.asynccontextmanager
async def model_check(_hub: Hub, up: UpContext) -> AsyncIterator[None]:
    """Warn once when the documents pipeline will run without its embedding model."""
    # `up` enters its hooks before the hub starts, so the pipeline's state (and the
    # embedder it holds) does not exist yet: ask what its factory will find instead.
    if DocumentsSettings().embedder == "minilm":
        missing = minilm.missing_packages()
        if missing is not None:
            up.warn(
                f"documents cannot be indexed here: {missing}, or set AIGC_HUB_DOCS_EMBEDDER=openai"
            )
    yield
