"""``events()`` and ``wait_for()`` of the clients: the SSE stream with reconnects, and waiting
for a subject over it with a polling fallback. Mixed into :class:`HubClient` (sync) and
:class:`AsyncHubClient` (async), which provide ``_http``, ``retry`` and ``_sleep``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import (
    AsyncGenerator,
    AsyncIterator,
    Awaitable,
    Callable,
    Generator,
    Iterator,
)
from typing import Any

import httpx

from aigc_hub.client import _core as core
from aigc_hub.client import _events as ev
from aigc_hub.client._core import RetryPolicy
from aigc_hub.client._errors import HubAPIError, WaitTimeout

Snapshot = dict[str, Any]


class SyncStreams:
    """The synchronous stream methods."""

    _http: httpx.Client
    retry: RetryPolicy

    def _sleep(self, seconds: float) -> None:
        raise NotImplementedError

    def _connect(
        self,
        subject_id: str | list[str] | None,
        last_event_id: str | None,
        max_seconds: float | None,
    ) -> Generator[ev.StreamItem, None, None]:
        """One connection's items; raises :class:`HubAPIError` when the route answers an error."""
        with self._http.stream(
            "GET",
            ev.PATH,
            params=ev.request_params(subject_id, max_seconds),
            headers=ev.request_headers(last_event_id),
            timeout=ev.STREAM_TIMEOUT,
        ) as response:
            if response.is_error:
                response.read()
                raise core.to_error(response)
            parser = ev.Parser()
            for line in response.iter_lines():
                item = parser.feed(line)
                if item is not None:
                    yield item

    def events(
        self,
        subject_id: str | list[str] | None = None,
        last_event_id: str | None = None,
        *,
        reconnect: bool = True,
    ) -> Iterator[ev.Event]:
        """The tenant's notifications and resets (``GET /v1/events``), until you stop iterating.

        A dropped or ended connection is reopened with the last event's id; transport errors
        and 429/502–504 answers are retried ``retry.attempts`` times in a row (after the
        server's ``Retry-After``, or a backoff), then raised. A ``reset`` event means re-read
        your snapshots. Other error answers raise :class:`HubAPIError` subclasses.
        """
        last, failures = last_event_id, 0
        while True:
            try:
                for item in self._connect(subject_id, last, None):
                    failures = 0
                    if isinstance(item, ev.Event):
                        last = item.id or last
                        yield item
            except (httpx.TransportError, HubAPIError) as exc:
                failures += 1
                delay = ev.reconnect_delay(exc, failures, self.retry) if reconnect else None
                if delay is None:
                    raise
                self._sleep(delay)
                continue
            if not reconnect:
                return

    def wait_for(
        self,
        subject_id: str,
        fetch_snapshot: Callable[[], Snapshot],
        is_done: Callable[[Snapshot], bool],
        timeout: float,
        poll_interval: float = 1.0,
        worth_reading: ev.NotificationFilter | None = None,
    ) -> Snapshot:
        """The subject's snapshot once ``is_done`` holds; :class:`WaitTimeout` after ``timeout``.

        Reads the snapshot first, then listens to the subject's notifications and reads it
        again once subscribed and on every notification or reset (notifications are hints,
        the snapshot is the fact); ``worth_reading``, when given, skips the read for
        notifications it refuses (e.g. progress steps when only a terminal state matters).
        A refused or dropped stream (connection error, 429, 502–504) is opened again after
        the server's ``Retry-After`` or a backoff, up to ``retry.attempts`` times in a row;
        when the stream stays unavailable (those, or 404/405/501) it polls every
        ``poll_interval`` s instead, waiting on through 429s.
        """
        deadline = time.monotonic() + timeout
        snapshot = fetch_snapshot()
        if is_done(snapshot):
            return snapshot
        last: str | None = None
        failures = 0
        while (left := deadline - time.monotonic()) > 0:
            try:
                with contextlib.closing(self._connect(subject_id, last, left)) as items:
                    for item in items:
                        failures = 0
                        if isinstance(item, ev.Event):
                            last = item.id or last
                        if not ev.worth_a_look(item, worth_reading):
                            continue
                        snapshot = fetch_snapshot()  # subscribed, notified or reset: look again
                        if is_done(snapshot):
                            return snapshot
            except Exception as exc:
                failures += 1
                delay = ev.reconnect_delay(exc, failures, self.retry)
                if delay is not None and delay < deadline - time.monotonic():
                    self._sleep(delay)  # rate-limited or dropped: the stream again
                    continue
                if not ev.stream_unavailable(exc):
                    raise
                break  # no stream to be had: poll
        while True:
            pause = poll_interval
            try:
                snapshot = fetch_snapshot()
            except HubAPIError as exc:
                pause = ev.polling_pause(exc, poll_interval)  # told to slow down: still waiting
            else:
                if is_done(snapshot):
                    return snapshot
            left = deadline - time.monotonic()
            if left <= 0:
                raise WaitTimeout(subject_id, snapshot)
            self._sleep(min(pause, left))


class AsyncStreams:
    """The asynchronous twins of :class:`SyncStreams`."""

    _http: httpx.AsyncClient
    retry: RetryPolicy

    async def _sleep(self, seconds: float) -> None:
        raise NotImplementedError

    async def _connect(
        self,
        subject_id: str | list[str] | None,
        last_event_id: str | None,
        max_seconds: float | None,
    ) -> AsyncGenerator[ev.StreamItem, None]:
        async with self._http.stream(
            "GET",
            ev.PATH,
            params=ev.request_params(subject_id, max_seconds),
            headers=ev.request_headers(last_event_id),
            timeout=ev.STREAM_TIMEOUT,
        ) as response:
            if response.is_error:
                await response.aread()
                raise core.to_error(response)
            parser = ev.Parser()
            async for line in response.aiter_lines():
                item = parser.feed(line)
                if item is not None:
                    yield item

    async def events(
        self,
        subject_id: str | list[str] | None = None,
        last_event_id: str | None = None,
        *,
        reconnect: bool = True,
    ) -> AsyncIterator[ev.Event]:
        """See :meth:`SyncStreams.events`."""
        last, failures = last_event_id, 0
        while True:
            try:
                async for item in self._connect(subject_id, last, None):
                    failures = 0
                    if isinstance(item, ev.Event):
                        last = item.id or last
                        yield item
            except (httpx.TransportError, HubAPIError) as exc:
                failures += 1
                delay = ev.reconnect_delay(exc, failures, self.retry) if reconnect else None
                if delay is None:
                    raise
                await self._sleep(delay)
                continue
            if not reconnect:
                return

    async def wait_for(
        self,
        subject_id: str,
        fetch_snapshot: Callable[[], Awaitable[Snapshot]],
        is_done: Callable[[Snapshot], bool],
        timeout: float,
        poll_interval: float = 1.0,
        worth_reading: ev.NotificationFilter | None = None,
    ) -> Snapshot:
        """See :meth:`SyncStreams.wait_for`; ``fetch_snapshot`` is a coroutine function here."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        snapshot = await fetch_snapshot()
        if is_done(snapshot):
            return snapshot
        last: str | None = None
        failures = 0
        while (left := deadline - loop.time()) > 0:
            try:
                async with contextlib.aclosing(self._connect(subject_id, last, left)) as items:
                    async for item in items:
                        failures = 0
                        if isinstance(item, ev.Event):
                            last = item.id or last
                        if not ev.worth_a_look(item, worth_reading):
                            continue
                        snapshot = await fetch_snapshot()
                        if is_done(snapshot):
                            return snapshot
            except Exception as exc:
                failures += 1
                delay = ev.reconnect_delay(exc, failures, self.retry)
                if delay is not None and delay < deadline - loop.time():
                    await self._sleep(delay)  # rate-limited or dropped: the stream again
                    continue
                if not ev.stream_unavailable(exc):
                    raise
                break  # no stream to be had: poll
        while True:
            pause = poll_interval
            try:
                snapshot = await fetch_snapshot()
            except HubAPIError as exc:
                pause = ev.polling_pause(exc, poll_interval)  # told to slow down: still waiting
            else:
                if is_done(snapshot):
                    return snapshot
            left = deadline - loop.time()
            if left <= 0:
                raise WaitTimeout(subject_id, snapshot)
            await self._sleep(min(pause, left))
