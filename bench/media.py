"""The HLS ladder of a 10 s 720p source: the media toolkit against the bare ``ffmpeg`` command.

Both sides encode the same ladder (360p + 720p, H.264/AAC, 2 s segments) with the same
encoder arguments (``aigc_hub.media.commands.hls``); what differs is everything the toolkit
adds around FFmpeg: staging the input under a fixed name, the format/codec/protocol
whitelists, the process group, the address-space limit, the deadline, reaping with ``wait4``,
the scratch directory and moving the result into place. Rounds alternate which side runs
first, so drift on a shared machine falls on both.

CPU seconds count the FFmpeg child (``wait4`` / ``RUSAGE_CHILDREN``) and, for the toolkit,
this process's own CPU during the call. Figures are per second of output (the ladder is
``--seconds`` long).

    python bench/media.py                  # 5 rounds
    python bench/media.py --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import shutil
import statistics
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from aigc_hub.media import commands, tools
from aigc_hub.media.ladder import DEFAULT_LADDER, make_variant, plan_ladder
from aigc_hub.media.probe import MediaInfo, probe


@dataclass(frozen=True)
class Run:
    cpu_s: float
    wall_s: float


def make_source(dest: Path, seconds: float) -> Path:
    """A 1280x720 25 fps H.264/AAC test clip (not measured)."""
    subprocess.run(
        [
            tools.executable("ffmpeg"),
            *("-nostdin", "-v", "error", "-y"),
            *("-f", "lavfi", "-i", "testsrc2=size=1280x720:rate=25"),
            *("-f", "lavfi", "-i", "sine=frequency=440"),
            *("-t", f"{seconds:g}", "-c:v", "libx264", "-preset", "veryfast"),
            *("-pix_fmt", "yuv420p", "-c:a", "aac", str(dest)),
        ],
        check=True,
    )
    return dest


async def ours(source: Path, info: MediaInfo, work: Path) -> Run:
    """make_variant("hls", ...): the toolkit's whole call."""
    out = work / "ours"
    started, own = time.perf_counter(), time.process_time()
    made = await make_variant("hls", source, info, out)
    wall, own = time.perf_counter() - started, time.process_time() - own
    shutil.rmtree(out)
    return Run(made.cpu_s + own, wall)


def bare(source: Path, info: MediaInfo, work: Path) -> Run:
    """The same ladder as one plain ``ffmpeg`` command line."""
    out = work / "bare"
    (out / "out").mkdir(parents=True)
    rungs = [
        commands.Rung(r.name, *commands.fit(info.width or 0, info.height or 0, r.height),
                      r.video_kbps, r.audio_kbps)
        for r in plan_ladder(DEFAULT_LADDER, info.height or 0)
    ]  # fmt: skip
    rate = (info.frame_rate_num or 25) / (info.frame_rate_den or 1)
    args = commands.hls(
        ["-i", str(source)],
        rungs,
        has_audio=True,
        frame_rate=rate,
        max_s=info.duration_ms / 1000 + 1,
    )
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run([tools.executable("ffmpeg"), *args], cwd=out, check=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    shutil.rmtree(out)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Run(cpu, wall)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds (default 5)")
    parser.add_argument("--seconds", type=float, default=10.0, help="source length (default 10)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-media-") as tmp:
        work = Path(tmp)
        source = make_source(work / "source.mp4", args.seconds)
        started = time.perf_counter()
        info = await probe(source)
        probe_ms = (time.perf_counter() - started) * 1000
        print(f"source: {info.width}x{info.height}, {info.duration_ms} ms, {info.video_codec}/"
              f"{info.audio_codec}; probe {probe_ms:.0f} ms wall")  # fmt: skip
        runs: dict[str, list[Run]] = {"toolkit": [], "bare": []}
        for i in range(args.rounds):
            order = ("toolkit", "bare") if i % 2 == 0 else ("bare", "toolkit")
            for side in order:
                run = (
                    await ours(source, info, work)
                    if side == "toolkit"
                    else bare(source, info, work)
                )
                runs[side].append(run)
                print(f"round {i + 1} {side:8} cpu {run.cpu_s:6.2f} s  wall {run.wall_s:6.2f} s")
    seconds = info.duration_ms / 1000
    print(f"\nHLS ladder ({len(plan_ladder(DEFAULT_LADDER, info.height or 0))} renditions), "
          f"median of {args.rounds} rounds, per output second:")  # fmt: skip
    medians = {}
    for side, done in runs.items():
        cpu = statistics.median(r.cpu_s for r in done) / seconds
        wall = statistics.median(r.wall_s for r in done) / seconds
        medians[side] = cpu
        print(f"  {side:8} {cpu:.3f} CPU-s/s   {wall:.3f} wall-s/s")
    overhead = (medians["toolkit"] - medians["bare"]) / medians["bare"] * 100
    print(f"  overhead {overhead:+.1f} % CPU (aim: <= 5 %)")


if __name__ == "__main__":
    asyncio.run(main())
