"""What every engine checks before it writes or searches: pure functions, no I/O.

Both engines refuse the same inputs with the same errors, so a caller sees one contract
whichever store it was given. Vectors are checked for unit length because SQLite scores by
dot product, which is the cosine only for unit vectors (pgvector's ``<=>`` would hide the
mistake, and a zero vector has no cosine at all).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from aigc_hub.core.errors import InvalidInput

from .base import MAX_DIMENSIONS, MAX_K, Vector, VectorItem

#: How far from 1.0 an L2 norm may be (float32 rounding of a normalised vector is ~1e-7).
NORM_TOLERANCE = 1e-3


def vector(value: object, field: str = "vector") -> Vector:
    """``value`` as a 1-D float32 array of unit length, or ``InvalidInput`` naming ``field``."""
    array = np.asarray(value)
    if array.dtype.kind not in "fiu":
        raise InvalidInput(field, f"a vector holds numbers, not {array.dtype}")
    if array.ndim != 1 or not 1 <= array.shape[0] <= MAX_DIMENSIONS:
        raise InvalidInput(
            field, f"a vector is 1-D with 1 to {MAX_DIMENSIONS} values, not shape {array.shape}"
        )
    result = np.ascontiguousarray(array, dtype=np.float32)
    if not np.isfinite(result).all():
        raise InvalidInput(field, "a vector holds only finite values")
    norm = float(np.linalg.norm(result))
    if abs(norm - 1.0) > NORM_TOLERANCE:
        raise InvalidInput(field, f"a vector is L2-normalised (norm 1), not of norm {norm:.4g}")
    return result


def items(batch: Sequence[VectorItem]) -> tuple[list[VectorItem], int]:
    """The batch with checked float32 vectors, one item per chunk id (the last given wins, in
    the order of first appearance), and their common dimension (0 for an empty batch)."""
    latest: dict[str, VectorItem] = {}
    dimension = 0
    for position, item in enumerate(batch):
        field = f"items[{position}]"
        checked = vector(item.vector, f"{field}.vector")
        if dimension and checked.shape[0] != dimension:
            raise InvalidInput(
                f"{field}.vector",
                f"one batch has one dimension: {dimension}, not {checked.shape[0]}",
            )
        dimension = checked.shape[0]
        if not 0 <= item.start <= item.end or item.ordinal < 0:
            raise InvalidInput(field, "0 <= start <= end and ordinal >= 0")
        if "\x00" in item.text:
            # PostgreSQL text cannot hold NUL; refused by both engines alike.
            raise InvalidInput(f"{field}.text", "chunk text holds no NUL character")
        latest[item.chunk_id] = dataclasses.replace(item, vector=checked)
    return list(latest.values()), dimension


def k(value: int) -> int:
    """``value`` when it is between 1 and ``MAX_K``, else ``InvalidInput``."""
    if not 1 <= value <= MAX_K:
        raise InvalidInput("k", f"k is between 1 and {MAX_K}, not {value}")
    return value
