"""documents end to end: documents/hour through the real pipeline against the bare embedding
model on the same chunks in the same process, and the submit latency at a fixed rate.

The hub runs as the tests' documents stack runs it, which is what ``aigc-hub up`` runs for
this pipeline on embedded defaults: one process holding the HTTP API (real uvicorn on
loopback), every documents consumer group (chunk → embed → store → completed) on one event
loop, SQLite for the hub and the vectors, the embedded log, and all-MiniLM-L6-v2 in process
on the embedder's one worker thread with one torch thread (``AIGC_HUB_DOCS_TORCH_THREADS``'s
default). Documents are plain text of about ``--doc-tokens`` MiniLM tokens, cut at paragraph
breaks from the real texts the tests' corpus is built from; uploads ask for no analysis, so
what is measured is indexing.

Parts (``--parts``, both by default):

- ``rate``    ``--rounds`` alternating rounds. A pipeline round uploads ``--docs`` new
              documents (multipart, as fast as the API answers) and waits until every task
              has ended: documents/hour from the first submit to the last completed. A bare
              round then takes exactly the chunks that round stored (read back from
              ``documents_chunks``) and embeds them with the same shared model object, in
              calls of ``embed_batch`` chunks with ``encode``'s batch of 32 (as the adapter
              does), on a thread of its own with one torch thread: documents/hour if the
              model were the only cost. Printed: both, the ratio, the ratio to the seed's
              3,600 documents/hour, and CPU seconds (of the whole process for the pipeline,
              of the encoding thread for the bare model).
- ``submit``  ``--submit-docs`` uploads open-loop at ``--submit-rate``/s from a separate
              process (so the client does not share the hub's event loop), the pipeline
              working behind them: latency of each POST from its scheduled send time
              (a late send counts against the hub), p50/p99/max, and the status codes.

Search over 100,000 vectors is ``bench/documents_vectors.py``.

    python bench/documents.py                         # bounded: a few minutes on 2 cores
    python bench/documents.py --parts rate --docs 40 --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx
import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.loopback import free_port, machine_load, percentile
from tests.support.documents import DocumentsStack, documents_stack
from tests.support.documents_corpus import sources
from tests.support.hubs import make_broker

from aigc_hub.moderation import semantic
from aigc_hub.pipelines.documents.models import documents_chunks, documents_tasks
from aigc_hub.pipelines.documents.splitting import minilm_token_counter
from aigc_hub.store import migrate

ROOT = Path(__file__).resolve().parent.parent
#: The blob signing key of the tests' documents stack (the API process shares its blobs).
BLOB_SECRET = "test-blob-secret"
SEED_RATE_PER_H = 3600.0
ENDED = ("completed", "failed", "deleted")
KB = "bench"
#: ``encode``'s own batch inside one embedding call: MiniLMEmbedder's default.
ENCODE_BATCH = 32


@dataclass(frozen=True)
class Doc:
    """One upload: a name, its UTF-8 text and its MiniLM token count."""

    name: str
    data: bytes
    tokens: int


def build_docs(count: int, target_tokens: int) -> list[Doc]:
    """``count`` text documents of about ``target_tokens`` tokens each, paragraphs of the
    tests' corpus sources taken in order (a document ends at the first paragraph break past
    the target). When the sources run out they are taken again, each document then opening
    with a line naming its pass, so no two uploads carry the same content."""
    counter = minilm_token_counter()
    docs: list[Doc] = []
    for copy in range(1_000):
        header = [f"Copy {copy} of this text."] if copy else []
        paragraphs, tokens = list(header), 0
        for source in sources():
            for paragraph in source.paragraphs:
                size = counter(paragraph)
                if size > target_tokens // 2:
                    continue  # one huge paragraph (a table, a list) would make a long outlier
                paragraphs.append(paragraph)
                tokens += size
                if tokens >= target_tokens:
                    text = "\n\n".join(paragraphs)
                    docs.append(Doc(f"doc{len(docs):05d}.txt", text.encode(), tokens))
                    paragraphs, tokens = list(header), 0
                    if len(docs) == count:
                        return docs
        if not docs:
            break
    raise SystemExit(f"no documents of {target_tokens} tokens in the corpus")


async def submit(client: httpx.AsyncClient, doc: Doc, key: str) -> httpx.Response:
    """Upload ``doc`` to the bench knowledge base, without analysis."""
    return await client.post(
        f"/v1/knowledge-bases/{KB}/documents",
        files={"file": (doc.name, doc.data, "text/plain")},
        data={"analysis": "false"},
        headers={"Idempotency-Key": key},
    )


async def ended_count(stack: DocumentsStack, task_ids: Sequence[str]) -> collections.Counter[str]:
    """Statuses of the ended tasks among ``task_ids`` (one query, not one request per task)."""
    query = (
        sa.select(documents_tasks.c.status, sa.func.count())
        .where(documents_tasks.c.id.in_(task_ids), documents_tasks.c.status.in_(ENDED))
        .group_by(documents_tasks.c.status)
    )
    async with stack.hub.engine.connect() as conn:
        rows = (await conn.execute(query)).all()
    return collections.Counter({str(status): int(n) for status, n in rows})


async def wait_all_ended(
    stack: DocumentsStack, task_ids: Sequence[str], timeout_s: float
) -> collections.Counter[str]:
    """Poll (every 50 ms, bounded) until every task has ended; their statuses."""
    deadline = time.monotonic() + timeout_s
    while True:
        counts = await ended_count(stack, task_ids)
        if sum(counts.values()) == len(task_ids):
            return counts
        if time.monotonic() > deadline:
            raise TimeoutError(f"{sum(counts.values())}/{len(task_ids)} ended in {timeout_s} s")
        await asyncio.sleep(0.05)


async def round_chunks(stack: DocumentsStack, task_ids: Sequence[str]) -> list[str]:
    """The chunks the pipeline stored for these tasks, in document and chunk order."""
    query = (
        sa.select(documents_chunks.c.content)
        .join(documents_tasks, documents_tasks.c.document_id == documents_chunks.c.document_id)
        .where(documents_tasks.c.id.in_(task_ids))
        .order_by(documents_tasks.c.created_at, documents_chunks.c.ordinal)
    )
    async with stack.hub.engine.connect() as conn:
        return [str(text) for text in (await conn.scalars(query)).all()]


@dataclass(frozen=True)
class Timed:
    """Wall and CPU seconds of one round."""

    wall_s: float
    cpu_s: float


class BareModel:
    """The shared MiniLM object on a thread of its own, torch threads set on that thread as
    the embedder sets them on its worker: nothing else between the chunks and the model."""

    def __init__(self, torch_threads: int, call_size: int) -> None:
        loader = semantic.sentence_transformer_class()
        self.model, _ = semantic.shared_model(semantic.shipped_model_dir(), loader, 1)
        self.torch_threads = torch_threads
        self.call_size = call_size

    def _run(self, chunks: list[str], out: list[Timed]) -> None:
        import torch

        torch.set_num_threads(self.torch_threads)
        cpu, wall = time.thread_time(), time.perf_counter()
        for start in range(0, len(chunks), self.call_size):
            self.model.encode(
                chunks[start : start + self.call_size],
                batch_size=ENCODE_BATCH,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
        out.append(Timed(time.perf_counter() - wall, time.thread_time() - cpu))

    async def embed(self, chunks: list[str]) -> Timed:
        """Embed ``chunks`` on a fresh thread; its wall and thread CPU seconds."""
        out: list[Timed] = []
        thread = threading.Thread(target=self._run, args=(chunks, out), name="bare-minilm")
        thread.start()
        await asyncio.to_thread(thread.join)
        return out[0]


@contextlib.asynccontextmanager
async def stack_on_defaults(workdir: Path) -> AsyncIterator[DocumentsStack]:
    """The hub on embedded defaults (SQLite, embedded log, MiniLM in process)."""
    url = f"sqlite:///{workdir / 'hub.db'}"
    migrate.upgrade(url)
    broker = make_broker("embedded", workdir)
    async with documents_stack(url, broker, workdir) as stack:
        yield stack


async def part_rate(stack: DocumentsStack, docs: list[Doc], rounds: int, per_round: int) -> None:
    key = await stack.tenant("bench-rate")
    settings = stack.docs.settings
    bare = BareModel(settings.torch_threads, settings.embed_batch)
    print(
        f"pipeline: API + every documents group on one event loop, MiniLM on the embedder's "
        f"worker thread with {settings.torch_threads} torch thread(s), calls of up to "
        f"{settings.embed_batch} chunks (encode batch {ENCODE_BATCH}, wait "
        f"{settings.embed_wait_s:g} s); bare: the same model object, {bare.torch_threads} "
        f"torch thread(s) on its own thread, calls of {bare.call_size} chunks"
    )
    print(
        f"{'round':>5} {'docs':>4} {'chunks':>6} {'pipe docs/h':>11} {'bare docs/h':>11} "
        f"{'ratio':>6} {'pipe CPU s':>10} {'bare CPU s':>10}  load"
    )
    totals = {"docs": 0, "pipe_wall": 0.0, "bare_wall": 0.0, "pipe_cpu": 0.0, "bare_cpu": 0.0}
    async with stack.client(key) as client:
        for number in range(rounds):
            batch = docs[number * per_round : (number + 1) * per_round]
            cpu, began = time.process_time(), time.perf_counter()
            task_ids = []
            for i, doc in enumerate(batch):
                answer = await submit(client, doc, f"r{number}-{i}")
                if answer.status_code != 202:
                    raise SystemExit(f"submit answered {answer.status_code}: {answer.text}")
                task_ids.append(str(answer.json()["task_id"]))
            statuses = await wait_all_ended(stack, task_ids, timeout_s=60 + 30 * len(batch))
            pipe = Timed(time.perf_counter() - began, time.process_time() - cpu)
            if statuses != {"completed": len(batch)}:
                raise SystemExit(f"round {number}: not every task completed: {statuses}")
            chunks = await round_chunks(stack, task_ids)
            bare_run = await bare.embed(chunks)
            for name, value in (
                ("docs", len(batch)),
                ("pipe_wall", pipe.wall_s),
                ("bare_wall", bare_run.wall_s),
                ("pipe_cpu", pipe.cpu_s),
                ("bare_cpu", bare_run.cpu_s),
            ):
                totals[name] += value
            pipe_rate = len(batch) / pipe.wall_s * 3600
            bare_rate = len(batch) / bare_run.wall_s * 3600
            print(
                f"{number:>5} {len(batch):>4} {len(chunks):>6} {pipe_rate:>11,.0f} "
                f"{bare_rate:>11,.0f} {pipe_rate / bare_rate:>6.2f} {pipe.cpu_s:>10.1f} "
                f"{bare_run.cpu_s:>10.1f}  {machine_load()}",
                flush=True,
            )
    pipe_rate = totals["docs"] / totals["pipe_wall"] * 3600
    bare_rate = totals["docs"] / totals["bare_wall"] * 3600
    print(
        f"all rounds: pipeline {pipe_rate:,.0f} documents/h, bare model {bare_rate:,.0f} "
        f"documents/h, ratio {pipe_rate / bare_rate:.2f}; pipeline "
        f"{pipe_rate / SEED_RATE_PER_H:.1f}x the seed's 3,600/h (aim 10x). Per CPU second: "
        f"pipeline "
        f"{totals['docs'] / totals['pipe_cpu']:.2f} documents (whole process), bare "
        f"{totals['docs'] / totals['bare_cpu']:.2f} (encoding thread), ratio "
        f"{totals['bare_cpu'] / totals['pipe_cpu']:.2f}"
    )


@contextlib.asynccontextmanager
async def api_process(workdir: Path) -> AsyncIterator[str]:
    """``aigc-hub api`` as a deployment runs it, in a process of its own on the bench hub's
    database, log and blobs (``bench/apiserver.py``: the per-tenant limit raised); its URL."""
    port = free_port()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)]),
        "AIGC_HUB_DATABASE_URL": f"sqlite:///{workdir / 'hub.db'}",
        "AIGC_HUB_BROKER": "embedded",
        "AIGC_HUB_LOG_PATH": str(workdir / "log.db"),
        "AIGC_HUB_DATA_DIR": str(workdir / "api"),
        "AIGC_HUB_BLOB_URL": f"file://{workdir / 'blobs'}",
        "AIGC_HUB_BLOB_SIGNING_KEY": BLOB_SECRET,
        "AIGC_HUB_PIPELINES": "documents",
        "AIGC_HUB_DOCS_VECTORS_URL": f"sqlite:///{workdir / 'vectors.db'}",
        "AIGC_HUB_LOG_LEVEL": "WARNING",
    }
    command = [sys.executable, str(ROOT / "bench" / "apiserver.py"), "--port", str(port)]
    child = await asyncio.create_subprocess_exec(*command, "--rate-limit", "100000", env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient(base_url=url, trust_env=False) as probe:
            deadline = time.monotonic() + 60
            while True:
                with contextlib.suppress(httpx.TransportError):
                    if (await probe.get("/healthz")).status_code == 200:
                        break
                if child.returncode is not None or time.monotonic() > deadline:
                    raise SystemExit("the API process did not start")
                await asyncio.sleep(0.2)
        yield url
    finally:
        child.terminate()
        await asyncio.wait_for(child.wait(), 30)


async def part_submit(
    stack: DocumentsStack, docs: list[Doc], rate: float, *, api_url: str | None = None
) -> None:
    """Uploads at ``rate`` to the bench hub's own API, or to ``api_url`` (an API process)."""
    key = await stack.tenant(f"bench-submit-{'own' if api_url is None else 'api'}")
    url = api_url or stack.api_url
    with tempfile.NamedTemporaryFile("wb", suffix=".json") as spec:
        spec.write(json.dumps({"url": url, "key": key, "rate": rate}).encode())
        spec.flush()
        with tempfile.TemporaryDirectory(prefix="bench-docs-load-") as folder:
            for doc in docs:
                (Path(folder) / doc.name).write_bytes(doc.data)
            command = [sys.executable, __file__, "load", spec.name, folder]
            child = await asyncio.create_subprocess_exec(*command, stdout=subprocess.PIPE)
            out, _ = await asyncio.wait_for(child.communicate(), 120 + len(docs) / rate * 3)
    if child.returncode != 0:
        raise SystemExit(f"the load process ended with {child.returncode}")
    result = json.loads(out)
    ms = sorted(result["latencies_ms"])
    where = "the hub's own API" if api_url is None else "an API process of its own"
    print(
        f"submit to {where} at {rate:g}/s open-loop, {len(ms)} uploads over "
        f"{result['span_s']:.1f} s: "
        f"p50 {percentile(ms, 50):.1f} ms, p99 {percentile(ms, 99):.1f} ms, max {ms[-1]:.1f} ms; "
        f"statuses {result['statuses']}; {machine_load()}"
    )
    query = sa.select(documents_tasks.c.status, sa.func.count()).group_by(documents_tasks.c.status)
    async with stack.hub.engine.connect() as conn:
        counts = {str(status): int(n) for status, n in (await conn.execute(query)).all()}
    print(f"  tasks by status right after the last submit (the pipeline behind): {counts}")


def read_load(spec_path: str, folder: str) -> tuple[dict[str, str], list[Doc]]:
    """The load process's orders (url, key, rate) and its files, read before it starts."""
    spec = json.loads(Path(spec_path).read_text())
    return spec, [Doc(p.name, p.read_bytes(), 0) for p in sorted(Path(folder).iterdir())]


async def load(spec: dict[str, str], docs: list[Doc]) -> None:
    """The child of ``submit``: POST every document at the rate, each on its own task at its
    scheduled time (open loop); prints the latencies as JSON."""
    latencies: list[float] = []
    statuses: collections.Counter[str] = collections.Counter()
    limits = httpx.Limits(max_connections=200, max_keepalive_connections=200)
    headers = {"Authorization": f"Bearer {spec['key']}"}
    async with httpx.AsyncClient(
        base_url=spec["url"], headers=headers, limits=limits, timeout=60, trust_env=False
    ) as client:
        await client.get("/healthz")  # one connection open before the clock starts

        async def one(index: int, doc: Doc, due: float) -> None:
            await asyncio.sleep(max(0.0, due - time.perf_counter()))
            answer = await submit(client, doc, f"load-{index}")
            latencies.append((time.perf_counter() - due) * 1000)
            statuses[str(answer.status_code)] += 1

        start = time.perf_counter() + 0.2
        interval = 1 / float(spec["rate"])
        await asyncio.gather(*(one(i, doc, start + i * interval) for i, doc in enumerate(docs)))
        span = time.perf_counter() - start
    print(json.dumps({"latencies_ms": latencies, "statuses": statuses, "span_s": span}))


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--parts", default="rate,submit", help="comma-separated: rate, submit")
    parser.add_argument("--doc-tokens", type=int, default=2000, help="MiniLM tokens a document")
    parser.add_argument("--docs", type=int, default=30, help="documents in each rate round")
    parser.add_argument("--rounds", type=int, default=3, help="pipeline/bare round pairs")
    parser.add_argument("--submit-rate", type=float, default=20.0, help="uploads a second")
    parser.add_argument("--submit-docs", type=int, default=600, help="uploads in submit")
    parser.add_argument(
        "--submit-to",
        default="api,own",
        help="comma-separated: api (an `aigc-hub api` process, as deployed: the pipeline runs "
        "in the bench's process), own (the API on the pipeline's event loop, as `up` runs it)",
    )
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    rate_docs = args.docs * args.rounds if "rate" in parts else 0
    targets = [t for t in args.submit_to.split(",") if t] if "submit" in parts else []
    submit_docs = args.submit_docs * len(targets)
    docs = build_docs(rate_docs + submit_docs, args.doc_tokens)
    sizes = sorted(d.tokens for d in docs)
    print(
        f"{len(docs)} text documents, MiniLM tokens median {sizes[len(sizes) // 2]}, "
        f"min {sizes[0]}, max {sizes[-1]}; {machine_load()}"
    )
    began = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-documents-") as folder:
        async with stack_on_defaults(Path(folder)) as stack:
            print(f"hub started in {time.perf_counter() - began:.1f} s (model warm)")
            if "rate" in parts:
                await part_rate(stack, docs[:rate_docs], args.rounds, args.docs)
            for n, target in enumerate(targets):
                batch = docs[rate_docs + n * args.submit_docs :][: args.submit_docs]
                if target == "api":
                    async with api_process(Path(folder)) as url:
                        await part_submit(stack, batch, args.submit_rate, api_url=url)
                else:
                    await part_submit(stack, batch, args.submit_rate)
    print(f"total {time.perf_counter() - began:.0f} s; {machine_load()}")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "load":
        asyncio.run(load(*read_load(sys.argv[2], sys.argv[3])))
    else:
        asyncio.run(main())
