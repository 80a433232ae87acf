"""The documents pipeline's per-hub state: settings, the blob store, the parser's limits,
the splitter, the embedding model and the vector store. Built once at hub start by
:func:`build_state`; handlers receive it, routes take it from :data:`STATE`.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from aigc_hub.blobs.base import BlobStore
from aigc_hub.core.errors import ConfigurationError
from aigc_hub.core.failpoints import NONE, Failpoints
from aigc_hub.pipeline import StateKey

from .adapters.analyzer import Analyzer
from .adapters.embedder import AbsentEmbedder, Embedder, EmbedderMissing
from .backpressure import Backpressure
from .parsing import ParseLimits
from .settings import DocumentsSettings
from .splitting import Splitter
from .vectors.base import VectorStore
from .vectors.opening import open_vector_store

if TYPE_CHECKING:
    from aigc_hub.bootstrap import Hub
    from aigc_hub.settings import Settings

NAME = "documents"


@dataclass
class Documents:
    """Everything the documents pipeline's handlers, routes and scanners share in one hub."""

    hub: Hub
    settings: DocumentsSettings
    embedder: Embedder
    data_dir: Path = Path("var")
    #: Given by a test or an embedder; else made from the settings on first use.
    analyzer_override: Analyzer | None = None
    #: The A/B test's second model version (``AIGC_HUB_DOCS_AB_EMBEDDER``); made from the
    #: settings unless given.
    ab_embedder: Embedder | None = None
    backpressure: Backpressure = field(init=False)
    _analyzer: Analyzer | None = field(default=None, init=False, repr=False)
    _splitter: Splitter | None = field(default=None, init=False, repr=False)
    _vectors: VectorStore | None = field(default=None, init=False, repr=False)
    _vectors_opening: asyncio.Lock = field(default_factory=asyncio.Lock, init=False, repr=False)

    def __post_init__(self) -> None:
        self.backpressure = Backpressure(self.hub, self.settings)
        self._analyzer = self.analyzer_override
        if self.ab_embedder is None and self.settings.ab_embedder:
            self.ab_embedder = make_embedder(
                self.settings, self.hub.failpoints, kind=self.settings.ab_embedder
            )
        if self.ab_embedder is not None and self.ab_embedder.name == self.embedder.name:
            raise ConfigurationError(
                f"AIGC_HUB_DOCS_AB_EMBEDDER names the model already embedding "
                f"({self.embedder.name}): choose another model version for the A/B test"
            )

    def embedder_named(self, model: str | None) -> Embedder | None:
        """The embedder of model version ``model`` (None: the primary), or None."""
        if model is None or model == self.embedder.name:
            return self.embedder
        if self.ab_embedder is not None and model == self.ab_embedder.name:
            return self.ab_embedder
        return None

    @property
    def analyzer(self) -> Analyzer:
        """The compliance analyzer the settings name, made on first use."""
        if self._analyzer is None:
            self._analyzer = make_analyzer(self.settings, self.embedder)
        return self._analyzer

    @property
    def store(self) -> BlobStore:
        """The hub's blob store (the uploaded documents)."""
        if self.hub.blobs is None:
            raise ConfigurationError("the documents pipeline keeps uploads in the blob store")
        return self.hub.blobs

    @property
    def limits(self) -> ParseLimits:
        """What a parsed document may be (the settings' size, page and text limits)."""
        s = self.settings
        return ParseLimits(max_bytes=s.max_file_bytes, max_pages=s.max_pages, max_chars=s.max_chars)

    @property
    def splitter(self) -> Splitter:
        """The chunker: the embedding model's tokenizer, loaded on first use."""
        if self._splitter is None:
            from .splitting import TokenSplitter, minilm_token_counter

            s = self.settings
            self._splitter = TokenSplitter(
                minilm_token_counter(), s.chunk_tokens, s.chunk_overlap_tokens
            )
        return self._splitter

    async def vectors(self) -> VectorStore:
        """The vector store (``AIGC_HUB_DOCS_VECTORS_URL``), opened once, on first use."""
        async with self._vectors_opening:
            if self._vectors is None:
                where = self.data_dir / "documents"
                self._vectors = await open_vector_store(self.settings.vectors_url, where)
        return self._vectors

    async def close(self) -> None:
        """Release the model's thread, the vendor's connections and the vector store."""
        await self.embedder.close()
        if self.ab_embedder is not None:
            await self.ab_embedder.close()
        if self._analyzer is not None:
            await self._analyzer.close()
        if self._vectors is not None:
            await self._vectors.close()


#: The typed handle on a hub's Documents (``kit.state_of(request, STATE)``).
STATE: StateKey[Documents] = StateKey(NAME)


def make_embedder(
    settings: DocumentsSettings, failpoints: Failpoints = NONE, *, kind: str | None = None
) -> Embedder:
    """The embedding model the settings name, or ``kind`` (``failpoints``: the hub's, for
    crash tests)."""
    if (kind or settings.embedder) == "openai":
        from .adapters.openai_embeddings import OpenAIEmbedder

        return OpenAIEmbedder(
            base_url=settings.openai_base_url,
            api_key=settings.openai_api_key.get_secret_value(),
            model=settings.openai_embedding_model,
            dimensions=settings.openai_dimensions,
        )
    from .adapters.minilm import MiniLMEmbedder

    return MiniLMEmbedder(torch_threads=settings.torch_threads, failpoints=failpoints)


def make_analyzer(settings: DocumentsSettings, embedder: Embedder) -> Analyzer:
    """The analyzer the settings name: the local policy matcher or a hosted chat model."""
    from .adapters.local_analyzer import LocalAnalyzer, load_policy

    policy = load_policy(settings.policy_path)
    if settings.analyzer == "openai":
        from .adapters.openai_chat import OpenAIChatAnalyzer

        return OpenAIChatAnalyzer(
            base_url=settings.openai_base_url,
            api_key=settings.openai_api_key.get_secret_value(),
            model=settings.openai_chat_model,
            policy=policy,
            timeout_s=settings.analyzer_timeout_s,
        )
    return LocalAnalyzer(embedder, policy)


def build_state(hub: Hub, settings: Settings) -> Documents:
    """The state factory: Documents from ``AIGC_HUB_DOCS_*`` and the hub's data dir."""
    docs_settings = DocumentsSettings()
    embedder: Embedder
    try:
        embedder = make_embedder(docs_settings, hub.failpoints)
    except EmbedderMissing as exc:
        # The hub runs without the model (a machine with nothing but Python): submitting
        # answers 503 with the fix, and `up` says so at start.
        embedder = AbsentEmbedder(f"{exc}, or set AIGC_HUB_DOCS_EMBEDDER=openai")
    return Documents(hub, docs_settings, embedder, settings.data_dir)
