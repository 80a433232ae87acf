"""``/v1/memo/notes``: write a note (it is stamped, then archived) and read it back."""

from __future__ import annotations

from typing import Any

import pydantic
import sqlalchemy as sa
from fastapi import APIRouter, Request

from aigc_hub.core import ids
from aigc_hub.core.envelope import Envelope
from aigc_hub.interfaces.http import kit

from .handlers import NOTE_WRITTEN, NoteWritten
from .models import notes

router = APIRouter(prefix="/memo/notes", tags=["memo"])


class NewNote(pydantic.BaseModel):
    """What a tenant writes."""

    text: str = pydantic.Field(min_length=1, max_length=10_000)


@router.post("", status_code=201)
async def write_note(body: NewNote, request: Request, who: kit.LimitedTenant) -> dict[str, Any]:
    """Store the note and its event in one transaction."""
    hub, note_id = kit.hub_of(request), ids.new_id_str()
    event = Envelope.new(
        NOTE_WRITTEN,
        NoteWritten(note_id=note_id).model_dump(),
        key=note_id,
        source="memo",
        tenant_id=who.tenant_id,
    )
    async with hub.transaction() as conn:
        await conn.execute(
            notes.insert().values(
                id=note_id, tenant_id=who.tenant_id, text=body.text, created_at=hub.clock.now_ms()
            )
        )
        await hub.outbox.add(conn, [event])
    return {"id": note_id}


@router.get("/{note_id}")
async def read_note(note_id: str, request: Request, who: kit.LimitedTenant) -> dict[str, Any]:
    """The note; 404 when unknown or another tenant's."""
    query = sa.select(notes).where(notes.c.id == note_id, notes.c.tenant_id == who.tenant_id)
    async with kit.hub_of(request).engine.connect() as conn:
        row = (await conn.execute(query)).mappings().first()
    if row is None:
        raise kit.not_found("note")
    return dict(row)
