"""The generation pipeline's topics (seed 004 §3.5.3), declared by the pipeline itself.

The seed names them without numbers: 12 partitions and 7 days each. Four carry today's
events; media, render, billing and reconcile are the seed's names for the next steps.
"""

from __future__ import annotations

from aigc_hub.messaging.catalog import DAY_MS, TopicSpec
from aigc_hub.pipeline import PipelineBase
from aigc_hub.pipelines.generation import events

NAMES = (
    events.DISPATCH,
    events.OBSERVE,
    events.POLL,
    events.FETCH,
    "media.process",
    "render.execute",
    "billing.command",
    "reconcile.command",
)


def register(pipeline: PipelineBase) -> None:
    """Declare every generation topic on ``pipeline``."""
    for name in NAMES:
        pipeline.topic(
            TopicSpec(
                name,
                12,
                7 * DAY_MS,
                pipeline=pipeline.name,
                note="partitions and retention not given by the seed",
            )
        )
