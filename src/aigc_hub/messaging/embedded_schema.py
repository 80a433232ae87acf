"""The embedded log's private file format, and the in-process signals its brokers share.

One SQLite file holds topics, partitions (each with the next offset to assign), records
keyed by (partition id, offset), and per group: committed offsets, partition owners with
lease expiry, live members and a generation bumped whenever partitions need re-spreading.
It has its own metadata (not the hub's tables) and is created with ``create_all``.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable, Iterable, Mapping

import orjson
import sqlalchemy as sa
from sqlalchemy.dialects import sqlite

metadata = sa.MetaData()

#: Topics: partition count is fixed at creation; retention may change (None = keep forever).
topics = sa.Table(
    "topics",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("name", sa.Text, nullable=False, unique=True),
    sa.Column("partitions", sa.Integer, nullable=False),
    sa.Column("retention_ms", sa.BigInteger, nullable=True),
)

#: One row per partition; ``next_offset`` is the end offset, bumped by each append.
partitions = sa.Table(
    "partitions",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("topic_id", sa.Integer, sa.ForeignKey("topics.id"), nullable=False),
    sa.Column("partition", sa.Integer, nullable=False),
    sa.Column("next_offset", sa.BigInteger, nullable=False),
    sa.UniqueConstraint("topic_id", "partition"),
)

#: The log itself, clustered by (partition id, offset) so a fetch reads one contiguous range.
records = sa.Table(
    "records",
    metadata,
    sa.Column("tp_id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("offset", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("key", sa.Text, nullable=True),
    sa.Column("value", sa.LargeBinary, nullable=False),
    sa.Column("headers", sa.Text, nullable=False),  # a JSON object of str -> str
    sa.Column("timestamp_ms", sa.BigInteger, nullable=False),
    sqlite_with_rowid=False,
)

#: The append statement in the driver's own form (qmark parameters in the table's column
#: order), for ``executemany`` on tuples: see ``EmbeddedBroker.publish``.
INSERT_RECORD = str(records.insert().compile(dialect=sqlite.dialect()))

#: The headers column of a record without headers.
NO_HEADERS = "{}"


def encode_headers(headers: Mapping[str, str]) -> str:
    """A record's headers as the JSON object text the ``headers`` column holds."""
    return orjson.dumps(dict(headers)).decode() if headers else NO_HEADERS


def decode_headers(text: str) -> dict[str, str]:
    """The headers of a ``headers`` column (a fresh dict each time: records share none)."""
    if text == NO_HEADERS:  # most telemetry records: no parse
        return {}
    headers: dict[str, str] = orjson.loads(text)
    return headers


#: Per group and partition: committed offset and the member holding it until its lease ends.
group_partitions = sa.Table(
    "group_partitions",
    metadata,
    sa.Column("grp", sa.Text, primary_key=True),
    sa.Column("tp_id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("committed", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("owner", sa.Text, nullable=True),
    sa.Column("lease_expires_ms", sa.BigInteger, nullable=False, server_default="0"),
)

#: Members of a group; one counts as live while ``expires_ms`` is in the future.
members = sa.Table(
    "members",
    metadata,
    sa.Column("grp", sa.Text, primary_key=True),
    sa.Column("member_id", sa.Text, primary_key=True),
    sa.Column("expires_ms", sa.BigInteger, nullable=False),
)

#: Bumped on joins and releases, so members re-spread partitions without waiting a heartbeat.
groups = sa.Table(
    "groups",
    metadata,
    sa.Column("grp", sa.Text, primary_key=True),
    sa.Column("generation", sa.Integer, nullable=False),
)


class Signal:
    """What brokers of one file in one event loop share: wake-ups and a write lock.

    A reader registers one event for the topics it reads (:meth:`watch`): an append wakes
    only the readers of the topics appended to, so a busy topic does not make every consumer
    group of the process re-read the file for nothing. :meth:`notify` wakes every reader (a
    member joined or left: assignments may have moved). Appends by other processes wake no
    one here; readers find them at their next poll (``poll_interval``).

    The lock keeps this process's writers from spinning in SQLite's busy handler; other
    processes still meet at the file's own lock (BEGIN IMMEDIATE + busy timeout).
    """

    #: What :meth:`watch` makes (a test swaps in an event that says when someone waits).
    event_factory: Callable[[], asyncio.Event] = asyncio.Event

    def __init__(self) -> None:
        self.write_lock = asyncio.Lock()
        self._readers: dict[str, set[asyncio.Event]] = {}
        self._all: set[asyncio.Event] = set()

    def watch(self, topics: Iterable[str]) -> asyncio.Event:
        """A new event, set by appends to ``topics`` and by :meth:`notify`; the reader clears
        it before each read and waits on it after an empty one (no wake-up is lost)."""
        event = self.event_factory()
        for topic in topics:
            self._readers.setdefault(topic, set()).add(event)
        self._all.add(event)
        return event

    def unwatch(self, event: asyncio.Event) -> None:
        """Forget ``event`` (its reader closed)."""
        self._all.discard(event)
        for readers in self._readers.values():
            readers.discard(event)

    def appended(self, topics: Iterable[str]) -> None:
        """Wake the readers of ``topics``."""
        for topic in topics:
            for event in self._readers.get(topic, ()):
                event.set()

    def notify(self) -> None:
        """Wake every reader."""
        for event in self._all:
            event.set()


_SIGNALS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, Signal]] = (
    weakref.WeakKeyDictionary()
)


async def stopped_within(stop: asyncio.Event, seconds: float) -> bool:
    """Wait up to ``seconds`` for ``stop``; True when it is set (a loop's polite exit)."""
    try:
        async with asyncio.timeout(seconds):
            await stop.wait()
    except TimeoutError:
        return False
    return True


async def wait_either(first: asyncio.Event, second: asyncio.Event) -> None:
    """Wait until either event is set."""
    if first.is_set() or second.is_set():
        return
    waits = [asyncio.create_task(first.wait()), asyncio.create_task(second.wait())]
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in waits:
            task.cancel()


def signal_for(path: str) -> Signal:
    """The signal of the log file at absolute ``path`` in the running event loop."""
    per_loop = _SIGNALS.setdefault(asyncio.get_running_loop(), {})
    return per_loop.setdefault(path, Signal())
