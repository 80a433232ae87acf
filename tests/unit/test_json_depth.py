"""The API's JSON depth scan: its vectorized form answers as the exact byte walk does."""

from __future__ import annotations

import random

import pytest

from aigc_hub.interfaces.http.limits import _walk_depth_exceeds, json_depth_exceeds


@pytest.mark.parametrize(
    ("body", "limit", "deeper"),
    [
        (b'{"a":[1,2]}', 1, True),
        (b'{"a":[1,2]}', 2, False),
        (b'"[[[["', 1, False),  # brackets in a string do not nest
        (b'{"a":"x\\"[[[["}', 1, False),  # nor after an escaped quote in it
        (b'{"a\\\\":[[1]]}', 2, True),  # an escaped backslash ends before the quote
        (b"[[[]]]", 3, False),
        (b"[[[]]]", 2, True),
        (b"", 1, False),
        (b"12", 0, False),
    ],
)
def test_depth_of_known_bodies(body: bytes, limit: int, deeper: bool) -> None:
    assert json_depth_exceeds(body, limit) is deeper


def test_vectorized_scan_agrees_with_the_byte_walk_on_random_bodies() -> None:
    rng = random.Random(7)
    alphabet = b'[]{}"a:,\\'
    for _ in range(20_000):
        body = bytes(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        for limit in (0, 1, 2, 4):
            assert json_depth_exceeds(body, limit) == _walk_depth_exceeds(body, limit), body
