"""The OpenAI embeddings adapter over real HTTP against the loopback OpenAI-compatible vendor
(``aigc_hub.testing.openai_vendor``): the request it sends, batching, ordering, and what
each of the vendor's refusals, overloads and silences becomes."""

from __future__ import annotations

import socket
import time
from collections.abc import AsyncIterator

import numpy as np
import pytest

from aigc_hub.core.errors import ConfigurationError, PermanentError, RetryableError
from aigc_hub.pipelines.documents.adapters.embedder import (
    DimensionMismatch,
    Embedder,
    EmbedderOverloaded,
    EmbedderUnavailable,
    EmbeddingRefused,
)
from aigc_hub.pipelines.documents.adapters.openai_embeddings import OpenAIEmbedder
from aigc_hub.testing.openai_vendor import OpenAIVendor, serve_vendor
from aigc_hub.testing.openai_wire import hashed_embedding

DIMS = 64
MODEL = "text-embedding-3-small"
TEXTS = [f"chunk {n}: the harbour ledgers of the year {1800 + n}" for n in range(10)]


class ManualClock:
    """The vendor's clock, moved by the test instead of waited for."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
async def vendor(clock: ManualClock) -> AsyncIterator[OpenAIVendor]:
    async with serve_vendor(dimensions=DIMS, clock=clock) as served:
        yield served


@pytest.fixture
async def embedder(vendor: OpenAIVendor) -> AsyncIterator[OpenAIEmbedder]:
    client = OpenAIEmbedder(vendor.base_url, vendor.api_key, MODEL, DIMS, timeout_s=10)
    yield client
    await client.close()


def _expected(texts: list[str]) -> np.ndarray:
    return np.stack([hashed_embedding(t, DIMS) for t in texts])


async def test_a_batch_comes_back_as_unit_rows_in_input_order(
    vendor: OpenAIVendor, embedder: OpenAIEmbedder
) -> None:
    used: Embedder = embedder
    rows = await used.embed(TEXTS[:3])
    assert used.name == f"openai:{MODEL}" and used.dimensions == DIMS
    assert rows.shape == (3, DIMS) and rows.dtype == np.float32
    assert np.allclose(np.linalg.norm(rows, axis=1), 1.0, atol=1e-6)
    assert np.allclose(rows, _expected(TEXTS[:3]), atol=1e-6)
    assert vendor.requests["/v1/embeddings"] == 1 and vendor.batches == [3]


async def test_rows_are_ordered_by_index_when_the_vendor_answers_out_of_order() -> None:
    async with serve_vendor(dimensions=DIMS, reverse_order=True) as reversing:
        client = OpenAIEmbedder(reversing.base_url, reversing.api_key, MODEL, DIMS)
        try:
            rows = await client.embed(TEXTS[:5])
        finally:
            await client.close()
    assert np.allclose(rows, _expected(TEXTS[:5]), atol=1e-6)


async def test_a_batch_above_max_batch_goes_as_several_requests_in_order(
    vendor: OpenAIVendor,
) -> None:
    client = OpenAIEmbedder(vendor.base_url, vendor.api_key, MODEL, DIMS, max_batch=4)
    try:
        rows = await client.embed(TEXTS)
    finally:
        await client.close()
    assert vendor.batches == [4, 4, 2]
    assert np.allclose(rows, _expected(TEXTS), atol=1e-6)


async def test_no_text_is_no_request(vendor: OpenAIVendor, embedder: OpenAIEmbedder) -> None:
    rows = await embedder.embed([])
    assert rows.shape == (0, DIMS)
    assert vendor.requests["/v1/embeddings"] == 0


async def test_429_with_retry_after_is_overloaded_with_the_delay(
    vendor: OpenAIVendor, embedder: OpenAIEmbedder
) -> None:
    vendor.fail_next(1, 429, retry_after_s=2.5)
    with pytest.raises(EmbedderOverloaded, match="Rate limit") as caught:
        await embedder.embed(TEXTS[:2])
    assert caught.value.retry_after_s == 2.5  # retry-after-ms, finer than Retry-After: 3
    assert isinstance(caught.value, RetryableError)
    assert (await embedder.embed(TEXTS[:2])).shape == (2, DIMS)  # the next one passes


async def test_503_is_overloaded_until_the_vendor_recovers(
    vendor: OpenAIVendor, embedder: OpenAIEmbedder, clock: ManualClock
) -> None:
    vendor.fail_until(clock.now + 30, 503)
    for _ in range(2):
        with pytest.raises(EmbedderOverloaded, match="overloaded") as caught:
            await embedder.embed(TEXTS[:1])
        assert caught.value.retry_after_s is None
    clock.now += 30
    assert (await embedder.embed(TEXTS[:1])).shape == (1, DIMS)
    assert vendor.requests["/v1/embeddings"] == 3


@pytest.mark.parametrize("status", [500, 502, 504, 408])
async def test_other_server_errors_are_unavailable(
    vendor: OpenAIVendor, embedder: OpenAIEmbedder, status: int
) -> None:
    vendor.fail_next(1, status)
    with pytest.raises(EmbedderUnavailable, match=f"HTTP {status}"):
        await embedder.embed(TEXTS[:1])


async def test_a_text_too_long_for_the_model_is_refused_with_the_vendors_message(
    embedder: OpenAIEmbedder,
) -> None:
    with pytest.raises(EmbeddingRefused, match="maximum context length is 8192") as caught:
        await embedder.embed(["word " * 9000])
    assert caught.value.status == 400
    assert isinstance(caught.value, PermanentError)


async def test_more_inputs_than_the_vendor_takes_at_once_are_refused(
    vendor: OpenAIVendor,
) -> None:
    client = OpenAIEmbedder(vendor.base_url, vendor.api_key, MODEL, DIMS, max_batch=5000)
    try:
        with pytest.raises(EmbeddingRefused, match="at most 2048"):
            await client.embed([f"text {n}" for n in range(2049)])
    finally:
        await client.close()


async def test_an_empty_text_is_refused(embedder: OpenAIEmbedder) -> None:
    with pytest.raises(EmbeddingRefused, match="empty"):
        await embedder.embed(["a text", ""])


async def test_a_wrong_key_is_refused_with_401(vendor: OpenAIVendor) -> None:
    client = OpenAIEmbedder(vendor.base_url, "sk-wrong", MODEL, DIMS)
    try:
        with pytest.raises(EmbeddingRefused, match="Incorrect API key") as caught:
            await client.embed(TEXTS[:1])
    finally:
        await client.close()
    assert caught.value.status == 401


@pytest.mark.parametrize("status", [413, 422])
async def test_other_client_errors_are_refused(
    vendor: OpenAIVendor, embedder: OpenAIEmbedder, status: int
) -> None:
    vendor.fail_next(1, status)
    with pytest.raises(EmbeddingRefused) as caught:
        await embedder.embed(TEXTS[:1])
    assert caught.value.status == status


async def test_a_vendor_answering_another_dimension_is_a_mismatch_naming_both(
    vendor: OpenAIVendor,
) -> None:
    client = OpenAIEmbedder(vendor.base_url, vendor.api_key, MODEL, 1536)
    try:
        with pytest.raises(DimensionMismatch, match=r"1536 dimensions but the model answered 64"):
            await client.embed(TEXTS[:1])
    finally:
        await client.close()
    assert issubclass(DimensionMismatch, ConfigurationError)


async def test_a_vendor_that_does_not_answer_in_time_is_unavailable(
    vendor: OpenAIVendor,
) -> None:
    vendor.hold_next(1)  # held until the vendor's block ends
    client = OpenAIEmbedder(vendor.base_url, vendor.api_key, MODEL, DIMS, timeout_s=0.3)
    started = time.monotonic()
    try:
        with pytest.raises(EmbedderUnavailable, match=r"no answer within 0\.3 s"):
            await client.embed(TEXTS[:1])
    finally:
        await client.close()
    assert time.monotonic() - started < 5
    assert vendor.requests["/v1/embeddings"] == 1


async def test_a_vendor_that_refuses_connections_is_unavailable() -> None:
    with socket.socket() as probe:  # a loopback port with nobody listening
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    client = OpenAIEmbedder(f"http://127.0.0.1:{port}/v1", "sk-any", MODEL, DIMS)
    try:
        with pytest.raises(EmbedderUnavailable, match="ConnectError"):
            await client.embed(TEXTS[:1])
    finally:
        await client.close()


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b"not json", "malformed"),
        ({"data": "rows"}, "malformed"),
        ({"data": [{"index": 0, "embedding": [1.0] * DIMS}]}, "indexes"),  # asked for 2
        ({"data": [{"index": 0, "embedding": [0.0] * DIMS}]}, "zero or NaN"),
        ({"data": [{"index": 0, "embedding": [1.0, 2.0]}, {"index": 1}]}, "malformed"),
    ],
)
async def test_a_malformed_answer_is_unavailable(
    vendor: OpenAIVendor, embedder: OpenAIEmbedder, body: bytes | dict[str, object], says: str
) -> None:
    asked = 1 if "zero" in says else 2
    vendor.fail_next(1, 200, body=body)
    with pytest.raises(EmbedderUnavailable, match=says):
        await embedder.embed(TEXTS[:asked])


async def test_a_redirect_is_not_followed_and_is_unavailable(
    vendor: OpenAIVendor, embedder: OpenAIEmbedder
) -> None:
    vendor.fail_next(1, 307)
    with pytest.raises(EmbedderUnavailable, match="unexpected HTTP 307"):
        await embedder.embed(TEXTS[:1])


async def test_a_base_url_with_a_trailing_slash_reaches_the_same_endpoint(
    vendor: OpenAIVendor,
) -> None:
    client = OpenAIEmbedder(vendor.base_url + "/", vendor.api_key, MODEL, DIMS)
    try:
        [row] = await client.embed(["solitary text"])
    finally:
        await client.close()
    assert np.allclose(row, hashed_embedding("solitary text", DIMS), atol=1e-6)
    assert vendor.requests == {"/v1/embeddings": 1}


@pytest.mark.parametrize(
    ("dimensions", "max_batch", "timeout_s"), [(0, 256, 30.0), (64, 0, 30.0), (64, 256, 0.0)]
)
def test_impossible_settings_are_refused_when_made(
    dimensions: int, max_batch: int, timeout_s: float
) -> None:
    with pytest.raises(ConfigurationError, match="above 0"):
        OpenAIEmbedder("http://127.0.0.1:9/v1", "sk", MODEL, dimensions, timeout_s, max_batch)
