"""The per-process notification feed: tails ``notification.event`` and fans out to subscribers.

Each API process tails every partition of the topic from the end (``Broker.tail``: no group,
no history, no committed state), numbers what it sees in arrival order, keeps the last
``window_size`` notifications of at most ``window_s`` seconds, and hands each one to the
subscribers whose tenant (and subjects) match, through a bounded queue per subscriber. A
subscriber whose queue is full is cut off: its pending notifications are dropped and a
:class:`Gap` takes their place, so one slow client never blocks the feed or the others.

Positions are ``<feed>-<seq>``: ``feed`` is random per feed instance and ``seq`` counts
from 1. They order what *this* feed saw; another process (or this one after a restart) saw
the same records in another interleaving, so a position of another feed cannot be resumed
and answers a :class:`Gap`, as does one that fell out of the window. A gap means: re-read
the snapshots. Notifications are hints; the facts are in the database.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from aigc_hub.core.envelope import Envelope
from aigc_hub.core.errors import EnvelopeError
from aigc_hub.core.retry import RetryPolicy
from aigc_hub.messaging.base import Broker, Consumer, Record
from aigc_hub.reliability import notifications
from aigc_hub.reliability.notifications import Notification

log = logging.getLogger(__name__)

GapReason = Literal["unknown_id", "outside_window", "slow_subscriber"]


@dataclass(frozen=True)
class FeedSettings:
    """Window, queue and stream bounds of a feed and of the SSE route that reads it."""

    window_size: int = 10_000
    window_s: float = 600.0
    queue_size: int = 1_000
    heartbeat_s: float = 15.0
    max_stream_s: float = 3_600.0
    fetch_batch: int = 500


@dataclass(frozen=True)
class FeedItem:
    """A notification at its position in this feed."""

    id: str
    seq: int
    notification: Notification
    received_at: float  # monotonic seconds


@dataclass(frozen=True)
class Gap:
    """Notifications may have been missed since the subscriber's position: re-read snapshots.

    ``id`` is the feed position the gap brings the subscriber to: after re-reading its
    snapshots, a client that resumes from it misses nothing more.
    """

    reason: GapReason
    id: str | None = field(default=None, compare=False)


class Subscription:
    """One subscriber's bounded queue; read it from one task, :meth:`close` when done."""

    def __init__(
        self, feed: NotificationFeed, tenant_id: str, subjects: frozenset[str] | None, limit: int
    ) -> None:
        self.tenant_id = tenant_id
        self.subjects = subjects
        self._feed = feed
        self._limit = limit
        self._items: deque[FeedItem | Gap] = deque()
        self._ready = asyncio.Event()
        self.closed = False
        #: How often this subscriber was cut off for falling behind.
        self.cut_offs = 0

    def matches(self, notification: Notification) -> bool:
        """Whether ``notification`` is for this subscriber (tenant, and subject if filtered)."""
        if notification.tenant_id != self.tenant_id:
            return False
        return self.subjects is None or notification.subject_id in self.subjects

    def offer(self, item: FeedItem | Gap) -> None:
        """Queue ``item``; when full, drop what is pending and queue a gap (never blocks)."""
        if self.closed:
            return
        if len(self._items) >= self._limit:
            self._items.clear()
            seq = item.seq - 1 if isinstance(item, FeedItem) else self._feed.seq
            self._items.append(Gap("slow_subscriber", self._feed.position(seq)))
            self.cut_offs += 1
        self._items.append(item)
        self._ready.set()

    async def next(self, timeout: float) -> FeedItem | Gap | None:
        """The next item, waiting up to ``timeout`` s; None on timeout or once closed."""
        if not self._items and not self.closed:
            self._ready.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._ready.wait()
        return self._items.popleft() if self._items else None

    def close(self) -> None:
        """Stop receiving; a waiting :meth:`next` returns None."""
        self.closed = True
        self._ready.set()
        self._feed._subscribers.discard(self)


class NotificationFeed:
    """Tails the notification topic of ``broker`` and serves subscribers; one per process.

    :meth:`start` is idempotent and cheap after the first call; :meth:`close` stops the
    tail and closes every subscription. Safe for many tasks of one event loop.
    """

    def __init__(self, broker: Broker, settings: FeedSettings | None = None) -> None:
        self.broker = broker
        self.settings = settings or FeedSettings()
        #: This feed's part of every position it hands out.
        self.feed_id = secrets.token_hex(4)
        self._window: deque[FeedItem] = deque()
        self._evicted_through = 0  # highest seq no longer in the window
        self._seq = 0
        self._subscribers: set[Subscription] = set()
        self._reader: Consumer | None = None
        self._task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()

    @property
    def running(self) -> bool:
        """Whether the tail is running."""
        return self._task is not None and not self._task.done()

    async def start(self) -> None:
        """Tail the topic from its end now (first call), in a background task."""
        if self._task is not None:
            return
        async with self._lock:
            if self._task is not None:
                return
            self._reader = await self.broker.tail([notifications.TOPIC])
            self._task = asyncio.create_task(self._run(self._reader), name="notification-feed")

    async def close(self) -> None:
        """Stop tailing and close every subscription; idempotent.

        A later :meth:`start` tails from the end again as a new feed (new positions, empty
        window): what was published meanwhile was not seen, so old ids must answer a gap.
        """
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._reader is not None:
            await self._reader.close()
            self._reader = None
        for sub in list(self._subscribers):
            sub.close()
        self.feed_id = secrets.token_hex(4)
        self._window.clear()
        self._evicted_through = self._seq = 0

    def subscribe(
        self,
        tenant_id: str,
        subject_ids: Iterable[str] | None = None,
        last_event_id: str | None = None,
    ) -> Subscription:
        """A subscription to ``tenant_id``'s notifications (of ``subject_ids`` if given).

        With ``last_event_id`` the window's later matching notifications are queued first,
        or a :class:`Gap` when that position is unknown or fell out of the window.
        """
        subjects = frozenset(subject_ids) if subject_ids else None
        sub = Subscription(self, tenant_id, subjects, self.settings.queue_size)
        if last_event_id is not None:
            self._prune(time.monotonic())
            seq = self._seq_of(last_event_id)
            if seq is None:
                sub.offer(Gap("unknown_id", self.position(self._seq)))
            elif seq < self._evicted_through:
                sub.offer(Gap("outside_window", self.position(self._seq)))
            else:
                for item in self._window:
                    if item.seq > seq and sub.matches(item.notification):
                        sub.offer(item)
        self._subscribers.add(sub)
        return sub

    def add(self, notification: Notification) -> FeedItem:
        """Append ``notification`` at the next position and offer it to matching subscribers."""
        now = time.monotonic()
        self._seq += 1
        item = FeedItem(self.position(self._seq), self._seq, notification, now)
        self._window.append(item)
        self._prune(now)
        for sub in list(self._subscribers):
            if sub.matches(notification):
                sub.offer(item)
        return item

    @property
    def seq(self) -> int:
        """The sequence number of the latest notification (0 before the first)."""
        return self._seq

    def position(self, seq: int) -> str:
        """The id of sequence number ``seq`` in this feed."""
        return f"{self.feed_id}-{seq}"

    @property
    def subscribers(self) -> int:
        """Open subscriptions."""
        return len(self._subscribers)

    def _seq_of(self, event_id: str) -> int | None:
        feed, _, seq = event_id.strip().partition("-")
        if feed != self.feed_id or not seq.isdigit():
            return None
        value = int(seq)
        return value if value <= self._seq else None

    def _prune(self, now: float) -> None:
        window, limit, oldest = (
            self._window,
            self.settings.window_size,
            now - self.settings.window_s,
        )
        while window and (len(window) > limit or window[0].received_at < oldest):
            self._evicted_through = window.popleft().seq

    async def _run(self, reader: Consumer) -> None:
        failures = 0
        while True:
            try:
                records = await reader.fetch(self.settings.fetch_batch, 1.0)
            except Exception:
                failures += 1
                log.exception("notification feed: fetch failed (%d in a row)", failures)
                await asyncio.sleep(_FETCH_RETRY.jittered(failures))
                continue
            failures = 0
            for record in records:
                found = _notification_of(record)
                if found is not None:
                    self.add(found)


#: A feed whose broker fetch fails tries again after 1 s, 2 s, 4 s… up to 30 s, for as long
#: as the hub runs (the feed is a view: nothing is lost while it waits).
_FETCH_RETRY = RetryPolicy(base=1.0, factor=2.0, cap=30.0, jitter=0.1)


def _notification_of(record: Record) -> Notification | None:
    """The notification a record carries; None (logged) for anything else on the topic."""
    try:
        envelope = Envelope.from_bytes(record.value)
        if (envelope.event_type, envelope.schema_version) != (
            notifications.EVENT_TYPE,
            notifications.VERSION,
        ):
            return None
        return Notification.model_validate(envelope.payload)
    except (EnvelopeError, ValueError):
        log.warning(
            "notification feed: skipped an unreadable record at %s[%d]@%d",
            record.topic,
            record.partition,
            record.offset,
        )
        return None
