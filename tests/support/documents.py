"""A documents stack for tests: a started hub (documents only) behind a real uvicorn API,
running every consumer group (or those named) until the block ends."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from aigc_hub.blobs.base import BlobStore
from aigc_hub.blobs.local import LocalBlobStore
from aigc_hub.bootstrap import Hub
from aigc_hub.core.failpoints import Failpoints
from aigc_hub.hub_config import HubConfig
from aigc_hub.interfaces.http.app import create_app
from aigc_hub.interfaces.http.limits import Limits
from aigc_hub.messaging.base import Broker
from aigc_hub.pipeline import Pipeline
from aigc_hub.pipelines.documents.adapters.embedder import Embedder
from aigc_hub.pipelines.documents.adapters.minilm import MiniLMEmbedder
from aigc_hub.pipelines.documents.pipeline import pipeline as documents_pipeline
from aigc_hub.pipelines.documents.settings import DocumentsSettings
from aigc_hub.pipelines.documents.state import STATE, Documents, make_embedder
from aigc_hub.store import engine as store_engine
from tests.support.served import ServedHub, serve

ENDED = {"completed", "failed", "deleted"}


@dataclass
class DocumentsStack(ServedHub):
    hub: Hub
    api_url: str
    stop: asyncio.Event
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    @property
    def docs(self) -> Documents:
        return self.hub.state_of(STATE)


def documents_pipeline_in(
    tmp_path: Path, embedder: Embedder | None = None, **settings: Any
) -> Pipeline[Documents]:
    """documents with ``settings`` (``DocumentsSettings`` fields; vectors under ``tmp_path``
    unless named) and, when given, ``embedder`` instead of the one the settings name."""
    values: dict[str, Any] = {"vectors_url": f"sqlite:///{tmp_path / 'vectors.db'}"} | settings
    docs_settings = DocumentsSettings(**values)

    def build(hub: Hub, _settings: object) -> Documents:
        model = embedder if embedder is not None else make_embedder(docs_settings)
        return Documents(hub, docs_settings, model, tmp_path)

    return documents_pipeline.with_state(build)


@contextlib.asynccontextmanager
async def documents_stack(
    db_url: str,
    broker: Broker,
    tmp_path: Path,
    *,
    blobs: BlobStore | None = None,
    failpoints: Failpoints | None = None,
    groups: Sequence[str] | None = None,
    embedder: Embedder | None = None,
    hub_options: Mapping[str, Any] | None = None,
    **settings: Any,
) -> AsyncIterator[DocumentsStack]:
    """A started hub running documents (every group, or ``groups``), its API on loopback."""
    config = HubConfig(
        engine=store_engine.create_engine(db_url),
        broker=broker,
        blobs=blobs or LocalBlobStore(tmp_path / "blobs", secret=b"test-blob-secret"),
        failpoints=failpoints or Failpoints(),
        **(hub_options or {}),
    )
    hub = Hub(config, [documents_pipeline_in(tmp_path, embedder, **settings)])
    await hub.start()
    model = hub.state_of(STATE).embedder
    if isinstance(model, MiniLMEmbedder):
        await model.warm_up()  # seconds of imports: not inside a test's waiting time
    stop = asyncio.Event()
    stack = DocumentsStack(hub, "", stop)
    stack.tasks.append(asyncio.create_task(hub.run(stop, groups, scan=False)))
    try:
        app = create_app(hub, limits=Limits(rate_per_s=5_000, burst=5_000))
        async with serve(app) as url:
            stack.api_url = url
            yield stack
    finally:
        stop.set()
        await asyncio.wait_for(asyncio.gather(*stack.tasks, return_exceptions=True), 30)
        await hub.close()


async def submit(
    client: httpx.AsyncClient,
    kb: str,
    name: str,
    data: bytes,
    mime: str,
    *,
    key: str,
    **fields: str,
) -> httpx.Response:
    """``POST /v1/knowledge-bases/{kb}/documents`` with ``data`` as the file."""
    return await client.post(
        f"/v1/knowledge-bases/{kb}/documents",
        files={"file": (name, data, mime)},
        data=fields,
        headers={"Idempotency-Key": key},
    )


async def wait_ended(
    client: httpx.AsyncClient, task_ids: Sequence[str], timeout_s: float = 120
) -> dict[str, dict[str, Any]]:
    """Poll the tasks until every one has ended; their last snapshots by id.

    One task is polled at a time (the first still running; the pipeline works roughly in
    submission order, so the later ones have mostly ended when their turn comes): a few
    requests per poll instead of one per pending task, which with hundreds of tasks would
    take the CPU from the pipeline under test."""
    deadline = time.monotonic() + timeout_s
    ended: dict[str, dict[str, Any]] = {}
    for task_id in task_ids:
        while True:
            answer = await client.get(f"/v1/documents/tasks/{task_id}")
            answer.raise_for_status()
            last = answer.json()
            if last["status"] in ENDED:
                ended[task_id] = last
                break
            if time.monotonic() > deadline:
                left = len(task_ids) - len(ended)
                raise TimeoutError(f"{left} tasks still running, e.g. {last}")
            await asyncio.sleep(0.1)
    return ended
