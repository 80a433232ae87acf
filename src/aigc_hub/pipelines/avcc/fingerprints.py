"""A work's fingerprint, what avcc's review compares to find a near-duplicate of a coded work.

* **image** — one :class:`PerceptualHash` (a 64-bit pHash and a 64-bit dHash, by
  ``imagehash``) of the decoded picture;
* **video** — one such hash per frame sampled across the clip by the media toolkit's
  sandboxed FFmpeg (:func:`aigc_hub.media.frames.sample_frames`), in time order;
* **text** — a 384-d L2-normalised all-MiniLM-L6-v2 embedding (the ``ml`` extra), the mean of
  the embeddings of overlapping token windows that cover the whole text.

Why pHash *and* dHash: on the test set's pictures (``tests/integration/
test_avcc_fingerprints.py``) pHash alone let a 3 % crop differ by up to 14 bits while two
unrelated pictures came as close as 12; over both hashes (128 bits) copies stayed ≤ 21 and
unrelated pictures ≥ 27, a gap the threshold sits in.

CPU work is synchronous (:func:`image_fingerprint`, :func:`frames_fingerprint`,
:meth:`TextEmbedder.fingerprint`): callers run it in a thread. Only :func:`video_fingerprint`
is async, as the toolkit's sampling is; it hashes the frames in a thread itself.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import enum
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final, NamedTuple

import imagehash
import numpy as np
import numpy.typing as npt
import orjson
from PIL import Image, ImageOps

from aigc_hub.core.errors import ConfigurationError, InvalidInput
from aigc_hub.media import probe, sandbox
from aigc_hub.media.frames import GrayFrame, sample_frames
from aigc_hub.media.sandbox import MediaLimits
from aigc_hub.moderation import semantic

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer
    from transformers import PreTrainedTokenizerBase

#: The hashes' name; fingerprints compare only with those of the same algorithm.
HASH_ALGORITHM: Final = "phash64+dhash64"
#: Decoders an image may open in process: the still formats the hub accepts (media.sniff).
IMAGE_FORMATS: Final = ("JPEG", "PNG", "WEBP", "GIF")
#: Frames sampled per clip, and their width: measured, 16 frames keep a clip trimmed by a
#: quarter within 1 bit of its original, 8 within 4; 128 px is 4x pHash's 32 px input.
VIDEO_FRAMES: Final = 16
FRAME_WIDTH: Final = 128
#: The most frames a video fingerprint may hold (a stored one is checked against it).
MAX_FRAMES: Final = 64
#: A frame whose luma varies less than this (standard deviation) is a fade or a black
#: slate: its hashes are rounding noise that matches every other flat frame, so it is left
#: out unless the whole clip is flat.
FLAT_LUMA_STD: Final = 2.0
EMBEDDING_DIM: Final = 384


class Kind(enum.StrEnum):
    """What a fingerprint was taken of; only fingerprints of one kind compare."""

    IMAGE = "image"
    VIDEO = "video"
    TEXT = "text"


class PerceptualHash(NamedTuple):
    """A picture's two 64-bit hashes, as unsigned ints."""

    phash: int
    dhash: int


@dataclass(frozen=True)
class Fingerprint:
    """A valid fingerprint (checked on construction): hashes for image and video, a vector
    for text. ``vector`` is little-endian float32, :data:`EMBEDDING_DIM` of them."""

    kind: Kind
    algorithm: str
    hashes: tuple[PerceptualHash, ...] = ()
    vector: bytes = b""

    def __post_init__(self) -> None:
        if self.kind is Kind.TEXT:
            if self.hashes or len(self.vector) != EMBEDDING_DIM * 4:
                raise InvalidInput("fingerprint", f"a text fingerprint is {EMBEDDING_DIM} floats")
        else:
            most = 1 if self.kind is Kind.IMAGE else MAX_FRAMES
            if self.vector or not 1 <= len(self.hashes) <= most:
                raise InvalidInput("fingerprint", f"an {self.kind} fingerprint is 1-{most} hashes")
            if any(not 0 <= h < 1 << 64 for pair in self.hashes for h in pair):
                raise InvalidInput("fingerprint", "a hash is not a 64-bit unsigned int")

    def embedding(self) -> npt.NDArray[np.float32]:
        """The text vector as a numpy array (a read-only view of :attr:`vector`)."""
        return np.frombuffer(self.vector, dtype="<f4").astype(np.float32, copy=False)

    def to_json(self) -> str:
        """The stored form: hashes as 16 hex digits (64-bit ints lose precision in JSON
        readers that parse numbers as doubles), the vector as base64."""
        return orjson.dumps(
            {
                "kind": self.kind.value,
                "algorithm": self.algorithm,
                "hashes": [[f"{h.phash:016x}", f"{h.dhash:016x}"] for h in self.hashes],
                "vector": base64.b64encode(self.vector).decode(),
            }
        ).decode()

    @classmethod
    def from_json(cls, text: str | bytes) -> Fingerprint:
        """The fingerprint :meth:`to_json` wrote; InvalidInput("fingerprint") for anything else."""
        try:
            data = orjson.loads(text)
            return cls(
                kind=Kind(data["kind"]),
                algorithm=str(data["algorithm"]),
                hashes=tuple(PerceptualHash(int(p, 16), int(d, 16)) for p, d in data["hashes"]),
                vector=base64.b64decode(data["vector"], validate=True),
            )
        except InvalidInput:
            raise
        except (ValueError, TypeError, KeyError) as exc:  # orjson's error is a ValueError
            raise InvalidInput("fingerprint", f"not a stored fingerprint: {exc}") from exc


def picture_hash(picture: Image.Image) -> PerceptualHash:
    """pHash and dHash of ``picture`` (any mode; imagehash reads its luma)."""
    # str() is imagehash's own serialisation: the bits as hex, most significant first.
    return PerceptualHash(
        int(str(imagehash.phash(picture)), 16), int(str(imagehash.dhash(picture)), 16)
    )


@contextlib.contextmanager
def _upright(path: Path, max_pixels: int) -> Iterator[Image.Image]:
    """The still image at ``path``, decoded and turned by its EXIF orientation.

    Only :data:`IMAGE_FORMATS` are decoded, and nothing larger than ``max_pixels`` (checked
    on the header, before decoding); an animated image gives its first frame. Raises
    InvalidInput("work") for a file that is not such an image.
    """
    with path.open("rb") as file:
        try:
            with Image.open(file, formats=IMAGE_FORMATS) as picture:
                if picture.width * picture.height > max_pixels:
                    raise InvalidInput(
                        "work", f"{picture.width}x{picture.height} is over {max_pixels} pixels"
                    )
                picture.load()
                yield ImageOps.exif_transpose(picture)
        except (OSError, Image.DecompressionBombError, SyntaxError) as exc:
            # PIL reports an unknown, truncated or corrupt file as OSError (some plugins as
            # SyntaxError): the work is unreadable, which no retry fixes.
            raise InvalidInput("work", f"not a readable image: {exc}") from exc


def image_fingerprint(
    path: Path, *, max_pixels: int = sandbox.DEFAULT_LIMITS.max_pixels
) -> Fingerprint:
    """The fingerprint of the still image at ``path`` (CPU: run it in a thread). The EXIF
    orientation is applied, so a copy rotated by its tag only is the same picture; see
    :func:`_upright` for what is refused."""
    with _upright(path, max_pixels) as picture:
        return Fingerprint(Kind.IMAGE, HASH_ALGORITHM, (picture_hash(picture),))


def still_frame(
    path: Path, *, width: int = 64, max_pixels: int = sandbox.DEFAULT_LIMITS.max_pixels
) -> GrayFrame:
    """The still image at ``path`` as the one 8-bit luma frame ``width`` pixels wide that the
    moderation module reviews (CPU: run it in a thread). One decode in this process instead
    of FFmpeg's probe and frame sampling, which cost three processes per image."""
    with _upright(path, max_pixels) as picture:
        height = max(1, round(width * picture.height / picture.width))
        small = picture.convert("L").resize((width, height))
        return GrayFrame(at_ms=0, width=width, height=height, pixels=small.tobytes())


def frames_fingerprint(frames: Sequence[GrayFrame]) -> Fingerprint:
    """The video fingerprint of sampled ``frames``, in time order, flat frames left out
    (:data:`FLAT_LUMA_STD`) unless all are. Pure CPU; InvalidInput("frames") for none."""
    if not 1 <= len(frames) <= MAX_FRAMES:
        raise InvalidInput("frames", f"a video fingerprint takes 1-{MAX_FRAMES} frames")
    ordered = sorted(frames, key=lambda f: f.at_ms)
    pictures = [_luma(frame) for frame in ordered]
    detailed = [p for p in pictures if float(np.std(np.asarray(p))) >= FLAT_LUMA_STD]
    kept = detailed or pictures
    return Fingerprint(Kind.VIDEO, HASH_ALGORITHM, tuple(picture_hash(p) for p in kept))


async def video_fingerprint(
    path: Path,
    work_dir: Path,
    *,
    frames: int = VIDEO_FRAMES,
    limits: MediaLimits = sandbox.DEFAULT_LIMITS,
) -> Fingerprint:
    """The fingerprint of the clip at ``path``: probed and sampled by the sandboxed FFmpeg
    (scratch space under ``work_dir``), hashed in a thread.

    Raises InvalidInput("work") for a source that is not a video, and the toolkit's
    MediaRefused (a PermanentError with a code) for one it refuses.
    """
    if not 1 <= frames <= MAX_FRAMES:
        raise InvalidInput("frames", f"a video fingerprint takes 1-{MAX_FRAMES} frames")
    info = await probe.probe(path, limits, scratch_root=work_dir)
    if info.kind != "video":
        raise InvalidInput("work", f"a video was expected, the file is {info.kind}")
    sampled = await sample_frames(
        path, info, work_dir, count=frames, width=FRAME_WIDTH, limits=limits
    )
    return await asyncio.to_thread(frames_fingerprint, sampled)


def _luma(frame: GrayFrame) -> Image.Image:
    if frame.width <= 0 or len(frame.pixels) != frame.width * frame.height:
        raise InvalidInput("frames", f"frame at {frame.at_ms} ms does not match its size")
    return Image.frombytes("L", (frame.width, frame.height), frame.pixels)


#: Token windows of a long text. The model reads 256 word pieces, two of them its [CLS] and
#: [SEP]; 240 leaves room for a slice that re-tokenises a little longer at its edges. Windows
#: overlap by 60 tokens so a sentence cut at one window's end is whole in the next.
WINDOW_TOKENS: Final = 240
WINDOW_STRIDE: Final = 180
#: A bound on the CPU one work costs (32 windows: about 6 000 tokens, a second or two on one
#: core); a longer text is covered by windows spread evenly over it, with gaps between them.
MAX_WINDOWS: Final = 32
MAX_TEXT_BYTES: Final = 1 << 20


class TextModelMissing(ConfigurationError):
    """Texts cannot be fingerprinted: install the hub with its `ml` extra (the model)."""


class TextEmbedder:
    """Text fingerprints from the process's one MiniLM model (moderation's, shared).

    The model loads on first use, in the caller's thread (seconds: not on the event loop);
    a load that fails is tried again on the next call. Safe to call from several threads.
    ``torch_threads`` is set process-wide at the load, as moderation sets it (one by
    default): measured on two busy cores, one thread embedded a short text in 43 ms, two
    threads in 200 ms, fighting each other and the hub for the cores.
    """

    def __init__(self, model_dir: Path | None = None, *, torch_threads: int = 1) -> None:
        self._model_dir = model_dir
        self._torch_threads = torch_threads
        self._loaded: tuple[SentenceTransformer, str] | None = None

    def fingerprint_file(self, path: Path) -> Fingerprint:
        """The fingerprint of the UTF-8 text file at ``path`` (a BOM is ignored).

        Raises InvalidInput("work") for a file over :data:`MAX_TEXT_BYTES` or not UTF-8.
        """
        if path.stat().st_size > MAX_TEXT_BYTES:
            raise InvalidInput("work", f"a text work is at most {MAX_TEXT_BYTES} bytes")
        try:
            text = path.read_bytes().decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise InvalidInput("work", f"the text is not UTF-8: {exc}") from exc
        return self.fingerprint(text)

    def fingerprint(self, text: str) -> Fingerprint:
        """The normalised mean embedding of :func:`windows` of ``text``.

        Raises InvalidInput("work") for a text with nothing but white space,
        :class:`TextModelMissing` without the extra, ConfigurationError if the model cannot
        load.
        """
        if not text.strip():
            raise InvalidInput("work", "the text is empty")
        model, version = self._model()
        parts = windows(text, model.tokenizer)
        embedded = model.encode(
            parts, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False
        )
        # The mean of unit vectors weighs each window alike; scaled back to unit length so a
        # dot product is the cosine.
        mean = np.asarray(embedded, dtype=np.float32).mean(axis=0)
        mean /= max(float(np.linalg.norm(mean)), 1e-12)
        return Fingerprint(Kind.TEXT, version, vector=mean.astype("<f4").tobytes())

    def windows(self, text: str) -> list[str]:
        """The parts of ``text`` the model embeds (:func:`windows`)."""
        model, _ = self._model()
        return windows(text, model.tokenizer)

    def _model(self) -> tuple[SentenceTransformer, str]:
        if self._loaded is None:
            # Two threads may both get here: the shared loader's lock makes it one load.
            self._loaded = self._load()
        return self._loaded

    def _load(self) -> tuple[SentenceTransformer, str]:
        # The backbone's loader: the process holds one copy of the weights, shared with
        # moderation.
        try:
            loader = semantic.sentence_transformer_class()
            model_dir = self._model_dir or semantic.shipped_model_dir()
        except semantic.ExtraMissing as exc:
            raise TextModelMissing() from exc
        try:
            model, version = semantic.shared_model(model_dir, loader, self._torch_threads)
        except Exception as exc:
            raise ConfigurationError(
                f"the text model in {model_dir} cannot load ({type(exc).__name__}: {exc})"
            ) from exc
        assert isinstance(model, loader) and isinstance(version, str)
        return model, version


def windows(text: str, tokenizer: PreTrainedTokenizerBase) -> list[str]:
    """``text`` itself when it fits in one window, else slices of it of
    :data:`WINDOW_TOKENS` tokens every :data:`WINDOW_STRIDE`, at most :data:`MAX_WINDOWS`.

    Cut on the tokenizer's own offsets, so a window is whole word pieces in any script (a
    split on spaces would make a Chinese paragraph one "word").
    """
    encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True, verbose=False)
    offsets: list[tuple[int, int]] = [(int(a), int(b)) for a, b in encoded["offset_mapping"]]
    count = len(offsets)
    if count <= WINDOW_TOKENS:
        return [text]
    last = count - WINDOW_TOKENS
    starts = [*range(0, last, WINDOW_STRIDE), last]
    if len(starts) > MAX_WINDOWS:
        starts = [round(i * last / (MAX_WINDOWS - 1)) for i in range(MAX_WINDOWS)]
    return [text[offsets[s][0] : offsets[s + WINDOW_TOKENS - 1][1]] for s in starts]
