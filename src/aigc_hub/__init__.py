"""AIGC Hub: exactly-once effects for long, costly, unreliable AI-content jobs.

The public surface is small: build a :class:`Pipeline` (topics, event schemas, handlers),
give it to a :class:`Hub` built from a :class:`HubConfig` (or run ``aigc-hub up``), and
write services that put facts and :class:`Envelope` events into one transaction.
"""

from __future__ import annotations

from aigc_hub.bootstrap import Hub
from aigc_hub.core.clock import Clock, ManualClock, SystemClock
from aigc_hub.core.envelope import Envelope
from aigc_hub.core.errors import (
    EnvelopeError,
    HubError,
    PermanentError,
    Retry,
    RetryableError,
    SchemaError,
    StaleTransition,
)
from aigc_hub.core.ids import new_id
from aigc_hub.core.retry import RetryDecision, RetryPolicy
from aigc_hub.hub_config import HubConfig
from aigc_hub.messaging.catalog import TopicSpec
from aigc_hub.pipeline import Pipeline
from aigc_hub.runtime.context import HandlerContext
from aigc_hub.settings import Settings
from aigc_hub.store.transitions import transition

__version__ = "0.1.0"

__all__ = [
    "Clock",
    "Envelope",
    "EnvelopeError",
    "HandlerContext",
    "Hub",
    "HubConfig",
    "HubError",
    "ManualClock",
    "PermanentError",
    "Pipeline",
    "Retry",
    "RetryDecision",
    "RetryPolicy",
    "RetryableError",
    "SchemaError",
    "Settings",
    "StaleTransition",
    "SystemClock",
    "TopicSpec",
    "__version__",
    "new_id",
    "transition",
]
