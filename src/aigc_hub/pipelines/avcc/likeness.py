"""The review's near-duplicate search over coded works, kept in each process's memory.

Fingerprints are computed by ``fingerprints.py`` (pHash + dHash of an image or of frames
sampled across a video; a MiniLM embedding of a text) and stored with the review; a work
joins the index once it is coded (``avcc_fingerprints.coded_at``). Each process loads the
rows coded since its last look before every search, so a copy of a work coded a moment ago
by another process is found too.

``similarity`` maps a distance onto [0, 1] for the rubric: 1 at the kind's duplicate line
(``similarity.MAX_DISTANCE``), 0 from :data:`RESEMBLANCE_FROM` on, linear between. The band
is narrow on purpose: among hundreds of coded works an unrelated picture's nearest one is
still 40-50 bits away (measured by bench/avcc.py on noise pictures), so only distances close
to the duplicate line say "this resembles a coded work".
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from aigc_hub.core.errors import InvalidInput
from aigc_hub.store.engine import reader

from .fingerprints import (
    Fingerprint,
    Kind,
    TextEmbedder,
    TextModelMissing,
    image_fingerprint,
    video_fingerprint,
)
from .models import avcc_fingerprints
from .similarity import MAX_DISTANCE, FingerprintIndex
from .state import Resemblance

#: Where resemblance starts: 8 bits (of 128) past the pictures' duplicate line; for texts a
#: cosine of 0.55 (the same topic in other words measured up to 0.59).
RESEMBLANCE_FROM = {Kind.IMAGE: 32.0, Kind.VIDEO: 32.0, Kind.TEXT: 0.45}
#: How far back each look reaches past the latest ``coded_at`` seen.
LATE_COMMIT_MARGIN_MS = 60_000
_KINDS = {"image/jpeg": Kind.IMAGE, "image/png": Kind.IMAGE, "image/webp": Kind.IMAGE}
_KINDS |= {"video/mp4": Kind.VIDEO, "text/plain": Kind.TEXT}


def similarity(kind: Kind, distance: float) -> float:
    """Resemblance in [0, 1] for the rubric (see the module docstring)."""
    line, start = MAX_DISTANCE[kind], RESEMBLANCE_FROM[kind]
    return max(0.0, min(1.0, (start - distance) / (start - line)))


class StoredLikeness:
    """Fingerprints works, and searches the coded ones (all, and per tenant)."""

    def __init__(self, engine: AsyncEngine, embedder: TextEmbedder | None = None) -> None:
        self._engine = engine
        self._embedder = embedder or TextEmbedder()
        self._all = FingerprintIndex()
        self._by_tenant: dict[str, FingerprintIndex] = {}
        self._seen: set[int] = set()
        self._high: int | None = None
        self._loading = asyncio.Lock()

    async def fingerprint(
        self, path: Path, content_type: str, scratch: Path
    ) -> tuple[str, bytes] | None:
        """The work's stored fingerprint; None for a text when the ``ml`` extra is absent (the
        review then reports that no text comparison was made)."""
        kind = _KINDS.get(content_type)
        if kind is Kind.IMAGE:
            taken = await asyncio.to_thread(image_fingerprint, path)
        elif kind is Kind.VIDEO:
            taken = await video_fingerprint(path, scratch)
        elif kind is Kind.TEXT:
            try:
                taken = await asyncio.to_thread(self._embedder.fingerprint_file, path)
            except TextModelMissing:
                return None
        else:
            return None
        return taken.kind.value, taken.to_json().encode()

    async def nearest(
        self, fingerprint: tuple[str, bytes], *, tenant_id: str | None
    ) -> Resemblance | None:
        """The coded work most like ``fingerprint`` (of ``tenant_id`` when given), or None."""
        await self._catch_up()
        index = self._all if tenant_id is None else self._by_tenant.get(tenant_id)
        if index is None:
            return None
        taken = Fingerprint.from_json(fingerprint[1])
        try:
            found = await asyncio.to_thread(index.nearest, taken)
        except InvalidInput:  # fingerprints of another algorithm version: not comparable
            return None
        if found is None:
            return None
        return Resemblance(
            record_id=int(found.record_id),
            similarity=round(similarity(taken.kind, found.distance), 4),
            near_duplicate=found.distance <= MAX_DISTANCE[taken.kind],
        )

    async def _catch_up(self) -> None:
        """Index the works coded since the last look (one query; the index only grows)."""
        async with self._loading:
            t = avcc_fingerprints
            query = sa.select(t.c.record_id, t.c.tenant_id, t.c.value, t.c.coded_at).where(
                t.c.coded_at.is_not(None)
            )
            if self._high is not None:
                # A code committed late may carry an earlier time: look back a margin, and
                # skip the rows already indexed.
                query = query.where(t.c.coded_at >= self._high - LATE_COMMIT_MARGIN_MS)
            async with reader(self._engine) as conn:
                rows = (await conn.execute(query)).all()
            for record_id, tenant_id, value, coded_at in rows:
                self._high = max(self._high or 0, int(coded_at))
                if int(record_id) in self._seen:
                    continue
                taken = Fingerprint.from_json(value)
                self._all.add(str(record_id), taken)
                self._by_tenant.setdefault(tenant_id, FingerprintIndex()).add(str(record_id), taken)
                self._seen.add(int(record_id))
