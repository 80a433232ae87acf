"""The engines the broker contract runs on: one ``broker_factory`` param per engine.

A factory opens brokers of its engine on one store shared by the test (a second call opens
another broker on the same log, as a second process would) and closes them afterwards.
Add an engine by writing a :class:`BrokerFactory` subclass and one line in ``ENGINES``;
its ``marks`` (e.g. ``pytest.mark.kafka``) gate it on the service it needs.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import ClassVar

import pytest

from aigc_hub.core.clock import ManualClock
from aigc_hub.messaging.base import Broker
from aigc_hub.messaging.embedded import EmbeddedBroker
from aigc_hub.messaging.memory import MemoryBroker
from aigc_hub.testing import tansu


class BrokerFactory:
    """Opens brokers of one engine on the test's store; what an engine cannot do is None."""

    marks: ClassVar[tuple[pytest.MarkDecorator, ...]] = ()

    def __init__(self, request: pytest.FixtureRequest) -> None:
        self.request = request
        #: The clock the engine stamps records and leases with, when it takes one.
        self.clock = ManualClock()
        self._opened: list[Broker] = []

    def __call__(self) -> Broker:
        """A new broker on the shared store, closed at teardown."""
        broker = self.open()
        self._opened.append(broker)
        return broker

    def open(self) -> Broker:
        """Build a broker (engine-specific)."""
        raise NotImplementedError

    async def expire(self, broker: Broker) -> int | None:
        """Apply retention now (count deleted), or None when the engine cannot be made to."""
        return None

    def subprocess_code(self) -> str | None:
        """Python source binding ``broker`` to this store in another process, or None."""
        return None

    async def aclose(self) -> None:
        """Close every broker this factory opened, newest first."""
        for broker in reversed(self._opened):
            await broker.close()


class MemoryFactory(BrokerFactory):
    """In-process memory broker; each call is a separate, empty broker."""

    def open(self) -> Broker:
        return MemoryBroker(clock=self.clock)


class EmbeddedFactory(BrokerFactory):
    """SQLite log in the test's tmp_path, with fast heartbeats and polling."""

    def __init__(self, request: pytest.FixtureRequest) -> None:
        super().__init__(request)
        self.path: Path = request.getfixturevalue("tmp_path") / "log.db"

    def open(self) -> Broker:
        return EmbeddedBroker(
            self.path,
            clock=self.clock,
            poll_interval=0.01,
            heartbeat_interval=0.05,
            lease_ttl=5.0,
            retention_interval=None,
        )

    async def expire(self, broker: Broker) -> int | None:
        assert isinstance(broker, EmbeddedBroker)
        return await broker.enforce_retention()

    def subprocess_code(self) -> str:
        return (
            "from aigc_hub.messaging.embedded import EmbeddedBroker\n"
            f"broker = EmbeddedBroker({str(self.path)!r}, retention_interval=None)\n"
        )


class KafkaFactory(BrokerFactory):
    """Kafka protocol: one Tansu per session (or ``$AIGC_HUB_TEST_KAFKA``); every call is a
    new client of the same cluster, as another process would be. Retention is the cluster's
    own business (records are stamped with real time), so ``expire`` cannot force it."""

    marks = (pytest.mark.kafka,)

    def __init__(self, request: pytest.FixtureRequest) -> None:
        super().__init__(request)
        self.endpoint: tansu.KafkaEndpoint = request.getfixturevalue("kafka_endpoint")

    def open(self) -> Broker:
        return self.endpoint.broker()

    def subprocess_code(self) -> str:
        options = self.endpoint.broker_options()
        return (
            "from aigc_hub.messaging.kafka import KafkaBroker\n"
            f"broker = KafkaBroker({self.endpoint.bootstrap!r}, **{options!r})\n"
        )


ENGINES: dict[str, type[BrokerFactory]] = {
    "memory": MemoryFactory,
    "embedded": EmbeddedFactory,
    "kafka": KafkaFactory,
}


@pytest.fixture(params=[pytest.param(name, marks=f.marks, id=name) for name, f in ENGINES.items()])
async def broker_factory(request: pytest.FixtureRequest) -> AsyncIterator[BrokerFactory]:
    """Opens brokers of one engine; the same contract test runs once per engine."""
    factory = ENGINES[request.param](request)
    yield factory
    await factory.aclose()
