"""The embedding worker SIGKILLed and restarted: ``aigc-hub worker --group embedding-workers``
processes, the first killed by a failpoint (in the middle of a batch's model call, or right
after a batch committed and before its offsets did), the second finishing. No chunk is lost,
none has two vectors, and the records read again emit nothing twice: on embedded defaults
(SQLite, the embedded log, vectors in SQLite) and on the scale profile (PostgreSQL, Kafka
(Tansu), Redis, vectors in pgvector)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import sqlalchemy as sa

from aigc_hub.cache.redis import RedisCache
from aigc_hub.messaging.base import Broker
from aigc_hub.pipelines.documents import events
from aigc_hub.pipelines.documents.models import documents_chunks
from aigc_hub.store.tables import inbox, outbox
from tests.conftest import kafka_or_skip
from tests.support.documents import documents_stack, submit, wait_ended
from tests.support.hubs import make_broker, wait_until
from tests.support.redis_dbs import private_redis_url
from tests.support.workers import worker_process

ROOT = Path(__file__).resolve().parents[2]
GROUPS_BUT_EMBEDDING = ["chunking-workers", "vector-storage-workers"]
SENTENCE = (
    "Document {n} describes shipment {n}: crates of glassware left the harbour on day {n} "
    "and the customs office stamped form {n} before noon. "
)


def embedding_worker(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    return worker_process("embedding-workers", env, log)


async def positions(broker: Broker) -> tuple[int, int]:
    """The embedding group's committed offsets on ``chunks-created`` and the records there
    (sums over its partitions)."""
    found = await broker.lag("embedding-workers", [events.CHUNKS_TOPIC])
    return sum(p.committed for p in found), sum(p.end_offset for p in found)


def _pairs(settings: object) -> str:
    return ",".join(f"{k}={v}" for k, v in dict(settings).items())  # type: ignore[call-overload]


@dataclass
class Profile:
    """Where the test's hub and the worker processes keep everything."""

    db_url: str
    vectors_url: str
    broker: Broker
    env: dict[str, str]
    hub_options: dict[str, object] = field(default_factory=dict)


@contextlib.contextmanager
def profile_of(name: str, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Profile]:
    """The embedded defaults or the scale profile (its fixtures asked for only then)."""
    if name == "embedded":
        db_url = request.getfixturevalue("sqlite_url")
        yield Profile(
            db_url,
            f"sqlite:///{tmp_path / 'vectors.db'}",
            make_broker("embedded", tmp_path),
            {"AIGC_HUB_BROKER": "embedded", "AIGC_HUB_LOG_PATH": str(tmp_path / "log.db")},
        )
        return
    db_url = request.getfixturevalue("pg_url")
    vectors_url = request.getfixturevalue("pgvector_url")
    redis_url = private_redis_url("scale-hub")
    # A Tansu of this test's own, not the session's: its topics and the group's offsets
    # start empty, so what the group has committed (asserted) is this test's doing alone.
    with kafka_or_skip() as kafka:
        yield Profile(
            db_url,
            vectors_url,
            kafka.broker(),
            {
                "AIGC_HUB_BROKER": "kafka",
                "AIGC_HUB_KAFKA_BOOTSTRAP": kafka.bootstrap,
                "AIGC_HUB_KAFKA_CONSUMER_CONFIG": _pairs(kafka.consumer_settings),
                "AIGC_HUB_KAFKA_PRODUCER_CONFIG": _pairs(kafka.producer_settings),
                "AIGC_HUB_REDIS_URL": redis_url,
            },
            {"cache": RedisCache.from_url(redis_url)},  # closed by the hub
        )


@pytest.mark.parametrize(
    "profile",
    [
        "embedded",
        pytest.param("scale", marks=[pytest.mark.postgres, pytest.mark.kafka, pytest.mark.redis]),
    ],
)
@pytest.mark.parametrize("killed_at", ["documents.minilm.encode", "consumer.after_commit"])
async def test_an_embedding_worker_killed_mid_batch_loses_no_chunk_and_doubles_no_vector(
    request: pytest.FixtureRequest, tmp_path: Path, killed_at: str, profile: str
) -> None:
    with profile_of(profile, request, tmp_path) as where:
        await _kill_and_restart(where, tmp_path, killed_at)


async def _kill_and_restart(where: Profile, tmp_path: Path, killed_at: str) -> None:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "src"), str(ROOT)])),
        "AIGC_HUB_DATABASE_URL": where.db_url,
        "AIGC_HUB_DATA_DIR": str(tmp_path / "worker"),
        "AIGC_HUB_PIPELINES": "documents",
        "AIGC_HUB_DOCS_VECTORS_URL": where.vectors_url,
        "AIGC_HUB_DOCS_EMBED_BATCH": "8",
        "AIGC_HUB_DOCS_EMBED_WAIT_S": "0.2",
        **where.env,
    }
    log = tmp_path / "worker.log"
    async with documents_stack(
        where.db_url,
        where.broker,
        tmp_path,
        groups=GROUPS_BUT_EMBEDDING,
        hub_options=where.hub_options,
        embed_batch=8,
        vectors_url=where.vectors_url,
    ) as stack:
        key = await stack.tenant("studio")
        async with stack.client(key) as client:
            tasks = []
            # Each document has more chunks than a batch: the killed batch's documents are
            # still being embedded when the survivor reads that batch again, so only the
            # inbox tells it those chunks were done.
            for n in range(3):
                text = "".join(SENTENCE.format(n=f"{n}-{i}") for i in range(80))
                answer = await submit(
                    client,
                    "kb",
                    f"d{n}.txt",
                    text.encode(),
                    "text/plain",
                    key=f"k{n}",
                    analysis="false",
                )
                tasks.append(answer.json())
            doomed = embedding_worker(env | {"AIGC_HUB_FAILPOINTS": f"{killed_at}=kill"}, log)
            try:
                # Waited in a thread: the hub in this process keeps running meanwhile.
                exited = await asyncio.to_thread(doomed.wait, 300)
                assert exited == -signal.SIGKILL, log.read_text()[-3000:]
            finally:
                if doomed.poll() is None:
                    doomed.kill()
            async with stack.hub.engine.connect() as conn:
                marked = await conn.scalar(
                    sa.select(sa.func.count())
                    .select_from(inbox)
                    .where(inbox.c.consumer == "embedding-workers")
                )
            offsets_at_kill, _ = await positions(where.broker)
            survivor = embedding_worker(env, log)
            try:
                ended = await wait_ended(client, [t["task_id"] for t in tasks], timeout_s=300)

                async def all_committed() -> bool:
                    done, records = await positions(where.broker)
                    return done == records

                await wait_until(all_committed, timeout=60)
            finally:
                survivor.send_signal(signal.SIGTERM)
                await asyncio.to_thread(survivor.wait, 60)
        store = await stack.docs.vectors()
        namespace = stack.docs.embedder.name
        async with stack.hub.engine.connect() as conn:
            chunks = (
                await conn.execute(sa.select(documents_chunks.c.id, documents_chunks.c.tenant_id))
            ).all()
            marks = await conn.scalar(
                sa.select(sa.func.count())
                .select_from(inbox)
                .where(inbox.c.consumer == "embedding-workers")
            )
            emitted = await conn.scalar(
                sa.select(sa.func.count())
                .select_from(outbox)
                .where(outbox.c.topic == events.EMBEDDINGS_TOPIC)
            )
        tenant_id = chunks[0].tenant_id
        stored = [await store.chunk_ids(namespace, tenant_id, t["document_id"]) for t in tasks]
        vectors = await store.count(namespace, kb_id="kb")
        chunk_rows = [row.id for row in chunks]
    # No offset was committed before the kill: the survivor read the killed batch again.
    assert offsets_at_kill == 0
    if killed_at == "consumer.after_commit":
        assert marked and marked >= 1  # the first batch was committed before the kill
    else:
        assert marked == 0  # killed inside the first model call: nothing was committed
    assert {t["status"] for t in ended.values()} == {"completed"}
    # One inbox mark and one event per chunk: the records read again were recognised by
    # their marks and emitted nothing twice.
    assert marks == emitted == len(chunks)
    # Every chunk has its vector, and only one: as many vector rows as chunks.
    assert set().union(*stored) == set(chunk_rows)
    assert vectors == len(chunk_rows) == sum(t["chunks_total"] for t in ended.values())
