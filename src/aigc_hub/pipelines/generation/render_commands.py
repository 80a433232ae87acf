"""The FFmpeg argument list of each render-graph node (:mod:`.render_graph`), and the text
picture, which Pillow draws.

Every node runs in a directory of its own: a source asset is staged there by the media
toolkit (``input.<kind>``, behind its whitelists), the outputs of the node's input nodes are
linked there as ``in<N>.<ext>``, and the node writes ``out.<ext>``. Intermediates are
video-only H.264 at the output's size and frame rate (frame-exact: every node ends with
``-frames:v``), sound is 48 kHz stereo PCM in WAV; only ``encode`` makes the export's MP4.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from aigc_hub.media import inputs
from aigc_hub.media.sandbox import MediaLimits

from .render_graph import JSON, RenderGraph, RenderNode

#: Quality of intermediates: near-transparent, fast to write; the export's own quality is
#: the profile's (``encode``). ``ultrafast`` over ``veryfast`` took a 60 s 720p export from
#: 2.2x to 1.4x the single ffmpeg command's wall time (bench/render.py), for bigger files.
INTERMEDIATE_CRF: Final = "12"
INTERMEDIATE_PRESET: Final = "ultrafast"
SAMPLE_RATE: Final = "48000"
#: How an intermediate is opened: our own files, but still file protocol and one demuxer.
_DEMUXER_OF_EXT: Final = {"mp4": "mov", "wav": "wav", "png": "png_pipe"}


def frames(ms: int, frame_rate: int) -> int:
    """How many frames ``ms`` milliseconds last at ``frame_rate`` (rounded to the nearest)."""
    return max(1, round(ms * frame_rate / 1000))


def seconds(ms: int | float) -> str:
    """Milliseconds as FFmpeg's seconds, exact to the millisecond."""
    return f"{ms / 1000:.3f}"


def input_name(index: int, node: RenderNode) -> str:
    """The name input node ``node``'s output is linked under for the node reading it."""
    return f"in{index}.{node.output_name.rsplit('.', 1)[1]}"


def output_name(node: RenderNode) -> str:
    """The file a node writes in its directory."""
    return f"out.{node.output_name.rsplit('.', 1)[1]}"


def _open(name: str) -> list[str]:
    demuxer = _DEMUXER_OF_EXT[name.rsplit(".", 1)[1]]
    return ["-protocol_whitelist", "file", "-f", demuxer, "-i", f"file:{name}"]


def _video_out(graph: RenderGraph, threads: int, count: int) -> list[str]:
    return [
        "-an",
        "-c:v",
        "libx264",
        "-preset",
        INTERMEDIATE_PRESET,
        "-crf",
        INTERMEDIATE_CRF,
        "-pix_fmt",
        "yuv420p",
        "-threads",
        str(threads),
        "-r",
        str(graph.frame_rate),
        "-frames:v",
        str(count),
    ]


def _int(params: dict[str, JSON], name: str) -> int:
    value = params[name]
    assert isinstance(value, int), name
    return value


def node_args(
    graph: RenderGraph,
    node: RenderNode,
    *,
    inputs_of: Sequence[RenderNode],
    source: inputs.StagedInput | None,
    limits: MediaLimits,
    threads: int,
) -> list[str]:
    """The ffmpeg arguments that make ``node``'s ``out.<ext>`` in its directory (every
    kind but ``text``, which :func:`draw_text` makes)."""
    p = node.params
    rate, w, h = graph.frame_rate, graph.width, graph.height
    total = frames(graph.duration_ms, rate)
    head = ["-nostdin", "-hide_banner", "-loglevel", "error", "-y"]
    opened = [a for i, n in enumerate(inputs_of) for a in _open(input_name(i, n))]
    out = output_name(node)
    if node.kind == "clip":
        assert source is not None
        length = _int(p, "out_ms") - _int(p, "in_ms")
        shape = (
            f"fps={rate},scale={w}:{h}:force_original_aspect_ratio=decrease,"
            f"pad={w}:{h}:(ow-iw)/2:(oh-ih)/2:color=black,setsar=1,format=yuv420p,"
            # the source may end a frame early: hold its last frame rather than come short
            f"tpad=stop_mode=clone:stop_duration=1"
        )
        return [
            *head,
            *inputs.input_args(source, limits, seek_s=_int(p, "in_ms") / 1000),
            "-map",
            "0:v:0",
            "-vf",
            shape,
            *_video_out(graph, threads, frames(length, rate)),
            out,
        ]
    if node.kind == "sequence":
        graph_filter = _sequence_filter(graph, node)
        filtered = ["-filter_complex", graph_filter, "-map", "[v]"]
        return [*head, *opened, *filtered, *_video_out(graph, threads, total), out]
    if node.kind == "compose":
        graph_filter = _compose_filter(graph, node)
        filtered = ["-filter_complex", graph_filter, "-map", "[v]"]
        return [*head, *opened, *filtered, *_video_out(graph, threads, total), out]
    if node.kind == "audio":
        assert source is not None
        return [
            *head,
            *inputs.input_args(source, limits),
            "-map",
            "0:a:0",
            "-af",
            _audio_filter(node, graph.duration_ms),
            "-c:a",
            "pcm_s16le",
            "-ar",
            SAMPLE_RATE,
            "-ac",
            "2",
            out,
        ]
    if node.kind == "mix":
        end = seconds(graph.duration_ms)
        if not inputs_of:
            silence = f"anullsrc=r={SAMPLE_RATE}:cl=stereo,atrim=end={end}"
            return [*head, "-f", "lavfi", "-i", silence, "-c:a", "pcm_s16le", out]
        labels = "".join(f"[{i}:a]" for i in range(len(inputs_of)))
        mixed = (
            f"{labels}amix=inputs={len(inputs_of)}:duration=longest:normalize=0,"
            f"apad,atrim=end={end}[a]"
        )
        return [*head, *opened, "-filter_complex", mixed, "-map", "[a]", "-c:a", "pcm_s16le", out]
    if node.kind == "encode":
        return [
            *head,
            *opened,
            "-map",
            "0:v:0",
            "-map",
            "1:a:0",
            "-c:v",
            "libx264",
            "-preset",
            str(p["preset"]),
            "-crf",
            str(p["crf"]),
            "-pix_fmt",
            "yuv420p",
            "-r",
            str(rate),
            "-frames:v",
            str(total),
            "-threads",
            str(threads),
            "-c:a",
            "aac",
            "-b:a",
            f"{p['audio_kbps']}k",
            "-t",
            seconds(graph.duration_ms),
            "-movflags",
            "+faststart",
            out,
        ]
    raise ValueError(f"{node.id}: no command for a {node.kind} node")


def _sequence_filter(graph: RenderGraph, node: RenderNode) -> str:
    """The track's clips on the timeline: black before the first and in gaps, a crossfade
    where a clip has one (``xfade`` offsets count from the timeline's start), black to the
    end; padded one second past it, ``-frames:v`` cuts it exact."""
    rate, w, h = graph.frame_rate, graph.width, graph.height
    norm = f"settb=AVTB,fps={rate},format=yuv420p,setsar=1"
    placements = node.params["clips"]
    assert isinstance(placements, list)
    if not placements:
        return f"color=c=black:s={w}x{h}:r={rate}:d={seconds(graph.duration_ms + 1000)},{norm}[v]"
    parts: list[str] = []
    current, end_ms = "s0", 0
    for i, placed in enumerate(placements):
        assert isinstance(placed, dict)
        at, length = _int(placed, "at_ms"), _int(placed, "length_ms")
        fade = _int(placed, "crossfade_ms")
        if i == 0:
            lead = f",tpad=start_mode=add:start_duration={seconds(at)}:color=black" if at else ""
            parts.append(f"[0:v]{norm}{lead}[s0]")
        elif fade:
            parts.append(f"[{i}:v]{norm}[c{i}]")
            parts.append(
                f"[{current}][c{i}]xfade=transition=fade:duration={seconds(fade)}"
                f":offset={seconds(at)}[s{i}]"
            )
            current = f"s{i}"
        else:
            gap = at - end_ms
            padded = current
            if gap > 0:
                padded = f"g{i}"
                parts.append(
                    f"[{current}]tpad=stop_mode=add:stop_duration={seconds(gap)}:color=black"
                    f"[{padded}]"
                )
            parts.append(f"[{i}:v]{norm}[c{i}]")
            # concat's output has its own time base; xfade after it needs both of its inputs'
            # to match, so every joint is brought back to the common one
            parts.append(f"[{padded}][c{i}]concat=n=2:v=1:a=0,{norm}[s{i}]")
            current = f"s{i}"
        end_ms = at + length
    tail = graph.duration_ms - end_ms + 1000
    parts.append(f"[{current}]tpad=stop_mode=add:stop_duration={seconds(tail)}:color=black[v]")
    return ";".join(parts)


def _enable(spans: list[JSON]) -> str:
    terms = []
    for span in spans:
        assert isinstance(span, list)
        start, end = span
        assert isinstance(start, int) and isinstance(end, int)
        terms.append(f"between(t,{seconds(start)},{seconds(end - 1)})")
    return "+".join(terms) or "0"


def _compose_filter(graph: RenderGraph, node: RenderNode) -> str:
    """Track 1 as the ground, each later track drawn over it while one of its clips is on,
    each text picture over the result during its span."""
    track_spans, text_spans = node.params["track_spans"], node.params["text_spans"]
    assert isinstance(track_spans, list) and isinstance(text_spans, list)
    parts, current = [], "0:v"
    layers = [*track_spans, *text_spans]
    for i, spans in enumerate(layers, start=1):
        assert isinstance(spans, list)
        # a text is one span; a track's spans are its clips
        on = _enable([spans] if i > len(track_spans) else spans)
        parts.append(f"[{current}][{i}:v]overlay=0:0:enable='{on}':eof_action=repeat[l{i}]")
        current = f"l{i}"
    parts.append(f"[{current}]format=yuv420p[v]")
    return ";".join(parts)


def _audio_filter(node: RenderNode, duration_ms: int) -> str:
    p = node.params
    start, stop = _int(p, "in_ms"), _int(p, "out_ms")
    length = stop - start
    fade_in, fade_out = _int(p, "fade_in_ms"), _int(p, "fade_out_ms")
    steps = [
        f"atrim=start={seconds(start)}:end={seconds(stop)}",
        "asetpts=PTS-STARTPTS",
        f"aresample={SAMPLE_RATE}",
        "aformat=sample_fmts=fltp:channel_layouts=stereo",
        f"volume={p['gain_db']}dB",
    ]
    if fade_in:
        steps.append(f"afade=t=in:st=0:d={seconds(fade_in)}")
    if fade_out:
        steps.append(f"afade=t=out:st={seconds(length - fade_out)}:d={seconds(fade_out)}")
    at = _int(p, "at_ms")
    if at:
        steps.append(f"adelay={at}:all=1")
    steps += ["apad", f"atrim=end={seconds(duration_ms)}"]
    return ",".join(steps)


#: Where the text fonts are looked for: the DejaVu family most systems have; where none is
#: found Pillow's own embedded font draws every family.
FONT_DIRS: Final = ("/usr/share/fonts/truetype/dejavu", "/usr/share/fonts/dejavu")
FONT_FILES: Final = {
    "sans": "DejaVuSans.ttf",
    "serif": "DejaVuSerif.ttf",
    "mono": "DejaVuSansMono.ttf",
}


def font_path(family: str) -> str | None:
    """The font file used for ``family``, None for Pillow's embedded font."""
    for directory in (os.environ.get("AIGC_HUB_GEN_RENDER_FONT_DIR"), *FONT_DIRS):
        if directory:
            candidate = Path(directory) / FONT_FILES[family]
            if candidate.is_file():
                return str(candidate)
    return None


def draw_text(node: RenderNode, dest: Path) -> None:
    """A frame-sized transparent PNG with the text centred at (x, y) (blocking: a thread).

    Pillow, not FFmpeg's ``drawtext``: it needs no fontconfig and has a font of its own,
    so a text renders on a machine with no fonts installed."""
    from PIL import Image, ImageDraw, ImageFont  # the render worker only

    p = node.params
    width, height, size = _int(p, "width"), _int(p, "height"), _int(p, "size_px")
    family = str(p["font"])
    path = font_path(family)
    font = ImageFont.truetype(path, size) if path else ImageFont.load_default(size)
    picture = Image.new("RGBA", (width, height), (0, 0, 0, 0))
    x, y = p["x"], p["y"]
    assert isinstance(x, int | float) and isinstance(y, int | float)
    ImageDraw.Draw(picture).text(
        (x * width, y * height), str(p["text"]), font=font, fill=str(p["color"]), anchor="mm"
    )
    picture.save(dest, format="PNG")
