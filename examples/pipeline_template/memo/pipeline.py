"""``Pipeline("memo")``: everything the hub needs from this folder, declared in one place."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from aigc_hub.messaging.catalog import DAY_MS, TopicSpec
from aigc_hub.pipeline import Pipeline

from . import handlers, http, models
from .scanners import Archiver
from .settings import MemoSettings

if TYPE_CHECKING:
    from aigc_hub.bootstrap import Hub

pipeline = Pipeline(
    "memo",
    settings=MemoSettings,
    cli=f"{__package__}.cli:app",
    models=models.__name__,
    migrations=Path(__file__).resolve().parent / "migrations",
)
pipeline.topic(TopicSpec(handlers.TOPIC, 3, 7 * DAY_MS, pipeline="memo", note="notes written"))
pipeline.event(handlers.NOTE_WRITTEN, topic=handlers.TOPIC)(handlers.NoteWritten)
pipeline.handler("memo-stamper", [handlers.TOPIC], concurrency=2)(handlers.stamp)
pipeline.routers.append(http.router)


@pipeline.scanner
def archiver(hub: Hub) -> Archiver:
    """The archiver, with the settings in force when the hub starts."""
    return Archiver(hub.engine, MemoSettings())
