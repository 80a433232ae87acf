"""Webhook deliveries: Standard Webhooks signed, one ordered queue per job, bounded retries.

Every job change becomes one event with its own ``webhook-id`` (kept across retries and
duplicates, so receivers can drop repeats). A job's events go out one after another in the
background; a failed POST is retried with doubling backoff a few times, then given up (the
receiver must poll, as with any real provider). Faults may drop, duplicate or reorder them.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import json
import logging
import time
from typing import Any

import httpx

from aigc_hub.core.retry import RetryPolicy
from aigc_hub.providers.local.faults import FaultState
from aigc_hub.reliability import webhooks

log = logging.getLogger(__name__)
EVENT_TYPE = "job.updated"
#: A failed POST is sent again after 0.2 s, 0.4 s, 0.8 s, then given up.
REDELIVERY = RetryPolicy(base=0.2, factor=2.0, cap=0.8, max_retries=3)


@dataclasses.dataclass(frozen=True)
class Delivery:
    """One event for one receiver; ``body`` is the exact bytes that are signed and sent."""

    msg_id: str
    url: str
    body: bytes


class WebhookSender:
    """Sends each job's events in order, in background tasks; :meth:`close` stops them."""

    def __init__(
        self,
        secret: str,
        faults: FaultState,
        http: httpx.AsyncClient,
        *,
        retry: RetryPolicy = REDELIVERY,
        timeout_s: float = 5.0,
    ) -> None:
        webhooks.decode_secret(secret)  # fail at start-up, not at the first delivery
        self.secret = secret
        self.faults = faults
        self.http = http
        self.retry = retry
        self.timeout_s = timeout_s
        self._queues: dict[str, collections.deque[Delivery]] = {}
        self._held: dict[str, list[Delivery]] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}

    def publish(
        self, job_id: str, url: str, sequence: int, data: dict[str, Any], final: bool
    ) -> None:
        """Queue the event for ``data`` (a job snapshot); never blocks, never raises."""
        body = json.dumps({"type": EVENT_TYPE, "data": data}, separators=(",", ":")).encode()
        delivery = Delivery(msg_id=f"msg_{job_id}_{sequence}", url=url, body=body)
        queue = self._queues.setdefault(job_id, collections.deque())
        if self.faults.faults.reorder_webhooks and not final:
            self._held.setdefault(job_id, []).append(delivery)
            return
        queue.append(delivery)
        if final:  # the held progress events now arrive late, after the final one
            queue.extend(self._held.pop(job_id, []))
        if job_id not in self._tasks:
            self._tasks[job_id] = asyncio.create_task(self._drain(job_id))

    async def _drain(self, job_id: str) -> None:
        queue = self._queues[job_id]
        try:
            while queue:
                delivery = queue.popleft()
                if self.faults.take_drop():
                    self.faults.webhooks_dropped += 1
                    continue
                copies = 2 if self.faults.faults.duplicate_webhooks else 1
                for _ in range(copies):
                    await self._deliver(delivery)
        finally:
            del self._tasks[job_id]
            if not queue:
                self._queues.pop(job_id, None)

    async def _deliver(self, delivery: Delivery) -> None:
        for attempt in range(1 + self.retry.max_retries):
            if attempt:
                await asyncio.sleep(self.retry.jittered(attempt))
            headers = webhooks.sign_headers(
                self.secret, delivery.msg_id, int(time.time()), delivery.body
            )
            headers["content-type"] = "application/json"
            try:
                response = await self.http.post(
                    delivery.url, content=delivery.body, headers=headers, timeout=self.timeout_s
                )
            except httpx.HTTPError as exc:
                log.info("webhook %s to %s failed: %r", delivery.msg_id, delivery.url, exc)
                continue
            if response.is_success:
                self.faults.webhooks_sent += 1
                return
            log.info("webhook %s answered %s", delivery.msg_id, response.status_code)
        self.faults.webhooks_failed += 1

    async def flush(self) -> None:
        """Wait until every event queued so far was delivered or given up."""
        while self._tasks:
            await asyncio.gather(*self._tasks.values(), return_exceptions=True)

    async def close(self) -> None:
        """Stop delivering; queued events are dropped (receivers poll)."""
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
