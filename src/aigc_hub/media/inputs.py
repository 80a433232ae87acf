"""How a source file is handed to FFmpeg: under a fixed name, behind whitelists.

The file is first opened by us, checked to be a regular, non-empty file within the byte
limit, and sniffed (:mod:`.sniff`); then it is hard-linked (or, across filesystems, copied)
into the job's scratch directory as ``input.<kind>``. The tool only ever sees
``file:input.<kind>``: no name a tenant chose can be read as an option (``-i``), a protocol
(``http:``, ``concat:``), or a shell word, and the ``file:`` prefix pins the protocol.

Every input then gets, before ``-i``:

- ``-protocol_whitelist file``: no network, pipe, ``concat:`` or ``subfile:`` protocol, even
  if a demuxer asks for one;
- ``-f <demuxer> -format_whitelist <demuxer>``: the demuxer the magic number chose and no
  other (never ``hls``, ``concat``, ``dash``, ``image2``, ``svg``…, which follow references
  to other files or URLs); MP4/MOV external data references stay off (``-enable_drefs 0``);
- ``-codec_whitelist``: only the decoders of the codecs the hub accepts;
- ``-max_pixels`` and ``-max_streams``: a decoder refuses a picture larger than the limit
  while parsing its header, before allocating it (a PNG claiming 100000x100000 costs
  nothing), and a demuxer refuses to create streams past the limit.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Final

from aigc_hub.media import sniff as sniffing
from aigc_hub.media.sandbox import MediaLimits, MediaRefused

#: The libavformat demuxer forced for each sniffed kind.
DEMUXERS: Final[Mapping[str, str]] = MappingProxyType(
    {
        "mp4": "mov",
        "mov": "mov",
        "webm": "matroska",
        "mkv": "matroska",
        "png": "png_pipe",
        "jpeg": "jpeg_pipe",
        "gif": "gif",
        "webp": "webp_pipe",
        "wav": "wav",
        "mp3": "mp3",
        "ogg": "ogg",
    }
)
#: Kinds that are still images.
IMAGE_KINDS: Final = frozenset({"png", "jpeg", "gif", "webp"})
#: The decoders an input may open (libavcodec decoder names, not codec names).
DECODERS: Final = (
    "h264",
    "hevc",
    "vp8",
    "vp9",
    "av1",
    "libdav1d",
    "mpeg4",
    "mjpeg",
    "png",
    "gif",
    "webp",
    "aac",
    "mp3float",
    "mp3",
    "opus",
    "vorbis",
    "flac",
    "alac",
    "pcm_s16le",
    "pcm_s16be",
    "pcm_s24le",
    "pcm_s32le",
    "pcm_f32le",
    "pcm_u8",
    # text subtitles: MP4 and Matroska sources carry them; opening one must not fail a probe
    "mov_text",
    "subrip",
    "ass",
    "webvtt",
)


@dataclass(frozen=True)
class StagedInput:
    """A source linked into a job's scratch directory under a fixed name."""

    kind: str  # what sniff said: "mp4", "png", …
    demuxer: str
    name: str  # relative to the scratch directory: "input.mp4"
    size_bytes: int


def stage(source: Path, scratch: Path, limits: MediaLimits) -> StagedInput:
    """Check ``source`` and link it into ``scratch`` (blocking: call it in a thread).

    Refuses with MediaRefused: "unreadable" (cannot be opened), "not_a_file" (a FIFO,
    device or directory, which could block or never end), "empty", "too_large", "format"
    (the magic number is not one the hub accepts).
    """
    try:
        # Not even opened unless it is a regular file: opening a FIFO for reading is what
        # its writer waits for, and a device may never end.
        if not stat.S_ISREG(os.stat(source).st_mode):
            raise MediaRefused("not_a_file", "not a regular file")
        # O_NONBLOCK: should it be swapped for a FIFO since, the open still does not wait
        fd = os.open(source, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise MediaRefused("unreadable", f"cannot open the file: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise MediaRefused("not_a_file", "not a regular file")
        if st.st_size == 0:
            raise MediaRefused("empty", "the file is empty")
        if st.st_size > limits.max_bytes:
            raise MediaRefused(
                "too_large", f"{st.st_size} bytes is more than the limit of {limits.max_bytes}"
            )
        kind = sniffing.sniff(os.pread(fd, sniffing.SNIFF_BYTES, 0))
        if kind is None:
            raise MediaRefused("format", "not a media format the hub accepts (magic number)")
        name = f"input.{kind}"
        _link_or_copy(source, fd, st, scratch / name)
        return StagedInput(kind, DEMUXERS[kind], name, st.st_size)
    finally:
        os.close(fd)


def input_args(
    staged: StagedInput, limits: MediaLimits, *, seek_s: float | None = None
) -> list[str]:
    """The arguments that open ``staged`` as one input, ending with ``-i file:<name>``."""
    args = [
        "-protocol_whitelist",
        "file",
        "-format_whitelist",
        staged.demuxer,
        "-f",
        staged.demuxer,
        "-codec_whitelist",
        ",".join(DECODERS),
        "-max_pixels",
        str(limits.max_pixels),
        "-max_streams",
        str(limits.max_streams),
    ]
    if staged.demuxer == "mov":
        args += ["-enable_drefs", "0", "-use_absolute_path", "0"]
    if seek_s is not None:
        args += ["-ss", f"{seek_s:.3f}"]
    return [*args, "-i", f"file:{staged.name}"]


def _link_or_copy(source: Path, fd: int, st: os.stat_result, dest: Path) -> None:
    try:
        os.link(source, dest)
    except OSError as exc:
        if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP):
            raise MediaRefused("unreadable", f"cannot stage the file: {exc.strerror}") from None
    else:
        linked = os.stat(dest)
        if (linked.st_dev, linked.st_ino) == (st.st_dev, st.st_ino):
            return
        dest.unlink()  # the name was swapped between our open and the link: copy what we opened
    # Copy from the descriptor we checked, not from the name, which may point elsewhere now.
    with open(os.dup(fd), "rb") as src, open(dest, "xb") as out:
        shutil.copyfileobj(src, out, 1 << 20)
