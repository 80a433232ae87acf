"""Example 2: a rejected event lands in the DLQ; once fixed, a replay applies it exactly once.

Run: python examples/02_dead_letter_and_replay.py
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

import pydantic
import sqlalchemy as sa

from aigc_hub import (
    Envelope,
    HandlerContext,
    Hub,
    HubConfig,
    PermanentError,
    Pipeline,
    TopicSpec,
)
from aigc_hub.messaging.embedded import EmbeddedBroker
from aigc_hub.store import engine as store_engine
from aigc_hub.store import migrate

meta = sa.MetaData()
reviews = sa.Table(
    "reviews",
    meta,
    sa.Column("event_id", sa.String(36), primary_key=True),
    sa.Column("work", sa.Text, nullable=False),
)
broken = {"yes": True}


class ReviewRequested(pydantic.BaseModel):
    """Payload of ``demo.review.requested``."""

    work: str


pipeline = Pipeline("demo")
pipeline.topic(TopicSpec("demo.reviews", partitions=3, retention_ms=86_400_000, pipeline="demo"))
pipeline.event("demo.review.requested", 1, topic="demo.reviews")(ReviewRequested)


@pipeline.handler("reviewers", ["demo.reviews"])
async def review(env: Envelope, ctx: HandlerContext) -> list[Envelope]:
    """Rejects everything while ``broken``; a PermanentError goes to the DLQ at once."""
    if broken["yes"]:
        raise PermanentError("review model misconfigured")
    ctx.insert(reviews, event_id=env.event_id, work=ctx.payload_as(ReviewRequested).work)
    return []


async def wait_for(predicate, seconds: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    for _ in range(int(seconds / 0.05)):
        if await predicate():
            return
        await asyncio.sleep(0.05)
    raise TimeoutError


async def main() -> None:
    data = Path(tempfile.mkdtemp(prefix="aigc-example-"))
    url = f"sqlite:///{data / 'hub.db'}"
    migrate.upgrade(url)
    engine = store_engine.create_engine(url)
    async with engine.begin() as conn:
        await conn.run_sync(meta.create_all)
    hub = Hub(HubConfig(engine=engine, broker=EmbeddedBroker(data / "log.db")), [pipeline])
    await hub.start()
    stop = asyncio.Event()
    runner = asyncio.create_task(hub.run(stop))

    async with hub.transaction() as conn:
        await hub.outbox.add(
            conn,
            [Envelope.new("demo.review.requested", {"work": "w-42"}, key="w-42", source="demo")],
        )

    async def dead_lettered() -> bool:
        return await hub.dlq.count() == 1

    await wait_for(dead_lettered)
    [letter] = await hub.dlq.list()
    print(f"dead letter {letter.id}: {letter.error_class}: {letter.error_message}")

    broken["yes"] = False  # the fix is deployed
    await hub.dlq.replay(letter.id, actor="example")

    async def applied() -> bool:
        async with engine.connect() as conn:
            return bool(
                (await conn.execute(sa.select(sa.func.count()).select_from(reviews))).scalar()
            )

    await wait_for(applied)
    async with engine.connect() as conn:
        count = (await conn.execute(sa.select(sa.func.count()).select_from(reviews))).scalar()
    stop.set()
    await runner
    await hub.close()
    print(f"replayed; effects: {count}")


if __name__ == "__main__":
    asyncio.run(main())
