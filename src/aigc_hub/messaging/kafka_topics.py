"""Topic provisioning on Kafka: compare declarations with the cluster, create what is missing.

Kafka cannot shrink a topic and growing it moves keys to other partitions, so an existing
topic is never changed here: every difference from its declaration (partition count,
``retention.ms``) is reported as a :class:`TopicStatus`, and :class:`TopicMismatch` carries
them all when the caller wants an error. Missing topics are created with the declared
partitions and ``retention.ms`` (``-1`` for "forever"). Import through ``messaging.kafka``,
which names the extra to install when confluent-kafka is missing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import confluent_kafka as ck
from confluent_kafka import admin as ck_admin
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # re-exported, not in __all__
    ConfigResource,
    NewTopic,
    ResourceType,
)

from aigc_hub.core.errors import RetryableError
from aigc_hub.messaging.catalog import TopicSpec

Status = Literal["missing", "created", "unchanged", "differs"]
Unset = Literal["unset"]

#: Error codes meaning "the cluster did not answer", not "the request is wrong".
_UNREACHABLE = {
    ck.KafkaError._TRANSPORT,
    ck.KafkaError._TIMED_OUT,
    ck.KafkaError._ALL_BROKERS_DOWN,
    ck.KafkaError._RESOLVE,
    ck.KafkaError.REQUEST_TIMED_OUT,
    ck.KafkaError.BROKER_NOT_AVAILABLE,
}


class KafkaUnavailable(RetryableError):
    """The Kafka cluster did not answer in time."""


class TopicMismatch(ValueError):
    """Existing topics differ from their declarations; nothing was changed on them."""

    def __init__(self, statuses: Iterable[TopicStatus]) -> None:
        self.statuses = tuple(s for s in statuses if s.status == "differs")
        detail = "; ".join(
            f"topic {s.name!r}: {', '.join(str(d) for d in s.differences)}" for s in self.statuses
        )
        super().__init__(f"existing topics differ from their declarations: {detail}")


@dataclass(frozen=True)
class TopicState:
    """A topic as the cluster has it; ``retention_ms`` None is forever, "unset" is no config."""

    name: str
    partitions: int
    retention_ms: int | Unset | None


@dataclass(frozen=True)
class TopicDifference:
    """One setting in which an existing topic differs from its declaration."""

    setting: Literal["partitions", "retention.ms"]
    declared: int | None
    actual: int | Unset | None

    def __str__(self) -> str:
        return f"{self.setting} declared {_show(self.declared)}, actual {_show(self.actual)}"


@dataclass(frozen=True)
class TopicStatus:
    """What provisioning found (or did) for one declared topic."""

    spec: TopicSpec
    status: Status
    differences: tuple[TopicDifference, ...] = ()
    actual: TopicState | None = None

    @property
    def name(self) -> str:
        """The topic's name."""
        return self.spec.name


def _show(value: int | Unset | None) -> str:
    return "forever" if value is None else str(value)


def retention_config(retention_ms: int | None) -> str:
    """The ``retention.ms`` value for a declared retention (``-1`` is forever)."""
    return "-1" if retention_ms is None else str(retention_ms)


def unavailable(exc: ck.KafkaException, bootstrap: str) -> Exception:
    """``exc`` as :class:`KafkaUnavailable` when it means the cluster is unreachable."""
    err = exc.args[0] if exc.args else None
    if isinstance(err, ck.KafkaError) and err.code() in _UNREACHABLE:
        return KafkaUnavailable(f"Kafka at {bootstrap} is unreachable: {err.str()}")
    return exc


def compare(spec: TopicSpec, state: TopicState | None) -> TopicStatus:
    """The status of ``spec`` given the cluster's ``state`` of it (None: missing)."""
    if state is None:
        return TopicStatus(spec, "missing")
    diffs: list[TopicDifference] = []
    if state.partitions != spec.partitions:
        diffs.append(TopicDifference("partitions", spec.partitions, state.partitions))
    if state.retention_ms != spec.retention_ms:
        diffs.append(TopicDifference("retention.ms", spec.retention_ms, state.retention_ms))
    return TopicStatus(spec, "differs" if diffs else "unchanged", tuple(diffs), state)


async def describe(
    admin: ck_admin.AdminClient, names: Iterable[str], *, bootstrap: str, timeout: float
) -> dict[str, TopicState]:
    """Partitions and retention of those of ``names`` that exist on the cluster."""
    wanted = set(names)
    try:
        metadata = await asyncio.to_thread(admin.list_topics, timeout=timeout)
    except ck.KafkaException as exc:
        raise unavailable(exc, bootstrap) from None
    counts = {
        name: len(meta.partitions)
        for name, meta in metadata.topics.items()
        if name in wanted and meta.error is None
    }
    if not counts:
        return {}
    resources = [ConfigResource(ResourceType.TOPIC, name) for name in counts]
    futures = admin.describe_configs(resources, request_timeout=timeout)
    states: dict[str, TopicState] = {}
    for resource, future in futures.items():
        name = resource.name
        try:
            entries: dict[str, Any] = await asyncio.wrap_future(future)
        except ck.KafkaException as exc:
            raise unavailable(exc, bootstrap) from None
        entry = entries.get("retention.ms")
        retention: int | Unset | None = "unset"
        if entry is not None and entry.value is not None:
            value = int(entry.value)
            retention = None if value < 0 else value
        states[name] = TopicState(name, counts[name], retention)
    admin.poll(0)  # serve queued client logs
    return states


async def plan(
    admin: ck_admin.AdminClient, specs: Sequence[TopicSpec], *, bootstrap: str, timeout: float
) -> list[TopicStatus]:
    """What provisioning would do: each spec as missing, unchanged or differs; changes nothing."""
    states = await describe(admin, [s.name for s in specs], bootstrap=bootstrap, timeout=timeout)
    return [compare(spec, states.get(spec.name)) for spec in specs]


async def apply(
    admin: ck_admin.AdminClient,
    specs: Sequence[TopicSpec],
    *,
    bootstrap: str,
    timeout: float,
    replication_factor: int = -1,
) -> list[TopicStatus]:
    """Create the missing topics; each spec comes back created, unchanged or differs."""
    planned = await plan(admin, specs, bootstrap=bootstrap, timeout=timeout)
    missing = [s.spec for s in planned if s.status == "missing"]
    if not missing:
        return planned
    new = [
        NewTopic(
            spec.name,
            spec.partitions,
            replication_factor,
            config={"retention.ms": retention_config(spec.retention_ms)},
        )
        for spec in missing
    ]
    futures = admin.create_topics(new, operation_timeout=timeout, request_timeout=timeout)
    raced: list[str] = []
    for name, future in futures.items():
        try:
            await asyncio.wrap_future(future)
        except ck.KafkaException as exc:
            if exc.args[0].code() != ck.KafkaError.TOPIC_ALREADY_EXISTS:
                raise unavailable(exc, bootstrap) from None
            raced.append(name)  # created meanwhile by someone else: compare it below
    again = await describe(admin, raced, bootstrap=bootstrap, timeout=timeout) if raced else {}
    out: list[TopicStatus] = []
    for status in planned:
        if status.status != "missing":
            out.append(status)
        elif status.name in raced:
            out.append(compare(status.spec, again.get(status.name)))
        else:
            spec = status.spec
            state = TopicState(spec.name, spec.partitions, spec.retention_ms)
            out.append(TopicStatus(spec, "created", (), state))
    return out


async def create_default(
    admin: ck_admin.AdminClient, name: str, *, bootstrap: str, timeout: float
) -> None:
    """Create an undeclared topic with one partition and the cluster's default retention."""
    futures = admin.create_topics([NewTopic(name, 1)], request_timeout=timeout)
    try:
        await asyncio.wrap_future(futures[name])
    except ck.KafkaException as exc:
        if exc.args[0].code() != ck.KafkaError.TOPIC_ALREADY_EXISTS:
            raise unavailable(exc, bootstrap) from None
