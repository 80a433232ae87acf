"""Checks of a finished output that need no model: black, frozen or wrong-length video.

They run on a few 8-bit luma frames sampled across the clip (``media.frames.sample_frames``)
and on its measured duration. Each check that hits rejects the output with its rule id; its
evidence is the sample timestamps and numbers that made the call, never the pixels. Pure
functions, no I/O: cheap enough to run on the event loop (see :data:`MAX_COMPARED`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from aigc_hub.core.errors import InvalidInput

if TYPE_CHECKING:
    from aigc_hub.media.frames import GrayFrame

BLACK: Final = "frames.black"
FROZEN: Final = "frames.frozen"
WRONG_LENGTH: Final = "frames.wrong_length"
REASONS: Final = {
    BLACK: "the output is black",
    FROZEN: "the output does not move",
    WRONG_LENGTH: "the output's duration is not the one requested",
}
#: At most this many pixels of a frame are read (an even stride): a bound on the cost of a
#: large frame, far more than a black or frozen judgement needs.
MAX_COMPARED: Final = 4096


@dataclass(frozen=True)
class FrameThresholds:
    """When each check hits; the values come from ``ModerationSettings``."""

    black_luma_max: float = 20.0
    black_ratio: float = 0.8
    frozen_diff_max: float = 1.0
    duration_tolerance_ms: int = 1000
    duration_tolerance_ratio: float = 0.1


@dataclass(frozen=True)
class FrameHit:
    """A check that hit, and its evidence (timestamps and measures)."""

    rule_id: str
    evidence: str


def check(
    frames: Sequence[GrayFrame],
    *,
    duration_ms: int,
    expected_duration_ms: int | None,
    thresholds: FrameThresholds = FrameThresholds(),
) -> list[FrameHit]:
    """Every check that hits, in the order black, frozen, wrong length.

    Black: at least ``black_ratio`` of the frames have a mean luma under ``black_luma_max``.
    Frozen: two or more frames, and none differs from the first by more than
    ``frozen_diff_max`` (mean absolute luma difference), i.e. nothing moves across the clip.
    Wrong length: an expected duration is given and the measured one is further from it than
    ``max(duration_tolerance_ms, duration_tolerance_ratio * expected)``.
    Raises :class:`InvalidInput` for a frame whose pixels do not match its size.
    """
    ordered = sorted(frames, key=lambda f: f.at_ms)
    samples = [_sample(f) for f in ordered]
    hits: list[FrameHit] = []
    if ordered:
        dark = [
            f.at_ms
            for f, s in zip(ordered, samples, strict=True)
            if _mean(s) < thresholds.black_luma_max
        ]
        if len(dark) >= thresholds.black_ratio * len(ordered):
            hits.append(FrameHit(BLACK, "black@" + ",".join(map(str, dark))))
    if len(ordered) >= 2 and _same_shape(ordered):
        # Against the first sample, not the previous one: slow motion (a drifting gradient,
        # a slow pan) changes little between neighbours but a lot across the clip.
        diffs = [_mean_abs_diff(samples[0], later) for later in samples[1:]]
        if max(diffs) <= thresholds.frozen_diff_max:
            span = f"{ordered[0].at_ms}-{ordered[-1].at_ms}"
            hits.append(FrameHit(FROZEN, f"frozen@{span},maxdiff={max(diffs):.2f}"))
    if expected_duration_ms is not None:
        allowed = max(
            thresholds.duration_tolerance_ms,
            thresholds.duration_tolerance_ratio * expected_duration_ms,
        )
        if abs(duration_ms - expected_duration_ms) > allowed:
            hits.append(
                FrameHit(
                    WRONG_LENGTH, f"duration={duration_ms}ms,expected={expected_duration_ms}ms"
                )
            )
    return hits


def _sample(frame: GrayFrame) -> bytes:
    if frame.width <= 0 or frame.height <= 0 or len(frame.pixels) != frame.width * frame.height:
        raise InvalidInput(
            "frames",
            f"frame at {frame.at_ms} ms: {len(frame.pixels)} bytes for "
            f"{frame.width}x{frame.height} luma pixels",
        )
    step = max(1, len(frame.pixels) // MAX_COMPARED)
    return frame.pixels[::step]


def _mean(sample: bytes) -> float:
    return sum(sample) / len(sample)


def _same_shape(frames: Sequence[GrayFrame]) -> bool:
    return len({(f.width, f.height) for f in frames}) == 1


def _mean_abs_diff(a: bytes, b: bytes) -> float:
    return sum(abs(x - y) for x, y in zip(a, b, strict=True)) / len(a)
