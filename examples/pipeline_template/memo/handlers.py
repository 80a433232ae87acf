"""Consumer group ``memo-stamper``: a written note gets its stamp, once."""

from __future__ import annotations

import pydantic
import sqlalchemy as sa

from aigc_hub.core.envelope import Envelope
from aigc_hub.runtime.context import HandlerContext

from .models import notes

TOPIC = "memo.notes"
NOTE_WRITTEN = "memo.note.written"


class NoteWritten(pydantic.BaseModel):
    """A tenant wrote a note."""

    note_id: str


async def stamp(env: Envelope, ctx: HandlerContext) -> list[Envelope]:
    """Stage the stamp; the guard keeps a redelivery from stamping twice."""
    written = ctx.payload_as(NoteWritten)
    ctx.write(
        sa.update(notes)
        .where(notes.c.id == written.note_id, notes.c.stamped_at.is_(None))
        .values(stamped_at=ctx.clock.now_ms())
    )
    return []
