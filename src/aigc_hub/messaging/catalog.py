"""The topic catalog: the backbone's own topics here; every pipeline declares its own.

A pipeline declares its topics with ``Pipeline.topic`` in its folder; the hub and
``aigc-hub topics`` merge them into this catalog, so only installed pipelines' topics exist.
Partitions and retention follow the seeds' tables where they give them; where a seed names
a topic without numbers we pick 12 partitions and 7 days, and say so in ``note``.
``profile`` selects the delivery road: ``reliable`` (outbox, inbox, ``acks=all``) or
``telemetry`` (at-most-once, batched, never billing).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Literal

DAY_MS = 24 * 3600 * 1000

#: Where every consumer's exhausted or poisoned messages go.
DLQ_TOPIC = "topic.system.dlq"
#: Seed 000's retry topic, declared under its name; nothing is published to it: the runtime
#: parks a failing key's head in the ``redeliveries`` table and redelivers it from there
#: (docs/topics.md says why a table: only the failing key waits, the others flow).
RETRY_TOPIC = "topic.system.retry"
#: Where every pipeline's notifications travel (seed 004 §3.5.3 names it).
NOTIFICATION_TOPIC = "notification.event"


@dataclass(frozen=True)
class TopicSpec:
    """A topic's declaration: name, partitions, retention (None = forever) and profile."""

    name: str
    partitions: int
    retention_ms: int | None
    profile: Literal["reliable", "telemetry"] = "reliable"
    pipeline: str = "system"
    note: str = ""


def _days(n: int) -> int:
    return n * DAY_MS


_BACKBONE: tuple[TopicSpec, ...] = (
    TopicSpec(DLQ_TOPIC, 3, None, note="dead letters of every consumer"),
    TopicSpec(
        RETRY_TOPIC,
        6,
        _days(7),
        note="delayed redeliveries; partitions and retention not given by the seed",
    ),
    TopicSpec(
        NOTIFICATION_TOPIC,
        12,
        _days(7),
        note="hints that a subject changed (SSE); partitions and retention not given by the seed",
    ),
)


class TopicCatalog:
    """A set of topic declarations, looked up by name; names are unique."""

    def __init__(self, specs: Iterable[TopicSpec] = ()) -> None:
        self._specs: dict[str, TopicSpec] = {}
        for spec in specs:
            self.add(spec)

    def add(self, spec: TopicSpec) -> None:
        """Declare a topic; declaring the same name twice with other values is an error."""
        existing = self._specs.get(spec.name)
        if existing is not None and existing != spec:
            raise ValueError(f"topic {spec.name!r} declared twice with different settings")
        if spec.partitions < 1:
            raise ValueError(f"topic {spec.name!r} needs at least one partition")
        self._specs[spec.name] = spec

    def get(self, name: str) -> TopicSpec:
        """The declaration of ``name``; KeyError when unknown."""
        return self._specs[name]

    def __contains__(self, name: object) -> bool:
        return name in self._specs

    def __iter__(self) -> Iterator[TopicSpec]:
        return iter(sorted(self._specs.values(), key=lambda s: (s.pipeline, s.name)))

    def __len__(self) -> int:
        return len(self._specs)


def backbone_catalog() -> TopicCatalog:
    """A catalog holding the backbone's own topics (dead letters, retries, notifications)."""
    return TopicCatalog(_BACKBONE)
