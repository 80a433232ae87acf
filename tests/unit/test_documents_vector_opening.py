"""``open_vector_store``: which engine and which file a URL names, and the URLs it refuses."""

from __future__ import annotations

from pathlib import Path

import pytest

from aigc_hub.core.errors import ConfigurationError
from aigc_hub.pipelines.documents.vectors import open_vector_store
from aigc_hub.pipelines.documents.vectors.sqlite import SQLiteVectorStore


async def test_no_url_is_sqlite_in_the_data_dir(tmp_path: Path) -> None:
    store = await open_vector_store("", tmp_path / "data")
    try:
        assert isinstance(store, SQLiteVectorStore) and store.engine == "sqlite"
        assert store.path == tmp_path / "data" / "vectors.db" and store.path.exists()
    finally:
        await store.close()


async def test_a_sqlite_url_names_its_file_as_the_hubs_database_url_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    absolute = await open_vector_store(f"sqlite:///{tmp_path / 'abs.db'}", tmp_path / "unused")
    monkeypatch.chdir(tmp_path)
    relative = await open_vector_store("sqlite:///rel/v.db", tmp_path / "unused")
    try:
        assert isinstance(absolute, SQLiteVectorStore) and absolute.path == tmp_path / "abs.db"
        assert isinstance(relative, SQLiteVectorStore) and relative.path == Path("rel/v.db")
        assert (tmp_path / "rel" / "v.db").exists() and not (tmp_path / "unused").exists()
    finally:
        await absolute.close()
        await relative.close()


@pytest.mark.parametrize(
    "url",
    ["sqlite://", "sqlite:///", "sqlite:///:memory:", "sqlite:relative.db", "mysql://h/db", "x"],
)
async def test_a_url_naming_no_store_is_a_configuration_error(tmp_path: Path, url: str) -> None:
    with pytest.raises(ConfigurationError, match="vector store URL"):
        await open_vector_store(url, tmp_path)
