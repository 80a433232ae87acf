"""A small pipeline that exercises the backbone: each event inserts one effect row.

The effect table has no unique constraint on purpose, so a duplicate effect would show up
as a second row instead of being hidden by the database.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

import pydantic
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from aigc_hub.core.envelope import Envelope
from aigc_hub.core.errors import PermanentError, RetryableError
from aigc_hub.messaging.catalog import TopicSpec
from aigc_hub.pipeline import Pipeline
from aigc_hub.runtime.context import HandlerContext

TOPIC = "test.effects"
EVENT = "test.effect.requested"
GROUP = "effects-writer"

test_metadata = sa.MetaData()
effects = sa.Table(
    "test_effects",
    test_metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("event_id", sa.String(36), nullable=False),
    sa.Column("key", sa.String(100), nullable=False),
    sa.Column("n", sa.Integer, nullable=False),
)
facts = sa.Table(
    "test_facts",
    test_metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("key", sa.String(100), nullable=False),
    sa.Column("n", sa.Integer, nullable=False),
)


class EffectRequested(pydantic.BaseModel):
    """Payload of ``test.effect.requested``."""

    n: int
    note: str = ""


@dataclass
class Behaviour:
    """How the handler misbehaves: per-key failure plans, a permanent failure, a pause."""

    fail_times: dict[str, int] = field(default_factory=dict)
    always_fail: set[str] = field(default_factory=set)
    permanent: set[str] = field(default_factory=set)
    calls: list[tuple[str, int]] = field(default_factory=list)
    on_call: Callable[[str, int], None] | None = None
    gate: asyncio.Event | None = None
    #: Calls of a key that hang (never return) before the handler behaves: key -> count.
    hang_times: dict[str, int] = field(default_factory=dict)

    def fixed(self) -> None:
        """Stop failing."""
        self.fail_times.clear()
        self.always_fail.clear()
        self.permanent.clear()


def make_pipeline(
    behaviour: Behaviour | None = None,
    *,
    partitions: int = 6,
    concurrency: int = 4,
    timeout: float | None = None,
) -> Pipeline:
    """A fresh pipeline whose handler follows ``behaviour``."""
    b = behaviour or Behaviour()
    p = Pipeline("effects")
    p.topic(TopicSpec(TOPIC, partitions, 7 * 86_400_000, pipeline="effects"))
    p.event(EVENT, 1, topic=TOPIC)(EffectRequested)

    @p.handler(GROUP, [TOPIC], concurrency=concurrency, timeout=timeout)
    async def write_effect(env: Envelope, ctx: HandlerContext) -> list[Envelope]:
        payload = ctx.payload_as(EffectRequested)
        b.calls.append((env.key, payload.n))
        if b.on_call is not None:
            b.on_call(env.key, payload.n)
        if b.gate is not None and env.key in b.always_fail | set(b.fail_times):
            await b.gate.wait()
        hangs = b.hang_times.get(env.key, 0)
        if hangs > 0:
            b.hang_times[env.key] = hangs - 1
            await asyncio.Event().wait()  # never set: only the handler timeout ends this call
        if env.key in b.permanent:
            raise PermanentError(f"content rejected for {env.key}")
        if env.key in b.always_fail:
            raise RetryableError(f"provider down for {env.key}")
        left = b.fail_times.get(env.key, 0)
        if left > 0:
            b.fail_times[env.key] = left - 1
            raise RetryableError(f"transient failure for {env.key} ({left} left)")
        ctx.insert(effects, event_id=env.event_id, key=env.key, n=payload.n)
        return []

    return p


def request(key: str, n: int, note: str = "") -> Envelope:
    """An effect request for ``key``."""
    return Envelope.new(EVENT, {"n": n, "note": note}, key=key, source="tests")


async def create_tables(engine: AsyncEngine) -> None:
    """Create the test pipeline's tables."""
    async with engine.begin() as conn:
        await conn.run_sync(test_metadata.create_all)


async def effect_rows(engine: AsyncEngine) -> list[tuple[int, str, str, int]]:
    """Every effect row as (id, event_id, key, n), in insertion order."""
    async with engine.connect() as conn:
        rows = await conn.execute(
            sa.select(effects.c.id, effects.c.event_id, effects.c.key, effects.c.n).order_by(
                effects.c.id
            )
        )
        return [tuple(r) for r in rows]  # type: ignore[misc]


#: The pipeline as worker processes load it: ``AIGC_HUB_PIPELINES=tests.support.effects:pipeline``.
pipeline = make_pipeline()
