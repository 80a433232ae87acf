"""``HubClient`` (sync, ``httpx.Client``) and ``AsyncHubClient`` (``httpx.AsyncClient``)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from types import TracebackType
from typing import Any, Self, TypeVar

import httpx

from aigc_hub.client import _core as core
from aigc_hub.client import _models as m
from aigc_hub.client._core import Call, RetryPolicy
from aigc_hub.client._errors import JobTimeout
from aigc_hub.client._streams import AsyncStreams, SyncStreams
from aigc_hub.client._tasks import AsyncTasks, SyncTasks

T = TypeVar("T")

DEFAULT_TIMEOUT = httpx.Timeout(10.0, connect=5.0)


class _Base:
    def __init__(self, retry: RetryPolicy | None) -> None:
        self.retry = retry or RetryPolicy()

    def _request(self, client: httpx.Client | httpx.AsyncClient, call: Call[Any]) -> httpx.Request:
        return client.build_request(
            call.method, call.path, params=call.params, json=call.json, headers=call.headers
        )


class HubClient(SyncTasks, SyncStreams, _Base):
    """A synchronous client of the AIGC Hub HTTP API (health, admin and event routes).

    ``transport`` replaces the network (tests); ``timeout`` is per attempt; ``retry`` bounds
    retries of calls that are safe to repeat (see :mod:`aigc_hub.client._core`). Use it as a
    context manager, or call :meth:`close`.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        transport: httpx.BaseTransport | None = None,
        timeout: float | httpx.Timeout = DEFAULT_TIMEOUT,
        retry: RetryPolicy | None = None,
    ) -> None:
        super().__init__(retry)
        self._http = httpx.Client(
            base_url=base_url,
            headers=core.default_headers(api_key),
            transport=transport,
            timeout=timeout,
        )

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def execute(self, call: Call[T]) -> T:
        """Send ``call`` (retrying as its policy allows) and parse its answer."""
        retry = 1
        while True:
            try:
                response = self._http.send(self._request(self._http, call))
            except httpx.TransportError as exc:
                delay = core.retry_delay_for_error(call, exc, retry, self.retry)
                if delay is None:
                    raise
            else:
                delay = core.retry_delay_for_response(call, response, retry, self.retry)
                if delay is None:
                    return call.parse(response)
                response.close()
            self._sleep(delay)
            retry += 1

    # -- health ----------------------------------------------------------------------------------

    def healthz(self) -> m.Health:
        return self.execute(core.healthz())

    def readyz(self) -> m.Health:
        """Raises :class:`~aigc_hub.client.Unavailable` (``extra["failed"]``) when not ready."""
        return self.execute(core.readyz())

    # -- dead letters ----------------------------------------------------------------------------

    def dlq_list(
        self,
        *,
        topic: str | None = None,
        consumer: str | None = None,
        pipeline: str | None = None,
        error_class: str | None = None,
        status: str | None = None,
        since: int | None = None,
        until: int | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> m.DeadLetterPage:
        """One page of dead letters, newest first (``status`` defaults to pending)."""
        return self.execute(
            core.dlq_list(
                topic=topic,
                consumer=consumer,
                pipeline=pipeline,
                error_class=error_class,
                status=status,
                since=since,
                until=until,
                limit=limit,
                cursor=cursor,
            )
        )

    def dlq_iter(
        self,
        *,
        topic: str | None = None,
        consumer: str | None = None,
        pipeline: str | None = None,
        error_class: str | None = None,
        status: str | None = None,
        since: int | None = None,
        until: int | None = None,
        page_size: int | None = None,
    ) -> Iterator[m.DeadLetter]:
        """Every matching dead letter, following ``next_cursor`` page by page."""
        cursor: str | None = None
        while True:
            page = self.dlq_list(
                topic=topic,
                consumer=consumer,
                pipeline=pipeline,
                error_class=error_class,
                status=status,
                since=since,
                until=until,
                limit=page_size,
                cursor=cursor,
            )
            yield from page.items
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    def dlq_get(self, dead_letter_id: int) -> m.DeadLetterDetail:
        return self.execute(core.dlq_get(dead_letter_id))

    def dlq_replay(self, dead_letter_id: int) -> m.DeadLetter:
        """Replay one dead letter; never retried once it may have reached the server."""
        return self.execute(core.dlq_replay(dead_letter_id))

    def dlq_replay_bulk(
        self,
        *,
        topic: str | None = None,
        consumer: str | None = None,
        pipeline: str | None = None,
        error_class: str | None = None,
        since: int | None = None,
        until: int | None = None,
        max: int | None = None,
        idempotency_key: str | None = None,
    ) -> m.JobAccepted:
        """Start a bulk replay job; one ``Idempotency-Key`` (generated) for all retries."""
        return self.execute(
            core.dlq_replay_bulk(
                topic=topic,
                consumer=consumer,
                pipeline=pipeline,
                error_class=error_class,
                since=since,
                until=until,
                max=max,
                idempotency_key=idempotency_key,
            )
        )

    def dlq_dismiss(self, ids: list[int], reason: str = "") -> m.Dismissed:
        """Dismiss pending dead letters; never retried once it may have reached the server."""
        return self.execute(core.dlq_dismiss(ids, reason))

    def job(self, job_id: str) -> m.Job:
        return self.execute(core.job(job_id))

    def wait_job(self, job_id: str, timeout: float = 60.0, interval: float = 0.2) -> m.Job:
        """Poll the job until it is done or failed; :class:`JobTimeout` after ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while True:
            found = self.job(job_id)
            if found.finished:
                return found
            left = deadline - time.monotonic()
            if left <= 0:
                raise JobTimeout(found)
            self._sleep(min(interval, left))

    # -- operations ------------------------------------------------------------------------------

    def lag(self) -> m.Lag:
        return self.execute(core.lag())

    def outbox(self) -> m.Outbox:
        return self.execute(core.outbox())

    def audit(self, limit: int | None = None, action: str | None = None) -> m.AuditPage:
        return self.execute(core.audit(limit, action))


class AsyncHubClient(AsyncTasks, AsyncStreams, _Base):
    """The asynchronous twin of :class:`HubClient` (same methods, awaited)."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        timeout: float | httpx.Timeout = DEFAULT_TIMEOUT,
        retry: RetryPolicy | None = None,
    ) -> None:
        super().__init__(retry)
        self._http = httpx.AsyncClient(
            base_url=base_url,
            headers=core.default_headers(api_key),
            transport=transport,
            timeout=timeout,
        )

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        await self._http.aclose()

    async def _sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    async def execute(self, call: Call[T]) -> T:
        """Send ``call`` (retrying as its policy allows) and parse its answer."""
        retry = 1
        while True:
            try:
                response = await self._http.send(self._request(self._http, call))
            except httpx.TransportError as exc:
                delay = core.retry_delay_for_error(call, exc, retry, self.retry)
                if delay is None:
                    raise
            else:
                delay = core.retry_delay_for_response(call, response, retry, self.retry)
                if delay is None:
                    return call.parse(response)
                await response.aclose()
            await self._sleep(delay)
            retry += 1

    async def healthz(self) -> m.Health:
        return await self.execute(core.healthz())

    async def readyz(self) -> m.Health:
        return await self.execute(core.readyz())

    async def dlq_list(
        self,
        *,
        topic: str | None = None,
        consumer: str | None = None,
        pipeline: str | None = None,
        error_class: str | None = None,
        status: str | None = None,
        since: int | None = None,
        until: int | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> m.DeadLetterPage:
        return await self.execute(
            core.dlq_list(
                topic=topic,
                consumer=consumer,
                pipeline=pipeline,
                error_class=error_class,
                status=status,
                since=since,
                until=until,
                limit=limit,
                cursor=cursor,
            )
        )

    async def dlq_iter(
        self,
        *,
        topic: str | None = None,
        consumer: str | None = None,
        pipeline: str | None = None,
        error_class: str | None = None,
        status: str | None = None,
        since: int | None = None,
        until: int | None = None,
        page_size: int | None = None,
    ) -> AsyncIterator[m.DeadLetter]:
        cursor: str | None = None
        while True:
            page = await self.dlq_list(
                topic=topic,
                consumer=consumer,
                pipeline=pipeline,
                error_class=error_class,
                status=status,
                since=since,
                until=until,
                limit=page_size,
                cursor=cursor,
            )
            for item in page.items:
                yield item
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    async def dlq_get(self, dead_letter_id: int) -> m.DeadLetterDetail:
        return await self.execute(core.dlq_get(dead_letter_id))

    async def dlq_replay(self, dead_letter_id: int) -> m.DeadLetter:
        return await self.execute(core.dlq_replay(dead_letter_id))

    async def dlq_replay_bulk(
        self,
        *,
        topic: str | None = None,
        consumer: str | None = None,
        pipeline: str | None = None,
        error_class: str | None = None,
        since: int | None = None,
        until: int | None = None,
        max: int | None = None,
        idempotency_key: str | None = None,
    ) -> m.JobAccepted:
        return await self.execute(
            core.dlq_replay_bulk(
                topic=topic,
                consumer=consumer,
                pipeline=pipeline,
                error_class=error_class,
                since=since,
                until=until,
                max=max,
                idempotency_key=idempotency_key,
            )
        )

    async def dlq_dismiss(self, ids: list[int], reason: str = "") -> m.Dismissed:
        return await self.execute(core.dlq_dismiss(ids, reason))

    async def job(self, job_id: str) -> m.Job:
        return await self.execute(core.job(job_id))

    async def wait_job(self, job_id: str, timeout: float = 60.0, interval: float = 0.2) -> m.Job:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            found = await self.job(job_id)
            if found.finished:
                return found
            left = deadline - loop.time()
            if left <= 0:
                raise JobTimeout(found)
            await self._sleep(min(interval, left))

    async def lag(self) -> m.Lag:
        return await self.execute(core.lag())

    async def outbox(self) -> m.Outbox:
        return await self.execute(core.outbox())

    async def audit(self, limit: int | None = None, action: str | None = None) -> m.AuditPage:
        return await self.execute(core.audit(limit, action))
