"""The render graph an export compiles a timeline revision into (seed 004 §3.3.3 item 10,
§3.4's export chain, §3.8.1's render key).

A revision is compiled, with a render profile and the facts of the assets it references, into
a DAG of nodes, each one FFmpeg run (or one picture drawn):

* ``clip:<id>`` — decode a clip's source, trim it to its in/out points, scale and pad it to
  the output frame at the output frame rate (video only);
* ``sequence:<track>`` — a track's clips placed on the timeline: crossfades where a clip has
  one, black in the gaps, the output's whole duration;
* ``text:<id>`` — a text overlay drawn as a transparent frame-sized picture;
* ``compose`` — the tracks drawn over each other where their clips are, the texts burnt in
  during their spans;
* ``audio:<id>`` — an audio clip trimmed, its gain and fades applied, placed at its time;
* ``mix`` — the audio clips mixed over the output's duration (silence when there are none);
* ``encode`` — the picture and the mix encoded into the profile's MP4.

Each node's ``key`` hashes its kind, its parameters, the content (sha256) of the sources it
reads and its inputs' keys, with :data:`GRAPH_VERSION`: a node whose key an earlier export
already made is reused from the cache instead of run again, so changing one title re-runs
``text``, ``compose`` and ``encode`` only. Compilation is pure and deterministic: the same
revision, profile and sources give the same keys on every machine.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final, Literal

from aigc_hub.core import errors

from .timeline import AudioClip, Clip, TimelineV1

#: Bumped when a node's command changes what it makes: every cached node is then made anew.
GRAPH_VERSION: Final = "render-v2"

NodeKind = Literal["clip", "sequence", "text", "compose", "audio", "mix", "encode"]
JSON = str | int | float | bool | None | list["JSON"] | dict[str, "JSON"]


class InvalidRenderInput(errors.InvalidInput):
    """The revision cannot be rendered with these sources (answered as 422, element named)."""


@dataclass(frozen=True)
class RenderProfile:
    """What an export's file is: its picture height (width follows the timeline's aspect
    ratio), frame rate (None: the timeline's), and the encoder's quality settings."""

    name: str
    height: int | None  # None: the timeline's output size
    frame_rate: int | None
    crf: int
    preset: str
    audio_kbps: int

    def size(self, timeline: TimelineV1) -> tuple[int, int]:
        """The output's width and height (even numbers, as H.264's 4:2:0 needs)."""
        out = timeline.output
        if self.height is None:
            return out.width, out.height
        width = round(out.width * self.height / out.height / 2) * 2
        return max(2, width), self.height

    def rate(self, timeline: TimelineV1) -> int:
        """The output's frames per second."""
        return self.frame_rate or timeline.output.frame_rate


#: The render profiles an export may name.
RENDER_PROFILES: Final[Mapping[str, RenderProfile]] = {
    p.name: p
    for p in (
        RenderProfile("draft", 360, None, crf=30, preset="veryfast", audio_kbps=96),
        RenderProfile("hd", 720, None, crf=22, preset="medium", audio_kbps=160),
        RenderProfile("fullhd", 1080, None, crf=21, preset="medium", audio_kbps=192),
        RenderProfile("source", None, None, crf=20, preset="medium", audio_kbps=192),
    )
}


@dataclass(frozen=True)
class SourceFacts:
    """What the compiler needs of a referenced asset: its content hash and what it holds."""

    asset_id: str
    sha256: str
    duration_ms: int | None
    has_video: bool
    has_audio: bool


@dataclass(frozen=True)
class RenderNode:
    """One step of the graph: its id, what it does, what it reads, and its cache key."""

    id: str
    kind: NodeKind
    params: dict[str, JSON]
    inputs: tuple[str, ...] = ()  # ids of the nodes whose outputs it reads, in order
    source: str | None = None  # the asset it reads (clip and audio nodes)
    key: str = ""

    @property
    def output_name(self) -> str:
        """The file the node makes: a picture, a sound, or a video."""
        ext = {"text": "png", "audio": "wav", "mix": "wav"}.get(self.kind, "mp4")
        return f"{self.key}.{ext}"


@dataclass
class RenderGraph:
    """The nodes in an order where each comes after its inputs; ``encode`` is last."""

    profile: RenderProfile
    width: int
    height: int
    frame_rate: int
    duration_ms: int
    nodes: list[RenderNode] = field(default_factory=list)

    def node(self, node_id: str) -> RenderNode:
        """The node with this id (KeyError when there is none)."""
        for node in self.nodes:
            if node.id == node_id:
                return node
        raise KeyError(node_id)

    @property
    def output(self) -> RenderNode:
        """The node whose file is the export."""
        return self.nodes[-1]


def profile_named(name: str) -> RenderProfile:
    """The render profile ``name``; InvalidRenderInput naming the known ones otherwise."""
    try:
        return RENDER_PROFILES[name]
    except KeyError:
        known = ", ".join(RENDER_PROFILES)
        raise InvalidRenderInput(
            "profile", f"render profile {name!r} is not one of: {known}"
        ) from None


def compile_graph(
    timeline: TimelineV1, profile: RenderProfile, sources: Mapping[str, SourceFacts]
) -> RenderGraph:
    """The render graph of ``timeline`` for ``profile``; ``sources`` are the facts of every
    asset it references. InvalidRenderInput when a clip's source has no picture, an audio
    clip's has no sound, or a clip reads past its source's end."""
    width, height = profile.size(timeline)
    graph = RenderGraph(
        profile=profile,
        width=width,
        height=height,
        frame_rate=profile.rate(timeline),
        duration_ms=timeline.output.duration_ms,
    )
    frame = {"width": width, "height": height, "frame_rate": graph.frame_rate}
    duration = graph.duration_ms

    def add(node: RenderNode) -> str:
        source_hash = sources[node.source].sha256 if node.source else None
        input_keys = [graph.node(i).key for i in node.inputs]
        material = [GRAPH_VERSION, node.kind, node.params, source_hash, input_keys]
        digest = hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()
        graph.nodes.append(dataclasses.replace(node, key=digest))
        return node.id

    sequences: list[str] = []
    for track in timeline.tracks:
        clip_ids: list[str] = []
        for clip in track.clips:
            _check_source(clip.id, clip, sources, need="video")
            params: dict[str, JSON] = {"in_ms": clip.in_ms, "out_ms": clip.out_ms, **frame}
            clip_ids.append(add(RenderNode(f"clip:{clip.id}", "clip", params, (), clip.asset_id)))
        placement: list[JSON] = [
            {
                "at_ms": c.at_ms,
                "length_ms": c.length_ms,
                "crossfade_ms": c.transition_in.duration_ms if c.transition_in else 0,
            }
            for c in track.clips
        ]
        seq_params: dict[str, JSON] = {"clips": placement, "duration_ms": duration, **frame}
        node = RenderNode(f"sequence:{track.id}", "sequence", seq_params, tuple(clip_ids))
        sequences.append(add(node))

    texts: list[str] = []
    for text in timeline.texts:
        drawn: dict[str, JSON] = {
            "text": text.text,
            "font": text.font,
            "size_px": text.size_px,
            "color": text.color,
            "x": text.x,
            "y": text.y,
            "width": width,
            "height": height,
        }
        texts.append(add(RenderNode(f"text:{text.id}", "text", drawn)))

    spans: list[JSON] = [
        [[c.at_ms, c.end_ms] for c in track.clips] for track in timeline.tracks[1:]
    ]
    shown: list[JSON] = [[t.start_ms, t.end_ms] for t in timeline.texts]
    compose_params: dict[str, JSON] = {
        "track_spans": spans,
        "text_spans": shown,
        "duration_ms": duration,
        **frame,
    }
    compose = add(RenderNode("compose", "compose", compose_params, (*sequences, *texts)))

    sounds: list[str] = []
    for sound in timeline.audio:
        _check_source(sound.id, sound, sources, need="audio")
        audio_params: dict[str, JSON] = {
            "at_ms": sound.at_ms,
            "in_ms": sound.in_ms,
            "out_ms": sound.out_ms,
            "gain_db": sound.gain_db,
            "fade_in_ms": sound.fade_in_ms,
            "fade_out_ms": sound.fade_out_ms,
            "duration_ms": duration,
        }
        node = RenderNode(f"audio:{sound.id}", "audio", audio_params, (), sound.asset_id)
        sounds.append(add(node))
    mix = add(RenderNode("mix", "mix", {"duration_ms": duration}, tuple(sounds)))

    encode_params: dict[str, JSON] = {
        "profile": profile.name,
        "crf": profile.crf,
        "preset": profile.preset,
        "audio_kbps": profile.audio_kbps,
        "duration_ms": duration,
        **frame,
    }
    add(RenderNode("encode", "encode", encode_params, (compose, mix)))
    return graph


def _check_source(
    element: str,
    span: Clip | AudioClip,
    sources: Mapping[str, SourceFacts],
    *,
    need: Literal["video", "audio"],
) -> None:
    asset_id, out_ms = span.asset_id, span.out_ms
    facts = sources.get(asset_id)
    if facts is None:
        raise InvalidRenderInput(
            "timeline", f"{element}: asset {asset_id} is not a READY asset of yours"
        )
    if need == "video" and not facts.has_video:
        raise InvalidRenderInput("timeline", f"{element}: asset {asset_id} has no moving picture")
    if need == "audio" and not facts.has_audio:
        raise InvalidRenderInput("timeline", f"{element}: asset {asset_id} has no sound")
    if facts.duration_ms is not None and out_ms > facts.duration_ms:
        raise InvalidRenderInput(
            "timeline",
            f"{element}: out_ms {out_ms} is past the end of asset {asset_id} "
            f"({facts.duration_ms} ms)",
        )
