"""Scanner ``memo-archiver``: stamped notes older than ``archive_after_s`` are archived."""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from aigc_hub.reliability.scanners import Finding

from .models import notes
from .settings import MemoSettings


class Archiver:
    """Finds stamped, unarchived notes past their age and archives each one."""

    name = "memo-archiver"

    def __init__(self, engine: AsyncEngine, settings: MemoSettings) -> None:
        self.engine = engine
        self.interval_s = settings.scan_every_s
        self.archive_after_ms = int(settings.archive_after_s * 1000)

    async def find(self, now_ms: int) -> Sequence[Finding]:
        """Up to 100 notes due for archiving."""
        due = (
            sa.select(notes.c.id)
            .where(notes.c.archived_at.is_(None))
            .where(notes.c.stamped_at <= now_ms - self.archive_after_ms)
            .limit(100)
        )
        async with self.engine.connect() as conn:
            ids = (await conn.execute(due)).scalars().all()
        return [Finding(target=note_id, detail={}) for note_id in ids]

    async def repair(self, finding: Finding, now_ms: int) -> str:
        """Archive one note (a no-op when another pass did it first)."""
        async with self.engine.begin() as conn:
            done = await conn.execute(
                sa.update(notes)
                .where(notes.c.id == finding.target, notes.c.archived_at.is_(None))
                .values(archived_at=now_ms)
            )
        return "archived" if done.rowcount else "skipped"
