"""avcc's near-duplicate decisions without files or models: hash and frame-set distances,
the thresholds at their edges, fingerprints checked and stored, frames hashed, and the
index's nearest record (its vectorised scan checked against the plain definitions)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from aigc_hub.core.errors import Conflict, InvalidInput
from aigc_hub.media.frames import GrayFrame
from aigc_hub.pipelines.avcc import similarity
from aigc_hub.pipelines.avcc.fingerprints import (
    EMBEDDING_DIM,
    HASH_ALGORITHM,
    MAX_FRAMES,
    Fingerprint,
    Kind,
    PerceptualHash,
    frames_fingerprint,
)
from aigc_hub.pipelines.avcc.similarity import FingerprintIndex, Nearest

MODEL = "all-MiniLM-L6-v2@sha256:0000000000000000"


def flip(value: int, bits: int) -> int:
    """``value`` with its ``bits`` lowest bits inverted."""
    return value ^ ((1 << bits) - 1)


def image(phash: int, dhash: int = 0) -> Fingerprint:
    return Fingerprint(Kind.IMAGE, HASH_ALGORITHM, (PerceptualHash(phash, dhash),))


def video(*frames: tuple[int, int]) -> Fingerprint:
    return Fingerprint(Kind.VIDEO, HASH_ALGORITHM, tuple(PerceptualHash(*f) for f in frames))


def text(values: list[float], algorithm: str = MODEL) -> Fingerprint:
    vector = np.zeros(EMBEDDING_DIM, dtype="<f4")
    vector[: len(values)] = values
    vector /= np.linalg.norm(vector)
    return Fingerprint(Kind.TEXT, algorithm, vector=vector.tobytes())


def random_frames(rng: random.Random, count: int) -> tuple[PerceptualHash, ...]:
    return tuple(PerceptualHash(rng.getrandbits(64), rng.getrandbits(64)) for _ in range(count))


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        (PerceptualHash(0, 0), PerceptualHash(0, 0), 0),
        (PerceptualHash(0, 0), PerceptualHash(0b1011, 0), 3),
        (PerceptualHash(0, 0), PerceptualHash(0, 1 << 63), 1),
        (PerceptualHash(0, 0), PerceptualHash((1 << 64) - 1, (1 << 64) - 1), 128),
        (PerceptualHash(0xF0, 0x0F), PerceptualHash(0x0F, 0xF0), 16),
    ],
)
def test_hash_distance_counts_differing_bits_over_both_hashes(
    a: PerceptualHash, b: PerceptualHash, expected: int
) -> None:
    assert similarity.hash_distance(a, b) == expected


def test_a_trimmed_clip_is_at_distance_zero_from_its_original_both_ways() -> None:
    original = [PerceptualHash(1 << i, 0) for i in range(0, 64, 4)]  # 16 unlike frames
    trimmed = original[4:12]
    assert similarity.frame_set_distance(trimmed, original) == 0
    # The original also contains the trimmed clip: the nearer direction counts.
    assert similarity.frame_set_distance(original, trimmed) == 0


def test_the_median_lets_a_few_new_frames_through_but_not_a_majority() -> None:
    rng = random.Random(3)
    original = list(random_frames(rng, 8))
    titled = [*random_frames(rng, 1), *original[1:]]  # one frame replaced by a title card
    assert similarity.frame_set_distance(titled, original) == 0
    mostly_new = [*random_frames(rng, 5), *original[5:]]
    assert similarity.frame_set_distance(mostly_new, original) > similarity.VIDEO_MAX_DISTANCE


@pytest.mark.parametrize(
    ("bits", "near"),
    [(0, True), (similarity.IMAGE_MAX_DISTANCE, True), (similarity.IMAGE_MAX_DISTANCE + 1, False)],
)
def test_images_are_near_duplicates_up_to_the_threshold_inclusive(bits: int, near: bool) -> None:
    # The differing bits split across both hashes: the threshold is on their sum.
    a, b = image(0, 0), image(flip(0, bits // 2), flip(0, bits - bits // 2))
    assert similarity.distance(a, b) == bits
    assert similarity.is_near_duplicate(a, b) is near


@pytest.mark.parametrize(
    ("bits", "near"),
    [(similarity.VIDEO_MAX_DISTANCE, True), (similarity.VIDEO_MAX_DISTANCE + 1, False)],
)
def test_videos_are_near_duplicates_up_to_the_threshold_on_the_median_frame(
    bits: int, near: bool
) -> None:
    a = video((0, 0), (1 << 63, 0), (0, 1 << 63))
    b = video(*((h.phash, flip(h.dhash, bits)) for h in a.hashes))
    assert similarity.distance(a, b) == bits
    assert similarity.is_near_duplicate(a, b) is near


def test_text_distance_is_one_minus_the_cosine_and_decides_at_seventy_percent() -> None:
    a = text([1.0])
    close = text([0.71, (1 - 0.71**2) ** 0.5])  # cosine 0.71
    apart = text([0.69, (1 - 0.69**2) ** 0.5])  # cosine 0.69
    assert similarity.cosine_similarity(a, close) == pytest.approx(0.71, abs=1e-6)
    assert similarity.distance(a, close) == pytest.approx(0.29, abs=1e-6)
    assert similarity.is_near_duplicate(a, close)
    assert not similarity.is_near_duplicate(a, apart)
    assert similarity.distance(a, a) == pytest.approx(0.0, abs=1e-6)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (image(0), video((0, 0))),
        (text([1.0]), text([1.0], algorithm="other-model@sha256:1111111111111111")),
        (image(0), Fingerprint(Kind.IMAGE, "phash256", (PerceptualHash(0, 0),))),
    ],
    ids=["kinds", "text-models", "hash-algorithms"],
)
def test_fingerprints_of_another_kind_or_algorithm_do_not_compare(
    a: Fingerprint, b: Fingerprint
) -> None:
    with pytest.raises(InvalidInput, match="cannot compare") as caught:
        similarity.distance(a, b)
    assert caught.value.field == "fingerprint"


@pytest.mark.parametrize(
    ("kind", "hashes", "vector"),
    [
        (Kind.IMAGE, (), b""),
        (Kind.IMAGE, ((0, 0), (0, 0)), b""),
        (Kind.IMAGE, ((1 << 64, 0),), b""),
        (Kind.IMAGE, ((0, -1),), b""),
        (Kind.IMAGE, ((0, 0),), b"\0" * 4),
        (Kind.VIDEO, (), b""),
        (Kind.VIDEO, ((0, 0),) * (MAX_FRAMES + 1), b""),
        (Kind.TEXT, (), b"\0" * (EMBEDDING_DIM * 4 - 4)),
        (Kind.TEXT, ((0, 0),), b"\0" * EMBEDDING_DIM * 4),
    ],
    ids=[
        "image-no-hash",
        "image-two-hashes",
        "hash-over-64-bits",
        "negative-hash",
        "image-with-vector",
        "video-no-frame",
        "video-too-many-frames",
        "text-short-vector",
        "text-with-hashes",
    ],
)
def test_a_malformed_fingerprint_cannot_be_made(
    kind: Kind, hashes: tuple[tuple[int, int], ...], vector: bytes
) -> None:
    with pytest.raises(InvalidInput) as caught:
        Fingerprint(kind, "x", tuple(PerceptualHash(*h) for h in hashes), vector)
    assert caught.value.field == "fingerprint"


@pytest.mark.parametrize(
    "fingerprint",
    [
        image((1 << 64) - 1, 0x0123456789ABCDEF),
        video((1, 2), (3, 4), ((1 << 64) - 1, 0)),
        text([0.3, -0.5, 0.8]),
    ],
    ids=["image", "video", "text"],
)
def test_a_fingerprint_survives_its_stored_form(fingerprint: Fingerprint) -> None:
    stored = fingerprint.to_json()
    assert Fingerprint.from_json(stored) == fingerprint
    assert Fingerprint.from_json(stored.encode()) == fingerprint


@pytest.mark.parametrize(
    "stored",
    [
        "not json",
        "[]",
        '{"kind": "image", "algorithm": "a", "hashes": [["00", "00"]]}',
        '{"kind": "audio", "algorithm": "a", "hashes": [], "vector": ""}',
        '{"kind": "image", "algorithm": "a", "hashes": [["zz", "00"]], "vector": ""}',
        '{"kind": "image", "algorithm": "a", "hashes": [["00"]], "vector": ""}',
        '{"kind": "text", "algorithm": "a", "hashes": [], "vector": "not base64!"}',
        '{"kind": "text", "algorithm": "a", "hashes": [], "vector": "AAAA"}',
    ],
    ids=[
        "not-json",
        "not-an-object",
        "missing-field",
        "unknown-kind",
        "bad-hex",
        "half-a-hash",
        "bad-base64",
        "short-vector",
    ],
)
def test_anything_but_a_stored_fingerprint_is_refused(stored: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        Fingerprint.from_json(stored)
    assert caught.value.field == "fingerprint"


def gray(at_ms: int, pixels: bytes, width: int = 16) -> GrayFrame:
    return GrayFrame(at_ms, width, len(pixels) // width, pixels)


def gradient(seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, 16 * 16, dtype=np.uint8).tobytes()


def test_frames_are_hashed_in_time_order_and_flat_ones_left_out() -> None:
    black, textured, other = bytes(256), gradient(1), gradient(2)
    shuffled = [gray(2000, other), gray(0, black), gray(1000, textured), gray(3000, black)]
    fingerprint = frames_fingerprint(shuffled)
    expected = frames_fingerprint([gray(1000, textured), gray(2000, other)])
    assert fingerprint.kind is Kind.VIDEO
    assert fingerprint.hashes == expected.hashes
    assert len(fingerprint.hashes) == 2


def test_a_clip_that_is_all_flat_keeps_its_frames() -> None:
    fingerprint = frames_fingerprint([gray(0, bytes(256)), gray(500, bytes([9]) * 256)])
    assert len(fingerprint.hashes) == 2


@pytest.mark.parametrize(
    "frames",
    [[], [GrayFrame(0, 16, 16, bytes(255))], [GrayFrame(0, 0, 0, b"")]],
    ids=["none", "short-pixels", "zero-size"],
)
def test_frames_that_cannot_make_a_fingerprint_are_refused(frames: list[GrayFrame]) -> None:
    with pytest.raises(InvalidInput) as caught:
        frames_fingerprint(frames)
    assert caught.value.field == "frames"


def test_an_empty_index_has_no_nearest() -> None:
    index = FingerprintIndex()
    assert index.nearest(image(0)) is None
    index.add("v1", video((0, 0)))
    assert index.nearest(image(0)) is None  # kinds are searched apart
    assert len(index) == 1


def test_the_index_scan_agrees_with_the_plain_distances() -> None:
    # Enough records to grow the arrays several times, clips of varying length (the rows
    # widen), and queries that are perturbed copies of stored records.
    rng = random.Random(7)
    index = FingerprintIndex()
    stored: dict[str, Fingerprint] = {}
    for i in range(120):
        fingerprint = (
            Fingerprint(Kind.IMAGE, HASH_ALGORITHM, random_frames(rng, 1))
            if i % 2
            else Fingerprint(Kind.VIDEO, HASH_ALGORITHM, random_frames(rng, rng.randint(1, 20)))
        )
        stored[f"r{i}"] = fingerprint
        index.add(f"r{i}", fingerprint)
    for target in ("r7", "r10", "r42", "r99"):
        copy = stored[target]
        hashes = tuple(PerceptualHash(h.phash ^ 0b101, h.dhash) for h in copy.hashes)
        if copy.kind is Kind.VIDEO:  # a clip cut short, with a new frame of its own
            hashes = (*hashes[:5], *random_frames(rng, 1))
        query = Fingerprint(copy.kind, HASH_ALGORITHM, hashes)
        found = index.nearest(query)
        same_kind = {k: f for k, f in stored.items() if f.kind is query.kind}
        plain = {k: similarity.distance(query, f) for k, f in same_kind.items()}
        best = min(plain, key=lambda k: plain[k])
        assert found == Nearest(best, plain[best])
        assert found.record_id == target


def test_the_index_finds_the_nearest_text_and_its_cosine_distance() -> None:
    index = FingerprintIndex()
    index.add("boats", text([1.0, 0.2]))
    index.add("bread", text([0.0, 0.1, 1.0]))
    found = index.nearest(text([1.0, 0.3]))
    assert found is not None
    assert found.record_id == "boats"
    assert found.distance == pytest.approx(
        similarity.distance(text([1.0, 0.3]), text([1.0, 0.2])), abs=1e-6
    )


def test_among_equally_near_records_the_first_added_is_nearest() -> None:
    index = FingerprintIndex()
    index.add("first", image(0b11))
    index.add("second", image(0b11))
    assert index.nearest(image(0b10)) == Nearest("first", 1.0)


def test_near_duplicate_answers_only_within_the_threshold() -> None:
    index = FingerprintIndex()
    index.add("coded", image(0))
    within = image(flip(0, similarity.IMAGE_MAX_DISTANCE))
    beyond = image(flip(0, similarity.IMAGE_MAX_DISTANCE + 1))
    assert index.near_duplicate(within) == Nearest("coded", similarity.IMAGE_MAX_DISTANCE)
    assert index.near_duplicate(beyond) is None
    assert index.nearest(beyond) == Nearest("coded", similarity.IMAGE_MAX_DISTANCE + 1)


def test_a_record_is_indexed_once() -> None:
    index = FingerprintIndex()
    index.add("r1", image(0))
    with pytest.raises(Conflict, match="r1"):
        index.add("r1", text([1.0]))
    assert len(index) == 1


def test_the_index_refuses_a_second_algorithm_for_a_kind() -> None:
    index = FingerprintIndex()
    index.add("r1", text([1.0]))
    newer = text([1.0], algorithm="all-MiniLM-L6-v2@sha256:ffffffffffffffff")
    with pytest.raises(InvalidInput, match="fingerprint the works again"):
        index.add("r2", newer)
    with pytest.raises(InvalidInput, match="fingerprint the works again"):
        index.nearest(newer)
    assert len(index) == 1
