"""What the clients share for ``GET /v1/events``: an SSE line parser, typed events, and the
decisions of ``events()`` and ``wait_for()`` (when to reconnect, when to fall back to polling).

The parser follows the WHATWG event-stream rules the server relies on: ``field: value``
lines, a blank line ends an event, ``:`` lines are comments (the server's ``ready`` and
``heartbeat``), ``data`` lines join with newlines.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import httpx

from aigc_hub.client import _models as m
from aigc_hub.client._core import RETRY_STATUSES, RetryPolicy
from aigc_hub.client._errors import HubAPIError

PATH = "/v1/events"
#: Reads wait past several heartbeats (15 s by default) before calling the stream dead.
STREAM_TIMEOUT = httpx.Timeout(10.0, read=60.0)
#: Answers meaning "no event stream here": ``wait_for`` polls instead.
FALLBACK_STATUSES = frozenset({404, 405, 429, 501, 502, 503, 504})
#: The server's longest ``max_seconds``.
MAX_SECONDS = 86_400.0

#: Comment markers the server sends: subscribed, and still alive.
READY = "ready"
HEARTBEAT = "heartbeat"


@dataclass(frozen=True)
class Event:
    """A stream event: a ``notification``, or a ``reset`` (re-read your snapshots).

    ``id`` resumes the stream after this event (``last_event_id``).
    """

    kind: Literal["notification", "reset"]
    id: str | None
    notification: m.Notification | None = None
    reason: str | None = None


#: What one connection yields: events, and the comments ``ready`` / ``heartbeat``.
StreamItem = Event | str

#: Whether a notification may have changed what a waiter looks for in the snapshot.
NotificationFilter = Callable[[m.Notification], bool]


def worth_a_look(item: StreamItem, worth_reading: NotificationFilter | None) -> bool:
    """Whether ``item`` calls for reading the snapshot again: being subscribed (``ready``), a
    reset, or a notification that ``worth_reading`` accepts (all, without one)."""
    if item == HEARTBEAT:
        return False
    if isinstance(item, Event) and item.notification is not None and worth_reading is not None:
        return worth_reading(item.notification)
    return True


class Parser:
    """Turns event-stream lines into :data:`StreamItem` values; one instance per connection."""

    def __init__(self) -> None:
        self._event: str | None = None
        self._id: str | None = None
        self._data: list[str] = []

    def feed(self, line: str) -> StreamItem | None:
        """The item a line completes (a blank line ends an event; a comment is one), or None."""
        if line == "":
            event, ident, data = self._event, self._id, self._data
            self._event, self._id, self._data = None, None, []
            return _decode(event, ident, "\n".join(data)) if data or event else None
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "":
            return value.strip() or None
        if name == "event":
            self._event = value
        elif name == "id":
            self._id = value
        elif name == "data":
            self._data.append(value)
        return None


def _decode(event: str | None, ident: str | None, data: str) -> Event | None:
    try:
        body: Any = json.loads(data) if data else {}
    except ValueError:
        return None  # not ours: skip it
    if event == "notification":
        return Event("notification", ident, notification=m.Notification.model_validate(body))
    if event == "reset":
        reason = body.get("reason") if isinstance(body, dict) else None
        return Event("reset", ident, reason=reason if isinstance(reason, str) else None)
    return None  # an event type this client does not know


def request_params(subject_id: str | list[str] | None, max_seconds: float | None) -> dict[str, Any]:
    """Query parameters of a stream request."""
    params: dict[str, Any] = {}
    if subject_id is not None:
        params["subject_id"] = [subject_id] if isinstance(subject_id, str) else list(subject_id)
    if max_seconds is not None:
        params["max_seconds"] = min(MAX_SECONDS, max(0.1, max_seconds))
    return params


def request_headers(last_event_id: str | None) -> dict[str, str]:
    """Headers of a stream request (``Last-Event-ID`` when resuming)."""
    headers = {"Accept": "text/event-stream"}
    if last_event_id:
        headers["Last-Event-ID"] = last_event_id
    return headers


def reconnect_delay(error: Exception, failures: int, policy: RetryPolicy) -> float | None:
    """Seconds to wait before opening the stream again after ``error`` (the ``failures``-th in
    a row), or ``None`` to give up: transport errors and 429/502/503/504 are worth another try,
    honouring the server's ``Retry-After`` (capped)."""
    if failures >= policy.attempts:
        return None
    if isinstance(error, httpx.TransportError):
        return policy.backoff(failures)
    if isinstance(error, HubAPIError) and error.status in RETRY_STATUSES:
        return policy.delay(failures, error.retry_after)
    return None


def polling_pause(error: HubAPIError, poll_interval: float) -> float:
    """How long a poller told to slow down (429/502–504) waits before its next read; any other
    error answer is raised again."""
    if error.status not in RETRY_STATUSES:
        raise error
    return error.retry_after or poll_interval


def stream_unavailable(error: Exception) -> bool:
    """Whether ``error`` means the event stream cannot be used (so polling should)."""
    if isinstance(error, httpx.TransportError):
        return True
    return isinstance(error, HubAPIError) and error.status in FALLBACK_STATUSES
