"""One Settings object, read once at start-up; every field has an ``AIGC_HUB_`` env twin."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    """Where data lives and which engines run; embedded defaults need nothing installed."""

    model_config = SettingsConfigDict(env_prefix="AIGC_HUB_", extra="ignore")

    data_dir: Path = Field(Path("var"), description="folder for the SQLite files and blobs")
    database_url: str | None = Field(
        None, description="SQLAlchemy URL; default sqlite:///<data_dir>/hub.db; PostgreSQL at scale"
    )
    broker: Literal["embedded", "memory"] = Field(
        "embedded", description="messaging engine: the embedded SQLite log, or memory (tests)"
    )
    log_path: Path | None = Field(None, description="embedded log file; default <data_dir>/log.db")
    pipelines: str = Field(
        "", description="extra pipelines to load: 'module:attribute', comma separated"
    )
    concurrency: int = Field(4, ge=1, le=256, description="default records in flight per group")
    commit_batch: int = Field(256, ge=1, le=10_000, description="max events per group commit")
    commit_wait_ms: float = Field(2.0, ge=0, le=1000, description="max wait to fill a group commit")
    relay_batch: int = Field(500, ge=1, le=10_000, description="outbox rows per relay pass")

    def resolved_database_url(self) -> str:
        """The database URL, defaulting to a SQLite file under ``data_dir``."""
        return self.database_url or f"sqlite:///{self.data_dir / 'hub.db'}"

    def pipeline_paths(self) -> list[str]:
        """The ``pipelines`` entries, split and stripped."""
        return [p.strip() for p in self.pipelines.split(",") if p.strip()]

    def resolved_log_path(self) -> Path:
        """The embedded log's file."""
        return self.log_path or self.data_dir / "log.db"
