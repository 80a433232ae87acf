"""The timeline document a project revision holds (seed 004 §3.3.3 item 10, §3.4's export
chain): what the browser edits non-destructively and what an export renders, version 1.

A timeline is data only: clips *reference* the tenant's READY assets with in/out points, so
editing never touches a generated asset. Times are integer milliseconds on the timeline
(``at_ms``) or in the source (``in_ms``/``out_ms``). The model is the JSON schema: FastAPI
publishes it in the OpenAPI document (``TimelineV1``), and a new incompatible shape gets a
new ``schema_version`` beside this one, never a change to it.

Rules beyond the fields' own bounds (checked here, answered as 422 with the element named):

* ids are unique in the document (the render graph keys nodes by them);
* a video track's clips are in timeline order and do not overlap, except that a clip with
  a ``crossfade`` starts exactly its duration before the previous clip ends (and the
  crossfade is no longer than either clip);
* every clip, text and audio clip ends within ``output.duration_ms``; fades fit their clip.
"""

from __future__ import annotations

from typing import Final, Literal, Self

import pydantic

#: Longest timeline (4 h) and longest element list, so a document stays a small JSON.
MAX_DURATION_MS: Final = 4 * 3600 * 1000
_ID = r"^[A-Za-z0-9_-]{1,40}$"
_ASSET_ID = r"^[0-9a-f-]{36}$"


class _Strict(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)


class Output(_Strict):
    """The rendered file's frame: size, frame rate, duration."""

    width: int = pydantic.Field(ge=16, le=7680, multiple_of=2)
    height: int = pydantic.Field(ge=16, le=4320, multiple_of=2)
    frame_rate: int = pydantic.Field(ge=1, le=120, description="frames per second")
    duration_ms: int = pydantic.Field(ge=1, le=MAX_DURATION_MS)


class Transition(_Strict):
    """How a clip enters over the end of the previous one."""

    kind: Literal["crossfade"] = "crossfade"
    duration_ms: int = pydantic.Field(ge=1, le=10_000)


class _Span(_Strict):
    """A stretch of a source asset placed on the timeline."""

    id: str = pydantic.Field(pattern=_ID)
    asset_id: str = pydantic.Field(pattern=_ASSET_ID, description="a READY asset of yours")
    at_ms: int = pydantic.Field(ge=0, le=MAX_DURATION_MS, description="start on the timeline")
    in_ms: int = pydantic.Field(ge=0, description="start in the source")
    out_ms: int = pydantic.Field(gt=0, description="end in the source (exclusive)")

    @pydantic.model_validator(mode="after")
    def _in_before_out(self) -> Self:
        if self.out_ms <= self.in_ms:
            raise ValueError(f"{self.id}: out_ms must be after in_ms")
        return self

    @property
    def length_ms(self) -> int:
        return self.out_ms - self.in_ms

    @property
    def end_ms(self) -> int:
        return self.at_ms + self.length_ms


class Clip(_Span):
    """A video clip; ``transition_in`` blends it over the previous clip's end."""

    transition_in: Transition | None = None


class VideoTrack(_Strict):
    """Clips one after another; later tracks are drawn over earlier ones."""

    id: str = pydantic.Field(pattern=_ID)
    clips: list[Clip] = pydantic.Field(default_factory=list, max_length=500)

    @pydantic.model_validator(mode="after")
    def _in_order(self) -> Self:
        previous: Clip | None = None
        for clip in self.clips:
            fade = clip.transition_in
            if previous is None:
                if fade is not None:
                    raise ValueError(f"{clip.id}: the first clip of a track has no transition")
            elif fade is None:
                if clip.at_ms < previous.end_ms:
                    raise ValueError(f"{clip.id}: overlaps {previous.id} without a transition")
            else:
                if clip.at_ms != previous.end_ms - fade.duration_ms:
                    raise ValueError(
                        f"{clip.id}: a crossfade of {fade.duration_ms} ms starts at "
                        f"{previous.end_ms - fade.duration_ms} ms, {fade.duration_ms} ms "
                        f"before {previous.id} ends"
                    )
                if fade.duration_ms > min(clip.length_ms, previous.length_ms):
                    raise ValueError(f"{clip.id}: the crossfade is longer than a clip it joins")
            previous = clip
        return self


class TextOverlay(_Strict):
    """Text burnt over the picture from ``start_ms`` to ``end_ms``; ``x``/``y`` place its
    centre as fractions of the frame."""

    id: str = pydantic.Field(pattern=_ID)
    text: str = pydantic.Field(min_length=1, max_length=200)
    font: Literal["sans", "serif", "mono"] = "sans"
    size_px: int = pydantic.Field(48, ge=8, le=400)
    color: str = pydantic.Field("#ffffff", pattern=r"^#[0-9a-fA-F]{6}$")
    x: float = pydantic.Field(0.5, ge=0, le=1)
    y: float = pydantic.Field(0.5, ge=0, le=1)
    start_ms: int = pydantic.Field(ge=0, le=MAX_DURATION_MS)
    end_ms: int = pydantic.Field(gt=0, le=MAX_DURATION_MS)

    @pydantic.model_validator(mode="after")
    def _start_before_end(self) -> Self:
        if self.end_ms <= self.start_ms:
            raise ValueError(f"{self.id}: end_ms must be after start_ms")
        return self


class AudioClip(_Span):
    """Sound mixed under the picture, with its gain and fades."""

    gain_db: float = pydantic.Field(0.0, ge=-60, le=12)
    fade_in_ms: int = pydantic.Field(0, ge=0)
    fade_out_ms: int = pydantic.Field(0, ge=0)

    @pydantic.model_validator(mode="after")
    def _fades_fit(self) -> Self:
        if self.fade_in_ms + self.fade_out_ms > self.length_ms:
            raise ValueError(f"{self.id}: its fades are longer than the clip")
        return self


class TimelineV1(_Strict):
    """A project's timeline, version 1."""

    model_config = pydantic.ConfigDict(
        extra="forbid",
        frozen=True,
        json_schema_extra={
            "examples": [
                {
                    "schema_version": 1,
                    "output": {"width": 1280, "height": 720, "frame_rate": 25, "duration_ms": 9000},
                    "tracks": [
                        {
                            "id": "v1",
                            "clips": [
                                {
                                    "id": "c1",
                                    "asset_id": "0190f5a2-7c1e-7bb4-9b1e-2d3c4b5a6f70",
                                    "at_ms": 0,
                                    "in_ms": 0,
                                    "out_ms": 5000,
                                },
                                {
                                    "id": "c2",
                                    "asset_id": "0190f5a2-7c1e-7bb4-9b1e-2d3c4b5a6f71",
                                    "at_ms": 4000,
                                    "in_ms": 1000,
                                    "out_ms": 6000,
                                    "transition_in": {"kind": "crossfade", "duration_ms": 1000},
                                },
                            ],
                        }
                    ],
                    "texts": [{"id": "title", "text": "Holiday", "start_ms": 0, "end_ms": 3000}],
                    "audio": [],
                }
            ]
        },
    )

    schema_version: Literal[1] = 1
    output: Output
    tracks: list[VideoTrack] = pydantic.Field(min_length=1, max_length=8)
    texts: list[TextOverlay] = pydantic.Field(default_factory=list, max_length=100)
    audio: list[AudioClip] = pydantic.Field(default_factory=list, max_length=50)

    @pydantic.model_validator(mode="after")
    def _fits(self) -> Self:
        ids = [t.id for t in self.tracks]
        ids += [c.id for t in self.tracks for c in t.clips]
        ids += [t.id for t in self.texts] + [a.id for a in self.audio]
        twice = sorted({i for i in ids if ids.count(i) > 1})
        if twice:
            raise ValueError(f"ids must be unique in the timeline: {', '.join(twice)}")
        end = self.output.duration_ms
        late = [c.id for t in self.tracks for c in t.clips if c.end_ms > end]
        late += [t.id for t in self.texts if t.end_ms > end]
        late += [a.id for a in self.audio if a.end_ms > end]
        if late:
            raise ValueError(f"{', '.join(late)} end after output.duration_ms ({end} ms)")
        return self

    def asset_ids(self) -> list[str]:
        """Every asset the timeline references, in first-use order, once each."""
        seen = [c.asset_id for t in self.tracks for c in t.clips] + [a.asset_id for a in self.audio]
        return list(dict.fromkeys(seen))
