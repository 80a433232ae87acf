"""Settings of the documents pipeline; each has an ``AIGC_HUB_DOCS_`` environment twin."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

ENV_PREFIX = "AIGC_HUB_DOCS_"


class DocumentsSettings(BaseSettings):
    """Limits of what a user may upload, chunking, the embedding model, the vector store and
    the seed's consumer settings (§6.1) and backpressure thresholds (§7)."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, extra="ignore", hide_input_in_errors=True
    )

    max_file_bytes: int = Field(
        20 << 20, ge=1024, description="largest document a user may upload (413 above)"
    )
    max_pages: int = Field(500, ge=1, description="most PDF pages a document may have")
    max_chars: int = Field(
        2_000_000, ge=1000, description="most characters of text a document may carry"
    )
    chunk_tokens: int = Field(
        200,
        ge=16,
        le=256,
        description="tokens per chunk, counted by the embedding model's tokenizer "
        "(all-MiniLM-L6-v2 reads at most 256)",
    )
    chunk_overlap_tokens: int = Field(
        30, ge=0, le=128, description="tokens a chunk repeats from the one before it"
    )
    embedder: Literal["minilm", "openai"] = Field(
        "minilm",
        description="`minilm`: all-MiniLM-L6-v2 in process (the `ml` extra); `openai`: an "
        "OpenAI-compatible embeddings API",
    )
    ab_embedder: Literal["", "minilm", "openai"] = Field(
        "",
        description="a second embedding model version run beside the first (an A/B test): "
        "its own consumer group `embedding-workers-b` fills its own vector namespace, and "
        "search names it with `model=`; empty: none",
    )
    openai_base_url: str = Field(
        "https://api.openai.com/v1", description="base URL of the OpenAI-compatible API"
    )
    openai_api_key: SecretStr = Field(SecretStr(""), description="bearer key of that API")
    openai_embedding_model: str = Field(
        "text-embedding-3-small", description="embedding model name at that API"
    )
    openai_dimensions: int = Field(1536, ge=1, description="dimensions the API's model returns")
    torch_threads: int = Field(
        1, ge=1, le=64, description="torch intra-op threads of the in-process model"
    )
    embed_batch: int = Field(
        50, ge=1, le=2048, description="chunks per embedding call (the seed's max.poll.records)"
    )
    embed_wait_s: float = Field(
        2.0, ge=0, le=60, description="longest a chunk waits for its batch to fill (seed: 2 s)"
    )
    vectors_url: str = Field(
        "",
        description="the vector store: sqlite:///path (exact search in numpy) or "
        "postgresql://… with pgvector; empty = sqlite in <data dir>/documents/vectors.db",
    )
    analyzer: Literal["local", "openai"] = Field(
        "local",
        description="`local`: the compliance policy's clauses matched against the chunks with "
        "the embedding model; `openai`: an OpenAI-compatible chat model",
    )
    openai_chat_model: str = Field("gpt-4o-mini", description="chat model name at that API")
    analyzer_timeout_s: float = Field(
        60.0, gt=0, le=600, description="longest one analysis call may take"
    )
    policy_path: str = Field(
        "",
        description="JSON file of the compliance policy (versioned clauses); empty = the one "
        "the hub ships (compliance-v1)",
    )
    backpressure_on_lag: int = Field(
        10_000,
        ge=1,
        description="analysis lag that turns backpressure on; off below half (seed 003 §7)",
    )
    backpressure_check_s: float = Field(
        30.0, gt=0, description="how often the analysis lag is checked (seed: 30 s)"
    )
    backpressure_hold_s: float = Field(
        30.0,
        gt=0,
        description="how long backpressure stays on after the analyzer answered 429/503 "
        "(longer when it sent a longer Retry-After)",
    )
    backpressure_delay_s: float = Field(
        2.0, ge=0, le=60, description="wait before each analysis while backpressure is on"
    )
