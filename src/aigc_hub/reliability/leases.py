"""Leases in the database: one holder per name, an expiry, and a fencing token that only grows.

Used where the cache seam is not Redis (embedded defaults) for the relay's single-claimer
scheme and scanner leadership. Acquire succeeds when the lease is free, expired, or already
ours; every change of holder increments the fencing token, so a late write from an old holder
can be refused by comparing tokens.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from aigc_hub.core.clock import Clock
from aigc_hub.store import tables
from aigc_hub.store.dialects import dialect_of

T = tables.leases


class DatabaseLeases:
    """Named leases on the ``leases`` table; safe across processes sharing the database."""

    def __init__(self, engine: AsyncEngine, clock: Clock) -> None:
        self.engine = engine
        self.clock = clock

    async def acquire(self, name: str, owner: str, ttl_ms: int) -> int | None:
        """Take or renew ``name`` for ``owner``; the fencing token, or None if someone holds it."""
        now = self.clock.now_ms()
        async with self.engine.begin() as conn:
            insert = (
                dialect_of(conn)
                .insert(T)
                .values(name=name, owner=owner, expires_at=now + ttl_ms, fencing_token=1)
            )
            stmt = insert.on_conflict_do_update(
                index_elements=[T.c.name],
                set_={
                    "owner": owner,
                    "expires_at": now + ttl_ms,
                    "fencing_token": sa.case(
                        (T.c.owner == owner, T.c.fencing_token),
                        else_=T.c.fencing_token + 1,
                    ),
                },
                where=sa.or_(T.c.owner == owner, T.c.expires_at <= now),
            ).returning(T.c.fencing_token)
            row = (await conn.execute(stmt)).first()
        return int(row[0]) if row else None

    async def release(self, name: str, owner: str) -> bool:
        """Give up ``name`` if ``owner`` holds it; True when released."""
        async with self.engine.begin() as conn:
            result = await conn.execute(
                sa.update(T)
                .where(T.c.name == name, T.c.owner == owner)
                .values(expires_at=0)
                .returning(T.c.name)
            )
            return result.first() is not None

    async def holder(self, name: str) -> tuple[str, int] | None:
        """The current (owner, fencing token) of an unexpired lease, or None."""
        async with self.engine.connect() as conn:
            row = (
                await conn.execute(
                    sa.select(T.c.owner, T.c.fencing_token).where(
                        T.c.name == name, T.c.expires_at > self.clock.now_ms()
                    )
                )
            ).first()
        return (str(row[0]), int(row[1])) if row else None
