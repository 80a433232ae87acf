"""The render worker's graph against the single equivalent ``ffmpeg`` command.

A 60 s 720p timeline: 12 clips of 5.5 s from 8 s 720p sources, each joined to the one
before by a 0.5 s crossfade, a title over the first 3 s, music with gain and a fade out,
encoded with the ``hd`` profile (H.264 CRF 22, preset medium, AAC 160 kb/s). Three ways:

- ``reference``: one ``ffmpeg`` process with the same filters in one filter graph (trim,
  scale and pad, ``xfade`` chain, the title picture overlaid, the audio filters, the same
  encoder arguments): the physical reference, with nothing cached and nothing retried;
- ``graph cold``: :func:`render_run.run_graph` with an empty node cache (clip, sequence,
  text, compose, audio, mix and encode nodes, each an FFmpeg process writing an intermediate);
- ``graph warm``: right after, the same timeline with one clip's in/out points changed:
  the other clips, the title, the audio and the mix come from the cache.

Both sides encode with one thread (the render worker's default ``render_threads``). CPU
seconds are this process's own plus its children's (``getrusage``). Rounds alternate which
side runs first. The node cache here is a folder (``FolderCache``); the hub's is the blob
store, whose copies add to the graph's wall time (not measured here).

    python bench/render.py               # 2 rounds
    python bench/render.py --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import resource
import statistics
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aigc_hub.media import tools
from aigc_hub.pipelines.generation import render_commands, render_graph, render_run
from aigc_hub.pipelines.generation.render_graph import RenderGraph, SourceFacts
from aigc_hub.pipelines.generation.timeline import TimelineV1

CLIPS = 12
SOURCE_S = 8
PATTERNS = ("testsrc2", "smptehdbars", "rgbtestsrc", "testsrc", "pal100bars", "yuvtestsrc")
MUSIC = "00000000-0000-4000-8000-000000000099"
W, H, RATE = 1280, 720, 25
CHANGED = 6  # the clip whose in/out points the warm run changes


@dataclass(frozen=True)
class Run:
    wall_s: float
    cpu_s: float
    ran: int = 0
    reused: int = 0


def clip_id(i: int) -> str:
    return f"00000000-0000-4000-8000-{i:012d}"


def ffmpeg(*args: str) -> None:
    subprocess.run([tools.executable("ffmpeg"), "-nostdin", "-v", "error", "-y", *args], check=True)


def make_sources(folder: Path) -> dict[str, Path]:
    """12 8 s 720p clips of test patterns, and 70 s of music (not measured)."""
    paths = {}
    for i in range(CLIPS):
        path = folder / f"clip{i}.mp4"
        pattern = PATTERNS[i % len(PATTERNS)]
        ffmpeg(
            *("-f", "lavfi", "-i", f"{pattern}=size={W}x{H}:rate={RATE}:duration={SOURCE_S}"),
            *("-vf", f"hue=h={i * 30}"),  # no two sources alike (the cache would share them)
            *("-c:v", "libx264", "-preset", "veryfast", "-pix_fmt", "yuv420p", str(path)),
        )
        paths[clip_id(i)] = path
    music = folder / "music.wav"
    ffmpeg("-f", "lavfi", "-i", "sine=frequency=330:duration=70", str(music))
    paths[MUSIC] = music
    return paths


def facts(paths: dict[str, Path]) -> dict[str, SourceFacts]:
    return {
        asset_id: SourceFacts(
            asset_id=asset_id,
            sha256=hashlib.sha256(path.read_bytes()).hexdigest(),
            duration_ms=70_000 if asset_id == MUSIC else SOURCE_S * 1000,
            has_video=asset_id != MUSIC,
            has_audio=asset_id == MUSIC,
        )
        for asset_id, path in paths.items()
    }


def timeline(changed: bool = False) -> dict[str, Any]:
    """Clip i at i·5 s for 5.5 s (the last 5 s), crossfading 0.5 s over the one before."""
    clips = []
    for i in range(CLIPS):
        length = 5000 if i == CLIPS - 1 else 5500
        start = 1500 if changed and i == CHANGED else 1000
        clip: dict[str, Any] = {
            "id": f"c{i}",
            "asset_id": clip_id(i),
            "at_ms": i * 5000,
            "in_ms": start,
            "out_ms": start + length,
        }
        if i:
            clip["transition_in"] = {"kind": "crossfade", "duration_ms": 500}
        clips.append(clip)
    return {
        "output": {"width": W, "height": H, "frame_rate": RATE, "duration_ms": 60_000},
        "tracks": [{"id": "v1", "clips": clips}],
        "texts": [{"id": "title", "text": "Sixty seconds", "start_ms": 0, "end_ms": 3000}],
        "audio": [
            {
                "id": "music",
                "asset_id": MUSIC,
                "at_ms": 0,
                "in_ms": 0,
                "out_ms": 60_000,
                "gain_db": -6,
                "fade_out_ms": 2000,
            }
        ],
    }


def compiled(paths: dict[str, Path], changed: bool = False) -> RenderGraph:
    doc = TimelineV1.model_validate(timeline(changed))
    return render_graph.compile_graph(doc, render_graph.profile_named("hd"), facts(paths))


def reference_args(
    doc: dict[str, Any], paths: dict[str, Path], title: Path, out: Path
) -> list[str]:
    """One ffmpeg process doing what the graph does, in one filter graph."""
    graph = render_graph.profile_named("hd")
    args: list[str] = []
    clips = doc["tracks"][0]["clips"]
    for clip in clips:
        length = (clip["out_ms"] - clip["in_ms"]) / 1000
        args += ["-ss", f"{clip['in_ms'] / 1000:.3f}", "-t", f"{length:.3f}"]
        args += ["-i", str(paths[clip["asset_id"]])]
    args += ["-i", str(paths[MUSIC]), "-i", str(title)]
    norm = (
        f"fps={RATE},scale={W}:{H}:force_original_aspect_ratio=decrease,"
        f"pad={W}:{H}:(ow-iw)/2:(oh-ih)/2:color=black,setsar=1,format=yuv420p,settb=AVTB"
    )
    parts = [f"[{i}:v]{norm}[c{i}]" for i in range(len(clips))]
    current = "c0"
    for i, clip in enumerate(clips[1:], start=1):
        parts.append(
            f"[{current}][c{i}]xfade=transition=fade:duration=0.5"
            f":offset={clip['at_ms'] / 1000:.3f}[s{i}]"
        )
        current = f"s{i}"
    music, picture = len(clips), len(clips) + 1
    parts.append(
        f"[{current}][{picture}:v]overlay=0:0:enable='between(t,0,2.999)':eof_action=repeat,"
        "format=yuv420p[v]"
    )
    parts.append(
        f"[{music}:a]atrim=start=0:end=60,asetpts=PTS-STARTPTS,volume=-6dB,afade=t=out:st=58:d=2[a]"
    )
    assert graph.height == H
    return [
        *args,
        *("-filter_complex", ";".join(parts), "-map", "[v]", "-map", "[a]"),
        *("-c:v", "libx264", "-preset", "medium", "-crf", "22", "-pix_fmt", "yuv420p"),
        *("-r", str(RATE), "-frames:v", str(60 * RATE), "-threads", "1"),
        *("-c:a", "aac", "-b:a", "160k", "-t", "60", "-movflags", "+faststart", str(out)),
    ]


def _cpu() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


async def measured(work: Callable[[], Awaitable[tuple[int, int]]]) -> Run:
    cpu, wall = _cpu(), time.perf_counter()
    ran, reused = await work()
    return Run(time.perf_counter() - wall, _cpu() - cpu, ran, reused)


async def one_round(paths: dict[str, Path], title: Path, folder: Path, first: str) -> list[Run]:
    """reference, cold, warm (or cold, warm, reference): their runs in that fixed order."""
    settings = render_run.RunSettings(threads=1)
    cache = render_run.FolderCache(folder / "cache")

    async def reference() -> tuple[int, int]:
        out = folder / "reference.mp4"
        args = reference_args(timeline(), paths, title, out)
        await asyncio.to_thread(ffmpeg, *args)
        return 1, 0

    def graph_run(changed: bool) -> Callable[[], Awaitable[tuple[int, int]]]:
        async def run() -> tuple[int, int]:
            graph = compiled(paths, changed)
            report = await render_run.run_graph(
                graph, paths, cache, folder / f"work-{changed}", settings=settings
            )
            return len(report.ran), len(report.reused)

        return run

    runs: dict[str, Run] = {}
    order = ["reference", "cold", "warm"] if first == "reference" else ["cold", "warm", "reference"]
    for name in order:
        job = reference if name == "reference" else graph_run(name == "warm")
        runs[name] = await measured(job)
    return [runs["reference"], runs["cold"], runs["warm"]]


def title_picture(paths: dict[str, Path], dest: Path) -> Path:
    graph = compiled(paths)
    node = next(n for n in graph.nodes if n.kind == "text")
    render_commands.draw_text(node, dest)
    return dest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "sources").mkdir()
        paths = make_sources(root / "sources")
        title = title_picture(paths, root / "title.png")
        results: dict[str, list[Run]] = {"reference": [], "cold": [], "warm": []}
        for n in range(args.rounds):
            folder = root / f"round{n}"
            folder.mkdir()
            first = "reference" if n % 2 == 0 else "graph"
            reference, cold, warm = asyncio.run(one_round(paths, title, folder, first))
            for name, run in (("reference", reference), ("cold", cold), ("warm", warm)):
                results[name].append(run)
                print(
                    f"round {n + 1} {name:9} wall {run.wall_s:6.1f} s  cpu {run.cpu_s:6.1f} s"
                    + (f"  nodes ran {run.ran} reused {run.reused}" if name != "reference" else "")
                )
        print(f"\nmedians of {args.rounds} rounds (60 s of 720p output, one encoder thread)")
        ref = results["reference"]
        ref_wall = statistics.median(r.wall_s for r in ref)
        ref_cpu = statistics.median(r.cpu_s for r in ref)
        for name in ("reference", "cold", "warm"):
            wall = statistics.median(r.wall_s for r in results[name])
            cpu = statistics.median(r.cpu_s for r in results[name])
            print(
                f"{name:9} wall {wall:6.1f} s ({wall / ref_wall:4.2f}x)  "
                f"cpu {cpu:6.1f} s ({cpu / ref_cpu:4.2f}x)"
            )


if __name__ == "__main__":
    main()
