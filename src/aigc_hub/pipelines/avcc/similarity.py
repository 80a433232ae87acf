"""Is a work a near-duplicate of a coded one? Distances between fingerprints, the thresholds
that decide, and an in-memory index of the coded works' fingerprints.

Every kind has a *distance*, 0 for the same work and larger further apart (for text too, so
"nearest" and "within the threshold" read the same way for every kind):

* image — Hamming distance over both hashes, pHash + dHash (0-128 bits);
* video — a frame-set distance: each frame of one clip is matched with its nearest frame of
  the other, and the median of those distances taken; the smaller of the two directions
  counts, so a trimmed copy (all its frames are in the original) is near, and so is a clip
  that contains a coded one. The median, not the mean, lets a few new frames (a title card)
  through;
* text — cosine distance, ``1 - cosine similarity`` (0-2).

The thresholds below were measured on ``tests/integration/test_avcc_fingerprints.py``'s set
(its docstring has the table): each sits in the gap between the furthest copy and the
nearest unrelated work. Pure functions, except the index, which holds arrays in memory.
"""

from __future__ import annotations

import statistics
import threading
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Final, NamedTuple, Protocol

import numpy as np
import numpy.typing as npt

from aigc_hub.core.errors import Conflict, InvalidInput
from aigc_hub.pipelines.avcc.fingerprints import EMBEDDING_DIM, Fingerprint, Kind, PerceptualHash

#: Image copies measured (of 128 bits, 60 pictures): JPEG q60 ≤ 2, resized 50 % ≤ 2, 30 %
#: brighter ≤ 13, darker ≤ 3, cropped by 2 % / 3 % on each side ≤ 14 / ≤ 21; unrelated
#: pictures ≥ 27 (19 900 pairs). A 5 % crop (up to 32) is past it: perceptual hashes are not
#: crop-invariant.
IMAGE_MAX_DISTANCE: Final = 24
#: The same per-frame measure as images, for the median frame: re-encoded, rescaled or
#: trimmed copies measured ≤ 4, unrelated clips ≥ 45.
VIDEO_MAX_DISTANCE: Final = 24
#: Cosine similarity ≥ 0.70: paraphrases measured 0.77-0.88, the same topic in other words
#: 0.22-0.59, unrelated texts ≤ 0.16.
TEXT_MAX_DISTANCE: Final = 0.30

MAX_DISTANCE: Final[Mapping[Kind, float]] = MappingProxyType(
    {Kind.IMAGE: IMAGE_MAX_DISTANCE, Kind.VIDEO: VIDEO_MAX_DISTANCE, Kind.TEXT: TEXT_MAX_DISTANCE}
)


def hash_distance(a: PerceptualHash, b: PerceptualHash) -> int:
    """Bits that differ across both hashes (0-128)."""
    return (a.phash ^ b.phash).bit_count() + (a.dhash ^ b.dhash).bit_count()


def frame_set_distance(a: Sequence[PerceptualHash], b: Sequence[PerceptualHash]) -> float:
    """The frame-set distance (module doc) of two non-empty frame sequences."""
    return min(_one_way(a, b), _one_way(b, a))


def _one_way(a: Sequence[PerceptualHash], b: Sequence[PerceptualHash]) -> float:
    return float(statistics.median(min(hash_distance(x, y) for y in b) for x in a))


def cosine_similarity(a: Fingerprint, b: Fingerprint) -> float:
    """The cosine of two text fingerprints (their vectors are unit length)."""
    _check_comparable(a, b)
    return float(np.dot(a.embedding(), b.embedding()))


def distance(a: Fingerprint, b: Fingerprint) -> float:
    """The distance (module doc) between two fingerprints of the same kind and algorithm;
    InvalidInput("fingerprint") for any other pair."""
    _check_comparable(a, b)
    if a.kind is Kind.TEXT:
        return 1.0 - cosine_similarity(a, b)
    return frame_set_distance(a.hashes, b.hashes)


def is_near_duplicate(a: Fingerprint, b: Fingerprint) -> bool:
    """True when ``a`` and ``b`` are within their kind's :data:`MAX_DISTANCE`."""
    return distance(a, b) <= MAX_DISTANCE[a.kind]


def _check_comparable(a: Fingerprint, b: Fingerprint) -> None:
    if (a.kind, a.algorithm) != (b.kind, b.algorithm):
        raise InvalidInput(
            "fingerprint",
            f"cannot compare {a.kind} ({a.algorithm}) with {b.kind} ({b.algorithm})",
        )


class Nearest(NamedTuple):
    """The closest indexed record and its distance."""

    record_id: str
    distance: float


class FingerprintIndex:
    """The coded works' fingerprints, in memory, for nearest-neighbour queries.

    Built by :meth:`add`-ing stored fingerprints (one per record id); one algorithm per kind.
    Queries are exact linear scans, measured on two shared cores: image and video hashes are
    uint64 arrays compared with XOR and popcount (25 ms per million images; 0.25 s per
    hundred thousand 16-frame clips), texts a float32 matrix and one matrix-vector product
    (16 ms and 150 MB per hundred thousand texts). Past a few million images, or texts and
    clips past a few hundred thousand, an ANN index (pgvector, FAISS) is the next step.
    Safe to share between threads: a lock serialises adds and queries.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._buckets: dict[Kind, _Bucket] = {}
        self._record_ids: set[str] = set()

    def __len__(self) -> int:
        return len(self._record_ids)

    def add(self, record_id: str, fingerprint: Fingerprint) -> None:
        """Index ``fingerprint`` as ``record_id``'s.

        Raises Conflict if the id is indexed already, InvalidInput("fingerprint") if the
        kind's fingerprints so far have another algorithm.
        """
        with self._lock:
            if record_id in self._record_ids:
                raise Conflict(f"record {record_id!r} is indexed already")
            bucket = self._buckets.get(fingerprint.kind)
            if bucket is None:
                bucket = self._buckets[fingerprint.kind] = _new_bucket(fingerprint)
            _check_algorithm(bucket, fingerprint)
            bucket.add(record_id, fingerprint)
            self._record_ids.add(record_id)

    def nearest(self, fingerprint: Fingerprint) -> Nearest | None:
        """The indexed record of ``fingerprint``'s kind nearest to it (the first added among
        equals), or None when the kind has none. InvalidInput on an algorithm mismatch."""
        with self._lock:
            bucket = self._buckets.get(fingerprint.kind)
            if bucket is None or not bucket.record_ids:
                return None
            _check_algorithm(bucket, fingerprint)
            distances = bucket.distances(fingerprint)
            best = int(np.argmin(distances))
            return Nearest(bucket.record_ids[best], float(distances[best]))

    def near_duplicate(self, fingerprint: Fingerprint) -> Nearest | None:
        """:meth:`nearest` when it is within the kind's :data:`MAX_DISTANCE`, else None."""
        found = self.nearest(fingerprint)
        if found is None or found.distance > MAX_DISTANCE[fingerprint.kind]:
            return None
        return found


class _Bucket(Protocol):
    algorithm: str
    record_ids: list[str]

    def add(self, record_id: str, fingerprint: Fingerprint) -> None: ...

    def distances(self, fingerprint: Fingerprint) -> npt.NDArray[np.float64]: ...


def _new_bucket(fingerprint: Fingerprint) -> _Bucket:
    if fingerprint.kind is Kind.TEXT:
        return _VectorBucket(fingerprint.algorithm)
    return _HashBucket(fingerprint.algorithm)


def _check_algorithm(bucket: _Bucket, fingerprint: Fingerprint) -> None:
    if bucket.algorithm != fingerprint.algorithm:
        raise InvalidInput(
            "fingerprint",
            f"the index holds {fingerprint.kind} fingerprints of {bucket.algorithm}, "
            f"not {fingerprint.algorithm}: fingerprint the works again",
        )


#: Hamming distances a query may hold in memory at once (uint8): bounds a scan's memory.
_SCAN_CELLS: Final = 1 << 22
#: Stands for an absent frame: larger than any real distance (128), so never a nearest.
_ABSENT: Final = 255


class _HashBucket:
    """Images and videos: row i holds record i's frames' hashes, padded to the widest."""

    def __init__(self, algorithm: str) -> None:
        self.algorithm = algorithm
        self.record_ids: list[str] = []
        self._phash = np.zeros((16, 1), dtype=np.uint64)
        self._dhash = np.zeros((16, 1), dtype=np.uint64)
        self._counts = np.zeros(16, dtype=np.intp)

    def add(self, record_id: str, fingerprint: Fingerprint) -> None:
        row, frames = len(self.record_ids), len(fingerprint.hashes)
        rows, width = self._phash.shape
        if row == rows or frames > width:
            # Doubling keeps a long run of adds linear; columns grow only to the widest clip.
            shape = (rows * 2 if row == rows else rows, max(width, frames))
            self._phash = _resized(self._phash, shape)
            self._dhash = _resized(self._dhash, shape)
            self._counts = np.resize(self._counts, shape[0])
        self._phash[row, :frames] = [h.phash for h in fingerprint.hashes]
        self._dhash[row, :frames] = [h.dhash for h in fingerprint.hashes]
        self._counts[row] = frames
        self.record_ids.append(record_id)

    def distances(self, fingerprint: Fingerprint) -> npt.NDArray[np.float64]:
        query_p = np.array([h.phash for h in fingerprint.hashes], dtype=np.uint64)
        query_d = np.array([h.dhash for h in fingerprint.hashes], dtype=np.uint64)
        count = len(self.record_ids)
        step = max(1, _SCAN_CELLS // (len(query_p) * self._phash.shape[1]))
        out = np.empty(count, dtype=np.float64)
        for start in range(0, count, step):
            stop = min(start + step, count)
            out[start:stop] = _frame_set_distances(
                query_p,
                query_d,
                self._phash[start:stop],
                self._dhash[start:stop],
                self._counts[start:stop],
            )
        return out


def _frame_set_distances(
    query_p: npt.NDArray[np.uint64],
    query_d: npt.NDArray[np.uint64],
    stored_p: npt.NDArray[np.uint64],
    stored_d: npt.NDArray[np.uint64],
    counts: npt.NDArray[np.intp],
) -> npt.NDArray[np.float64]:
    """:func:`frame_set_distance` of the query against every stored row, at once."""
    # cells[q, n, f]: query frame q against frame f of stored record n.
    cells = np.bitwise_count(query_p[:, None, None] ^ stored_p[None]) + np.bitwise_count(
        query_d[:, None, None] ^ stored_d[None]
    )
    present = np.arange(stored_p.shape[1])[None, :] < counts[:, None]
    cells = np.where(present[None], cells, np.uint8(_ABSENT))
    forward = np.median(cells.min(axis=2), axis=0)
    # Absent frames sort last, so the median of a row's first `count` values is its own.
    backward = np.sort(cells.min(axis=0), axis=1).astype(np.float64)
    rows = np.arange(len(counts))
    middle = (backward[rows, (counts - 1) // 2] + backward[rows, counts // 2]) / 2
    out: npt.NDArray[np.float64] = np.minimum(forward, middle)
    return out


def _resized(array: npt.NDArray[np.uint64], shape: tuple[int, int]) -> npt.NDArray[np.uint64]:
    grown = np.zeros(shape, dtype=array.dtype)
    grown[: array.shape[0], : array.shape[1]] = array
    return grown


class _VectorBucket:
    """Texts: row i is record i's unit vector; cosine distances by one product."""

    def __init__(self, algorithm: str) -> None:
        self.algorithm = algorithm
        self.record_ids: list[str] = []
        self._matrix = np.zeros((16, EMBEDDING_DIM), dtype=np.float32)

    def add(self, record_id: str, fingerprint: Fingerprint) -> None:
        row = len(self.record_ids)
        if row == len(self._matrix):
            grown = np.zeros((row * 2, EMBEDDING_DIM), dtype=np.float32)
            grown[:row] = self._matrix
            self._matrix = grown
        self._matrix[row] = fingerprint.embedding()
        self.record_ids.append(record_id)

    def distances(self, fingerprint: Fingerprint) -> npt.NDArray[np.float64]:
        similarity = self._matrix[: len(self.record_ids)] @ fingerprint.embedding()
        out: npt.NDArray[np.float64] = 1.0 - similarity.astype(np.float64)
        return out
