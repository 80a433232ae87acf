"""Reading an MPEG-DASH manifest (MPD): the files it names, relative to it.

What a player fetches of a static MPD using SegmentTemplate: each representation's
initialization segment and its media segments, numbered from ``startNumber`` (or timed) by
the SegmentTimeline. Used to check that a transcode's output is complete (every file the
manifest names exists) and to copy a run's files. Only what FFmpeg's DASH muxer writes is
read: ``$RepresentationID$``, ``$Number$`` / ``$Number%0Nd$``, ``$Time$``, ``$Bandwidth$``;
a manifest outside that (SegmentList, BaseURL per representation) raises ValueError.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

_NS = {"mpd": "urn:mpeg:dash:schema:mpd:2011"}
_FIELD = re.compile(r"\$(RepresentationID|Number|Time|Bandwidth)(%0(\d+)d)?\$")


def _fill(template: str, values: dict[str, str | int]) -> str:
    def one(match: re.Match[str]) -> str:
        value = values[match.group(1)]
        width = match.group(3)
        return f"{int(value):0{int(width)}d}" if width else str(value)

    return _FIELD.sub(one, template.replace("$$", "$"))


def _times(timeline: ET.Element) -> list[int]:
    """The start time of every segment a SegmentTimeline lists."""
    starts: list[int] = []
    t = 0
    for s in timeline.findall("mpd:S", _NS):
        t = int(s.get("t", t))
        d, r = int(s.get("d", "0")), int(s.get("r", "0"))
        if d <= 0 or r < 0:
            raise ValueError("a SegmentTimeline entry needs d > 0 and r >= 0 (no open repeats)")
        for _ in range(r + 1):
            starts.append(t)
            t += d
    return starts


def manifest_files(text: str) -> list[str]:
    """The relative names of every initialization and media segment the MPD ``text`` names,
    in manifest order. ValueError for XML or a layout this reader does not know."""
    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        raise ValueError(f"not an MPD: {exc}") from None
    if root.tag != "{urn:mpeg:dash:schema:mpd:2011}MPD":
        raise ValueError(f"not an MPD: root element {root.tag}")
    names: list[str] = []
    for adaptation in root.iterfind("mpd:Period/mpd:AdaptationSet", _NS):
        shared = adaptation.find("mpd:SegmentTemplate", _NS)
        for rep in adaptation.findall("mpd:Representation", _NS):
            template = rep.find("mpd:SegmentTemplate", _NS)
            template = template if template is not None else shared
            if template is None:
                raise ValueError(f"representation {rep.get('id')}: no SegmentTemplate")
            values: dict[str, str | int] = {
                "RepresentationID": rep.get("id", ""),
                "Bandwidth": rep.get("bandwidth", "0"),
            }
            init = template.get("initialization")
            if init:
                names.append(_fill(init, values))
            media = template.get("media")
            timeline = template.find("mpd:SegmentTimeline", _NS)
            if media is None or timeline is None:
                raise ValueError(f"representation {rep.get('id')}: no media template timeline")
            number = int(template.get("startNumber", "1"))
            for i, start in enumerate(_times(timeline)):
                names.append(_fill(media, {**values, "Number": number + i, "Time": start}))
    return names
