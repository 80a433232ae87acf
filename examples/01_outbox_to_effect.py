"""Example 1: one transaction writes a fact and an event; a handler applies the event once.

Run: python examples/01_outbox_to_effect.py   (uses a temporary folder; nothing to set up)
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

import pydantic
import sqlalchemy as sa

from aigc_hub import Envelope, HandlerContext, Hub, HubConfig, Pipeline, TopicSpec
from aigc_hub.messaging.embedded import EmbeddedBroker
from aigc_hub.store import engine as store_engine
from aigc_hub.store import migrate

meta = sa.MetaData()
greetings = sa.Table(
    "greetings",
    meta,
    sa.Column("event_id", sa.String(36), primary_key=True),
    sa.Column("text", sa.Text, nullable=False),
)


class GreetingRequested(pydantic.BaseModel):
    """Payload of ``demo.greeting.requested``."""

    name: str


pipeline = Pipeline("demo")
pipeline.topic(TopicSpec("demo.greetings", partitions=3, retention_ms=86_400_000, pipeline="demo"))
pipeline.event("demo.greeting.requested", 1, topic="demo.greetings")(GreetingRequested)


@pipeline.handler("greeters", ["demo.greetings"])
async def greet(env: Envelope, ctx: HandlerContext) -> list[Envelope]:
    """Stage one row; the runtime commits it with the inbox mark."""
    name = ctx.payload_as(GreetingRequested).name
    ctx.insert(greetings, event_id=env.event_id, text=f"你好, {name}!")
    return []


async def main() -> None:
    data = Path(tempfile.mkdtemp(prefix="aigc-example-"))
    url = f"sqlite:///{data / 'hub.db'}"
    migrate.upgrade(url)
    engine = store_engine.create_engine(url)
    async with engine.begin() as conn:
        await conn.run_sync(meta.create_all)
    hub = Hub(HubConfig(engine=engine, broker=EmbeddedBroker(data / "log.db")), [pipeline])
    await hub.start()

    async with hub.transaction() as conn:  # the service call: fact + event, atomically
        event = Envelope.new("demo.greeting.requested", {"name": "世界"}, key="g-1", source="demo")
        await hub.outbox.add(conn, [event])

    stop = asyncio.Event()
    runner = asyncio.create_task(hub.run(stop))
    for _ in range(200):
        async with engine.connect() as conn:
            rows = (await conn.execute(sa.select(greetings.c.text))).scalars().all()
        if rows:
            break
        await asyncio.sleep(0.05)
    stop.set()
    await runner
    await hub.close()
    print(f"effects: {rows}")


if __name__ == "__main__":
    asyncio.run(main())
