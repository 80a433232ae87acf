"""Scanners (watchdogs): periodic reconciliation jobs, one active instance each across processes.

A scanner is a query for stuck rows plus a recovery action. The :class:`ScannerRunner` runs
each scanner under a leader lease (``scanner:<name>``): every process may run the runner, only
the holder of a scanner's lease runs that scanner, and when the holder dies another process
takes over within one lease TTL. Every repair writes an audit row; scanners never write
"success" themselves, they put work back where the normal path will finish it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from sqlalchemy.ext.asyncio import AsyncEngine

from aigc_hub.core import ids
from aigc_hub.core.clock import Clock
from aigc_hub.observability import metrics
from aigc_hub.reliability import audit

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Finding:
    """One stuck thing a scanner found: an id for the audit log and what the repair needs."""

    target: str
    detail: dict[str, Any]


class Scanner(Protocol):
    """A reconciliation job: find stuck rows, repair each one."""

    name: str
    interval_s: float
    # Optional ``audited: bool`` (default True): False for routine scheduling (polls).

    async def find(self, now_ms: int) -> Sequence[Finding]:
        """Stuck rows as of ``now_ms`` (bounded: a scanner pages through big backlogs)."""
        ...

    async def repair(self, finding: Finding, now_ms: int) -> str:
        """Recover one finding; returns the audit result (e.g. "requeued", "skipped")."""
        ...


class LeaderLeases(Protocol):
    """What the runner needs from a lease provider (database leases or the cache seam)."""

    async def acquire(self, name: str, owner: str, ttl_ms: int) -> object | None:
        """Take or renew ``name``; None when another owner holds it."""
        ...

    async def release(self, name: str, owner: str) -> bool:
        """Give ``name`` up if ``owner`` holds it."""
        ...


def default_owner() -> str:
    """An owner token naming this process: host, pid and a random suffix."""
    return f"{socket.gethostname()}:{os.getpid()}:{ids.new_id_str()[-8:]}"


@dataclass
class ScannerState:
    """What the runner knows about one scanner in this process."""

    leader: bool = False
    runs: int = 0
    repaired: int = 0
    next_run_ms: int = 0


class ScannerRunner:
    """Runs scanners under leader leases until stopped."""

    def __init__(
        self,
        engine: AsyncEngine,
        leases: LeaderLeases,
        clock: Clock,
        scanners: Sequence[Scanner],
        *,
        owner: str | None = None,
        lease_ttl_ms: int = 15_000,
        tick_s: float | None = None,
    ) -> None:
        self.engine = engine
        self.leases = leases
        self.clock = clock
        self.scanners = list(scanners)
        self.owner = owner or default_owner()
        self.lease_ttl_ms = lease_ttl_ms
        # Renew well inside the TTL: a third of it, as leases usually do.
        self.tick_s = tick_s if tick_s is not None else lease_ttl_ms / 3000
        self.state = {s.name: ScannerState() for s in self.scanners}

    async def run_once(self) -> dict[str, ScannerState]:
        """One tick: renew or take each lease; run the scanners that are due and led here."""
        now = self.clock.now_ms()
        for scanner in self.scanners:
            state = self.state[scanner.name]
            held = await self.leases.acquire(
                f"scanner:{scanner.name}", self.owner, self.lease_ttl_ms
            )
            if state.leader and held is None:
                metrics.LEASE_LOSSES.labels(f"scanner:{scanner.name}").inc()
                log.warning("lost leadership of scanner %s", scanner.name)
            elif not state.leader and held is not None:
                metrics.LEASE_ACQUISITIONS.labels(f"scanner:{scanner.name}").inc()
                log.info("leading scanner %s as %s", scanner.name, self.owner)
            state.leader = held is not None
            if not state.leader or now < state.next_run_ms:
                continue
            state.next_run_ms = now + int(scanner.interval_s * 1000)
            await self._scan(scanner, state, now)
        return self.state

    async def _scan(self, scanner: Scanner, state: ScannerState, now: int) -> None:
        state.runs += 1
        metrics.SCANNER_RUNS.labels(scanner.name).inc()
        try:
            findings = await scanner.find(now)
        except Exception:
            log.exception("scanner %s failed to query", scanner.name)
            return
        for finding in findings:
            try:
                result = await scanner.repair(finding, now)
            except Exception as exc:
                log.exception("scanner %s failed to repair %s", scanner.name, finding.target)
                result = f"error: {type(exc).__name__}"
            if result != "skipped":
                state.repaired += 1
                metrics.SCANNER_REPAIRS.labels(scanner.name, result).inc()
            # Schedulers of normal-path work (polling) set ``audited = False``: an audit row
            # per routine poll would bury the repairs people need to see.
            if not getattr(scanner, "audited", True) and not result.startswith("error"):
                continue
            async with self.engine.begin() as conn:
                await audit.record(
                    conn,
                    at=now,
                    actor=f"scanner:{scanner.name}@{self.owner}",
                    action=f"scan.{scanner.name}",
                    target=finding.target,
                    result=result,
                    detail=finding.detail,
                )

    async def run(self, stop: asyncio.Event) -> None:
        """Tick until ``stop`` is set, then release held leases so a peer takes over at once."""
        while not stop.is_set():
            try:
                await self.run_once()
            except Exception:
                log.exception("scanner tick failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.tick_s)
        for scanner in self.scanners:
            if self.state[scanner.name].leader:
                with contextlib.suppress(Exception):
                    await self.leases.release(f"scanner:{scanner.name}", self.owner)
