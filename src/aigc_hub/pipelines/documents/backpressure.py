"""Backpressure on the AI analysis (seed 003 §7): when the analysis falls behind or the
analyzer says it is overloaded, slow the analysis consumers and refuse new documents.

It turns on when either

* the ``ai-analysis-workers`` group's lag on ``ai-analysis-requests`` is above
  ``backpressure_on_lag`` (the seed's 10,000), checked at most every ``backpressure_check_s``
  (30 s), and stays on until it is below half of it (the seed's hysteresis); or
* the analyzer answered 429/503 (the seed's ``AiServiceOverloadException``): on for its
  ``Retry-After``, at least ``backpressure_hold_s``, renewed by every such answer.

While on, each analysis waits ``backpressure_delay_s`` (the seed's 2 s) before calling the
analyzer, and the admission gate answers 429 with ``Retry-After`` to new documents. The
overload is kept in the cache seam (``hub.cache.progress``, a value that only rises: the time
the overload lasts until), so every process of the hub sees what one worker heard: Redis at
scale, memory in one process. The lag check needs no background task: whoever asks for the
state (a request at the gate, an analysis) starts a check when the last one is older than the
interval, and goes on with the state known.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .events import ANALYSIS_REQUESTS_TOPIC

if TYPE_CHECKING:
    from aigc_hub.bootstrap import Hub

    from .settings import DocumentsSettings

log = logging.getLogger(__name__)

ANALYSIS_GROUP = "ai-analysis-workers"
#: The cache key holding until when (epoch ms) the analyzer is overloaded.
OVERLOADED_UNTIL = "documents:analyzer:overloaded-until"
#: How stale the shared overload may be in one process (seconds).
SHARED_FRESH_S = 1.0


@dataclass
class Backpressure:
    """The backpressure switch of one hub (see the module docstring)."""

    hub: Hub
    settings: DocumentsSettings
    _lag_on: bool = False
    _checked_at: float | None = None
    _read_at: float | None = None
    _overloaded_until_ms: float = 0.0
    _check: asyncio.Task[None] | None = field(default=None, repr=False)

    async def overloaded(self, retry_after_s: float | None) -> None:
        """The analyzer said it is overloaded: on for its Retry-After (at least the hold)."""
        hold_s = max(retry_after_s or 0.0, self.settings.backpressure_hold_s)
        until = self.hub.clock.now_ms() + hold_s * 1000
        self._overloaded_until_ms = max(self._overloaded_until_ms, until)
        await self.hub.cache.progress.raise_to(OVERLOADED_UNTIL, until, int(hold_s * 1000))
        log.warning("documents backpressure: the analyzer is overloaded for %.0f s", hold_s)

    async def refresh(self) -> None:
        """Read the shared overload and, once the interval passed, the analysis lag."""
        now = asyncio.get_running_loop().time()
        self._read_at = now
        found = await self.hub.cache.progress.read([OVERLOADED_UNTIL])
        self._overloaded_until_ms = max(self._overloaded_until_ms, found.get(OVERLOADED_UNTIL, 0))
        if self._checked_at is None or now - self._checked_at >= self.settings.backpressure_check_s:
            self._checked_at = now
            await self._check_lag()

    def active_reason(self) -> str | None:
        """Why backpressure is on now, or None (from the state known; starts a refresh when
        it is due, without waiting for it)."""
        self._refresh_soon()
        if self.hub.clock.now_ms() < self._overloaded_until_ms:
            return "the AI analyzer is overloaded"
        if self._lag_on:
            return f"the AI analysis is more than {self.settings.backpressure_on_lag} behind"
        return None

    def admission(self) -> tuple[int, str] | None:
        """The admission gate's check: refuse new documents while backpressure is on."""
        reason = self.active_reason()
        if reason is None:
            return None
        left_s = (self._overloaded_until_ms - self.hub.clock.now_ms()) / 1000
        return max(1, int(left_s) if left_s > 0 else int(self.settings.backpressure_check_s)), (
            f"documents: {reason}; retry later"
        )

    async def pace(self) -> None:
        """Before an analysis: wait the seed's delay while backpressure is on."""
        await self.refresh()
        if self.active_reason() is not None:
            await self.hub.clock.sleep(self.settings.backpressure_delay_s)

    def _refresh_soon(self) -> None:
        """Start a refresh when the state known is stale and none is under way."""
        if self._check is not None and not self._check.done():
            return
        with contextlib.suppress(RuntimeError):  # no running loop: nothing to start
            loop = asyncio.get_running_loop()
            if self._read_at is not None and loop.time() - self._read_at < SHARED_FRESH_S:
                return
            self._read_at = loop.time()
            self._check = loop.create_task(self._quiet_refresh())

    async def _quiet_refresh(self) -> None:
        try:
            await self.refresh()
        except Exception as exc:  # a failed check keeps the state known
            log.warning("documents backpressure check failed: %r", exc)

    async def _check_lag(self) -> None:
        rows = await self.hub.broker.lag(ANALYSIS_GROUP, [ANALYSIS_REQUESTS_TOPIC])
        lag = sum(r.lag for r in rows)
        line = self.settings.backpressure_on_lag
        if not self._lag_on and lag > line:
            log.warning("documents backpressure on: analysis lag %d > %d", lag, line)
            self._lag_on = True
        elif self._lag_on and lag < line // 2:
            log.info("documents backpressure off: analysis lag %d < %d", lag, line // 2)
            self._lag_on = False
