"""Keeping a lease alive while work runs, and saying so at once when it is lost.

A worker that holds ``lease:transcode:{id}`` for a 30-minute job renews it every ttl/3.
When a renewal is refused (the lease expired and may have a new holder, e.g. after a long
pause of this process) the keeper sets :attr:`LeaseKeeper.lost`: the work must stop, and
any write it still makes carries the old fencing token, which storage refuses.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Self

from aigc_hub.cache.base import Lease, Leases
from aigc_hub.core.clock import Clock

log = logging.getLogger(__name__)


class LeaseKeeper:
    """Renews one lease every ``ttl/3`` in a background task; ``lost`` is set when it fails.

    Use as ``async with LeaseKeeper(leases, lease, clock) as keeper:``. A renewal that
    raises (cache unreachable) is retried at the next tick; once the lease's ttl has passed
    since the last successful renewal, the keeper gives up and sets ``lost``. On exit the
    task stops and, unless lost or ``release_on_exit`` is False, the lease is released
    (a release that fails is logged; the lease then simply expires).
    """

    def __init__(
        self,
        leases: Leases,
        lease: Lease,
        clock: Clock,
        *,
        interval_s: float | None = None,
        release_on_exit: bool = True,
    ) -> None:
        self.leases = leases
        self.clock = clock
        self.interval_s = interval_s if interval_s is not None else lease.ttl_ms / 3000
        self.release_on_exit = release_on_exit
        #: Set (once) when the lease is no longer ours.
        self.lost = asyncio.Event()
        self._lease = lease
        self._task: asyncio.Task[None] | None = None

    @property
    def lease(self) -> Lease:
        """The latest renewed tenure (its token never changes)."""
        return self._lease

    async def __aenter__(self) -> Self:
        self._task = asyncio.create_task(self._run(), name=f"lease-keeper:{self._lease.name}")
        await asyncio.sleep(0)  # let the task reach its first sleep before the caller moves on
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self.release_on_exit and not self.lost.is_set():
            try:
                await self.leases.release(self._lease)
            except Exception:
                log.warning("could not release lease %s; it will expire", self._lease.name)

    async def _run(self) -> None:
        # Deadline on our own clock: the lease's ttl after the last renewal we *sent*.
        deadline = self.clock.now_ms() + self._lease.ttl_ms
        while True:
            await self.clock.sleep(self.interval_s)
            sent_at = self.clock.now_ms()
            try:
                renewed = await self.leases.renew(self._lease)
            except Exception as exc:
                if self.clock.now_ms() >= deadline:
                    log.warning("lease %s lost: cannot renew (%s)", self._lease.name, exc)
                    self.lost.set()
                    return
                log.warning("lease %s: renewal failed, will retry (%s)", self._lease.name, exc)
                continue
            if renewed is None:
                log.warning("lease %s lost: renewal refused", self._lease.name)
                self.lost.set()
                return
            self._lease = renewed
            deadline = sent_at + renewed.ttl_ms
