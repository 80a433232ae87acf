"""The topic catalog: every topic of the four seeds, declared once.

Partitions and retention follow the seeds' tables where they give them (seed 000 §9.1,
seed 003 §2.2); where a seed names a topic without numbers (seed 002, seed 004 §3.5.3)
we pick 12 partitions and 7 days, and say so in ``note``. ``profile`` selects the
delivery road: ``reliable`` (outbox, inbox, ``acks=all``) or ``telemetry`` (at-most-once,
batched, never billing).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Literal

DAY_MS = 24 * 3600 * 1000

#: Where every consumer's exhausted or poisoned messages go.
DLQ_TOPIC = "topic.system.dlq"
#: Seed 000's retry topic; the runtime parks failing keys and re-publishes to it.
RETRY_TOPIC = "topic.system.retry"


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


_SEEDED: tuple[TopicSpec, ...] = (
    # backbone (seed 000 §9.1, §9.3.3)
    TopicSpec(DLQ_TOPIC, 3, None, pipeline="system", note="dead letters of every consumer"),
    TopicSpec(
        RETRY_TOPIC,
        6,
        _days(7),
        pipeline="system",
        note="delayed redeliveries; partitions and retention not given by the seed",
    ),
    # avcc (seed 000 §9.1)
    TopicSpec("topic.avcc.apply.created", 6, _days(7), pipeline="avcc"),
    TopicSpec("topic.review.task.finished", 12, _days(7), pipeline="avcc"),
    TopicSpec("topic.chain.tx.pending", 6, _days(7), pipeline="avcc"),
    TopicSpec("topic.chain.tx.confirmed", 6, _days(30), pipeline="avcc"),
    TopicSpec("topic.playback.event", 24, _days(3), profile="telemetry", pipeline="avcc"),
    # documents (seed 003 §2.2)
    TopicSpec("documents-uploaded", 12, _days(7), pipeline="documents"),
    TopicSpec("chunks-created", 24, _days(3), pipeline="documents"),
    TopicSpec("embeddings-generated", 24, _days(3), pipeline="documents"),
    TopicSpec("ai-analysis-requests", 12, _days(7), pipeline="documents"),
    TopicSpec("ai-analysis-completed", 12, _days(30), pipeline="documents"),
    TopicSpec(
        "analysis-dlq",
        3,
        _days(30),
        pipeline="documents",
        note="seed 003's DLQ; the hub dead-letters into topic.system.dlq",
    ),
    # vistack (seed 002; numbers not given by the seed)
    *(
        TopicSpec(
            name,
            12,
            _days(7),
            pipeline="vistack",
            note="partitions and retention not given by the seed",
        )
        for name in ("transcode", "delete_file", "danmaku", "comment")
    ),
    # generation (seed 004 §3.5.3; numbers not given by the seed)
    *(
        TopicSpec(
            name,
            12,
            _days(7),
            pipeline="generation",
            note="partitions and retention not given by the seed",
        )
        for name in (
            "generation.dispatch",
            "provider.status.observe",
            "provider.poll",
            "output.fetch",
            "media.process",
            "render.execute",
            "billing.command",
            "notification.event",
            "reconcile.command",
        )
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


def seeded_catalog() -> TopicCatalog:
    """A catalog holding every topic named by the four seeds."""
    return TopicCatalog(_SEEDED)
