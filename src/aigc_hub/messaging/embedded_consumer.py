"""Consumer-group members of the embedded log: partition leases, rebalancing, fetch, commit.

Ownership lives in the log file, so members in different processes share a group. A member
joins on its first fetch and then, every ``heartbeat_interval`` and whenever the group's
generation moves (a join or a release), rebalances in one write transaction: with the live
members sorted by id, member *i* is due ``P // M`` partitions plus one when ``i < P % M``;
it claims free or expired partitions up to that and releases what it holds beyond it
(after ``on_revoke``, so the owner may still commit). A background task renews its leases
while the application works, unless it has not fetched for ``max_poll_interval``.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import uuid
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.ext.asyncio import AsyncConnection

from aigc_hub.messaging import embedded_reads as reads
from aigc_hub.messaging import embedded_schema as schema
from aigc_hub.messaging.base import RebalanceCallback, Record, TopicPartition

if TYPE_CHECKING:
    from aigc_hub.messaging.embedded import EmbeddedBroker

log = logging.getLogger(__name__)

_gp = schema.group_partitions
_members = schema.members
_groups = schema.groups


class EmbeddedConsumer:
    """A member of an embedded-log consumer group; fetch from one task at a time.

    ``commit`` and ``assignment`` may be called from other tasks while a fetch waits.
    """

    def __init__(
        self,
        broker: EmbeddedBroker,
        group: str,
        topics: tuple[str, ...],
        *,
        on_assign: RebalanceCallback | None,
        on_revoke: RebalanceCallback | None,
    ) -> None:
        self.broker = broker
        self.group = group
        self.topics = topics
        self.member_id = uuid.uuid4().hex
        self._on_assign = on_assign
        self._on_revoke = on_revoke
        self._positions: dict[int, int] = {}  # owned partition id -> next offset to fetch
        self._announced: set[int] = set()
        self._generation: int | None = None
        self._joined = False
        self._next_rebalance = 0.0
        self._last_fetch = 0.0
        self._heartbeat: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self._rotation = itertools.count()
        self._closed = False
        #: Set by appends to this member's topics (and membership changes) in this process.
        self._wake: asyncio.Event | None = None

    async def fetch(self, max_records: int, timeout: float) -> list[Record]:
        """Up to ``max_records`` records, shared fairly over owned partitions; [] on timeout."""
        if self._closed:
            raise RuntimeError("consumer is closed")
        if max_records < 1:
            raise ValueError("max_records must be at least 1")
        broker = self.broker
        await broker.start()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        if self._wake is None:
            self._wake = broker.signal.watch(self.topics)
        wake = self._wake
        while not self._closed:  # closed meanwhile by another task: return empty
            self._last_fetch = loop.time()
            if self._last_fetch >= self._next_rebalance:
                await self._rebalance()
            wake.clear()  # an append from now on sets it again: none is missed
            generation, batches = await self._read(max_records)
            if generation != self._generation:
                await self._rebalance()  # someone joined or released: re-spread, then re-read
                continue
            if batches:
                return reads.to_records(batches, self.broker.directory, self._positions)
            remaining = deadline - loop.time()
            if remaining <= 0:
                return []
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(remaining, broker.poll_interval)):
                    await wake.wait()
        return []

    async def commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Commit offsets of partitions this member still owns in the file; never backwards."""
        rows = []
        for tp, offset in offsets.items():
            tp_id = self.broker.directory.tp_id(tp)
            if tp_id is not None and tp_id in self._positions:
                rows.append({"b_tp": tp_id, "b_off": offset})
        if not rows:
            return
        stmt = (
            _gp.update()
            .where(
                _gp.c.grp == self.group,
                _gp.c.tp_id == sa.bindparam("b_tp"),
                _gp.c.owner == self.member_id,
            )
            .values(committed=sa.func.max(_gp.c.committed, sa.bindparam("b_off")))
        )
        async with self.broker.writing() as conn:
            await conn.execute(stmt, rows)

    def assignment(self) -> set[TopicPartition]:
        """Partitions this member owned at its last rebalance."""
        return {self.broker.directory.name(tp_id) for tp_id in self._positions}

    async def close(self) -> None:
        """Run ``on_revoke``, then release every partition at once and leave the group."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        if self._wake is not None:  # a fetch waiting now returns at once
            self._wake.set()
            self.broker.signal.unwatch(self._wake)
        if self._heartbeat is not None:
            await self._heartbeat  # no cancel: it may be inside a transaction
        if self._announced and self._on_revoke is not None:
            await self._on_revoke(self._names(self._announced))
        if self._joined:
            async with self.broker.writing() as conn:
                await conn.execute(
                    _gp.update()
                    .where(_gp.c.grp == self.group, _gp.c.owner == self.member_id)
                    .values(owner=None, lease_expires_ms=0)
                )
                await conn.execute(
                    _members.delete().where(
                        _members.c.grp == self.group, _members.c.member_id == self.member_id
                    )
                )
                await self._bump(conn)
            self.broker.signal.notify()
        self._positions.clear()
        self._announced.clear()
        self.broker.discard_consumer(self)

    # -- rebalancing -----------------------------------------------------------------------

    async def _rebalance(self) -> None:
        broker = self.broker
        now = broker.clock.now_ms()
        async with broker.writing() as conn:
            await self._renew(conn, now)
            if not self._joined:
                await self._bump(conn)
            await conn.execute(
                _members.delete().where(_members.c.grp == self.group, _members.c.expires_ms <= now)
            )
            live = (
                (
                    await conn.execute(
                        sa.select(_members.c.member_id)
                        .where(_members.c.grp == self.group, _members.c.expires_ms > now)
                        .order_by(_members.c.member_id)
                    )
                )
                .scalars()
                .all()
            )
            infos = await broker.directory.load(conn, set(self.topics))
            tp_ids = sorted(tp for info in infos.values() for tp in info.tp_ids)
            if tp_ids:
                await conn.execute(
                    sqlite_insert(_gp).on_conflict_do_nothing(),
                    [{"grp": self.group, "tp_id": tp} for tp in tp_ids],
                )
            query = sa.select(
                _gp.c.tp_id, _gp.c.owner, _gp.c.lease_expires_ms, _gp.c.committed
            ).where(_gp.c.grp == self.group, _gp.c.tp_id.in_(tp_ids))
            rows = (await conn.execute(query)).all()
            mine = {tp for tp, owner, _, _ in rows if owner == self.member_id}
            index, members = live.index(self.member_id), len(live)
            target = len(tp_ids) // members + (1 if index < len(tp_ids) % members else 0)
            free = sorted(
                tp
                for tp, owner, expires, _ in rows
                if owner is None or (owner != self.member_id and expires <= now)
            )
            claim = free[: max(0, target - len(mine))]
            if claim:
                await conn.execute(
                    _gp.update()
                    .where(_gp.c.grp == self.group, _gp.c.tp_id.in_(claim))
                    .values(owner=self.member_id, lease_expires_ms=self._lease_until(now))
                )
            generation = await self._current_generation(conn)
        self._joined = True
        committed = {tp: offset for tp, _, _, offset in rows}
        lost = set(self._positions) - mine
        for tp in lost:
            del self._positions[tp]
        for tp in (mine | set(claim)) - self._positions.keys():
            self._positions[tp] = committed[tp]
        extras = set(sorted(mine)[target:])
        revoked = (lost | extras) & self._announced
        self._announced -= lost | extras
        if revoked and self._on_revoke is not None:
            await self._on_revoke(self._names(revoked))
        if extras:
            generation = await self._release(extras)
        self._generation = generation
        assigned = self._positions.keys() - self._announced
        self._announced |= assigned
        if assigned and self._on_assign is not None:
            await self._on_assign(self._names(assigned))
        if lost or extras or claim:
            log.debug(
                "member %s of %s: lost %s, released %s, claimed %s",
                self.member_id,
                self.group,
                sorted(lost),
                sorted(extras),
                claim,
            )
        loop = asyncio.get_running_loop()
        self._next_rebalance = loop.time() + broker.heartbeat_interval
        if self._heartbeat is None:
            self._heartbeat = asyncio.create_task(self._heartbeat_loop())

    async def _release(self, tp_ids: set[int]) -> int:
        async with self.broker.writing() as conn:
            await conn.execute(
                _gp.update()
                .where(
                    _gp.c.grp == self.group,
                    _gp.c.owner == self.member_id,
                    _gp.c.tp_id.in_(sorted(tp_ids)),
                )
                .values(owner=None, lease_expires_ms=0)
            )
            generation = await self._bump(conn)
        for tp in tp_ids:
            self._positions.pop(tp, None)
        self.broker.signal.notify()
        return generation

    async def _heartbeat_loop(self) -> None:
        broker = self.broker
        loop = asyncio.get_running_loop()
        while not await schema.stopped_within(self._stop, broker.heartbeat_interval):
            if loop.time() - self._last_fetch > broker.max_poll_interval:
                continue  # a stalled member lets its leases lapse; its next fetch rejoins
            try:
                async with broker.writing() as conn:
                    await self._renew(conn, broker.clock.now_ms())
            except Exception:
                log.exception("heartbeat of %s in group %s failed", self.member_id, self.group)

    async def _renew(self, conn: AsyncConnection, now: int) -> None:
        until = self._lease_until(now)
        await conn.execute(
            sqlite_insert(_members)
            .values(grp=self.group, member_id=self.member_id, expires_ms=until)
            .on_conflict_do_update(
                index_elements=[_members.c.grp, _members.c.member_id], set_={"expires_ms": until}
            )
        )
        await conn.execute(
            _gp.update()
            .where(_gp.c.grp == self.group, _gp.c.owner == self.member_id)
            .values(lease_expires_ms=until)
        )

    async def _bump(self, conn: AsyncConnection) -> int:
        stmt = (
            sqlite_insert(_groups)
            .values(grp=self.group, generation=1)
            .on_conflict_do_update(
                index_elements=[_groups.c.grp], set_={"generation": _groups.c.generation + 1}
            )
            .returning(_groups.c.generation)
        )
        return int((await conn.execute(stmt)).scalar_one())

    async def _current_generation(self, conn: AsyncConnection) -> int:
        query = sa.select(_groups.c.generation).where(_groups.c.grp == self.group)
        return int((await conn.execute(query)).scalar() or 0)

    def _lease_until(self, now: int) -> int:
        return now + int(self.broker.lease_ttl * 1000)

    # -- reading ---------------------------------------------------------------------------

    async def _read(self, max_records: int) -> tuple[int, list[list[Any]]]:
        """The group's generation and up to ``max_records`` owned rows, one list per partition."""
        async with self.broker.reading() as conn:
            shift = next(self._rotation)
            return await reads.read_owned(conn, self.group, self._positions, max_records, shift)

    def _names(self, tp_ids: Iterable[int]) -> set[TopicPartition]:
        return {self.broker.directory.name(tp) for tp in tp_ids}
