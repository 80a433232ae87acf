"""The loopback OpenAI-compatible vendor itself, spoken to with plain httpx: its chat
answers (fixed, computed, JSON mode), the checks a real vendor makes, its vectors, its
faults and its bookkeeping. Tests of our adapters rely on each of these."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator

import httpx
import numpy as np
import pytest

from aigc_hub.testing.openai_vendor import OpenAIVendor, serve_vendor
from aigc_hub.testing.openai_wire import Messages, estimated_tokens, hashed_embedding


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(trust_env=False, timeout=10) as client:
        yield client


def _auth(vendor: OpenAIVendor) -> dict[str, str]:
    return {"Authorization": f"Bearer {vendor.api_key}"}


async def _chat(
    http: httpx.AsyncClient,
    vendor: OpenAIVendor,
    messages: Messages,
    timeout: float = 10,
    **extra: object,
) -> httpx.Response:
    return await http.post(
        f"{vendor.base_url}/chat/completions",
        json={"model": "gpt-test", "messages": messages, **extra},
        headers=_auth(vendor),
        timeout=timeout,
    )


async def test_chat_answers_its_fixed_object_as_json_content(http: httpx.AsyncClient) -> None:
    async with serve_vendor(chat={"labels": ["harbour"], "score": 0.9}) as vendor:
        response = await _chat(
            http,
            vendor,
            [{"role": "user", "content": "Label this text. Answer in JSON."}],
            response_format={"type": "json_object"},
        )
    assert response.status_code == 200
    body = response.json()
    assert body["object"] == "chat.completion" and body["model"] == "gpt-test"
    [choice] = body["choices"]
    assert choice["finish_reason"] == "stop" and choice["message"]["role"] == "assistant"
    assert json.loads(choice["message"]["content"]) == {"labels": ["harbour"], "score": 0.9}
    assert body["usage"]["total_tokens"] > 0


async def test_chat_asks_a_callable_with_the_messages(http: httpx.AsyncClient) -> None:
    def echo(messages: Messages) -> dict[str, object]:
        return {"echo": messages[-1]["content"], "turns": len(messages)}

    async with serve_vendor(chat=echo) as vendor:
        messages: Messages = [
            {"role": "system", "content": "Reply in json."},
            {"role": "user", "content": "ping"},
        ]
        response = await _chat(http, vendor, messages, response_format={"type": "json_object"})
    content = response.json()["choices"][0]["message"]["content"]
    assert json.loads(content) == {"echo": "ping", "turns": 2}
    assert vendor.conversations == [messages]


async def test_json_object_mode_needs_json_in_the_messages(http: httpx.AsyncClient) -> None:
    async with serve_vendor() as vendor:
        response = await _chat(
            http,
            vendor,
            [{"role": "user", "content": "Label this."}],
            response_format={"type": "json_object"},
        )
    assert response.status_code == 400
    assert "must contain the word 'json'" in response.json()["error"]["message"]


async def test_json_mode_with_a_text_answer_that_is_not_an_object_is_a_server_error(
    http: httpx.AsyncClient,
) -> None:
    async with serve_vendor(chat="plain words") as vendor:
        plain = await _chat(http, vendor, [{"role": "user", "content": "hi"}])
        forced = await _chat(
            http,
            vendor,
            [{"role": "user", "content": "json please"}],
            response_format={"type": "json_schema", "json_schema": {"name": "x"}},
        )
    assert plain.json()["choices"][0]["message"]["content"] == "plain words"
    assert forced.status_code == 500
    assert forced.json()["error"]["type"] == "server_error"


@pytest.mark.parametrize(
    "body",
    [
        {"model": "gpt-test"},
        {"model": "gpt-test", "messages": []},
        {"model": "gpt-test", "messages": [{"role": "user"}]},
        {"messages": [{"role": "user", "content": "hi"}]},
    ],
)
async def test_chat_refuses_a_request_without_model_or_messages(
    http: httpx.AsyncClient, body: dict[str, object]
) -> None:
    async with serve_vendor() as vendor:
        response = await http.post(
            f"{vendor.base_url}/chat/completions", json=body, headers=_auth(vendor)
        )
    assert response.status_code == 400
    assert response.json()["error"]["type"] == "invalid_request_error"


@pytest.mark.parametrize("path", ["/embeddings", "/chat/completions"])
async def test_both_endpoints_check_the_bearer_key(http: httpx.AsyncClient, path: str) -> None:
    async with serve_vendor() as vendor:
        wrong = await http.post(
            vendor.base_url + path, json={}, headers={"Authorization": "Bearer nope"}
        )
        missing = await http.post(vendor.base_url + path, json={})
    assert wrong.status_code == missing.status_code == 401
    assert wrong.json()["error"]["code"] == "invalid_api_key"
    assert vendor.requests[f"/v1{path}"] == 2


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b"{not json", "could not parse"),
        (b"[1, 2]", "could not parse"),
        (json.dumps({"input": ["a"]}).encode(), "model parameter"),
        (json.dumps({"model": "m", "input": [1, 2]}).encode(), "'$.input' is invalid"),
        (json.dumps({"model": "m", "input": []}).encode(), "'$.input' is invalid"),
        (
            json.dumps({"model": "m", "input": ["a"], "encoding_format": "hex"}).encode(),
            "encoding_format",
        ),
    ],
)
async def test_embeddings_refuses_malformed_requests_with_openai_error_bodies(
    http: httpx.AsyncClient, body: bytes, says: str
) -> None:
    async with serve_vendor() as vendor:
        response = await http.post(
            f"{vendor.base_url}/embeddings", content=body, headers=_auth(vendor)
        )
    assert response.status_code == 400
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert says in error["message"]


async def test_a_single_string_input_and_base64_floats_are_served(
    http: httpx.AsyncClient,
) -> None:
    async with serve_vendor(dimensions=32) as vendor:
        response = await http.post(
            f"{vendor.base_url}/embeddings",
            json={"model": "m", "input": "one text", "encoding_format": "base64"},
            headers=_auth(vendor),
        )
    [item] = response.json()["data"]
    decoded = np.frombuffer(base64.b64decode(item["embedding"]), dtype="<f4")
    assert np.allclose(decoded, hashed_embedding("one text", 32))
    assert vendor.batches == [1]


def test_texts_sharing_words_are_nearer_than_texts_that_share_none() -> None:
    query = hashed_embedding("harbour ledgers of the customs house", 256)
    related = hashed_embedding("the customs house keeps the harbour ledgers", 256)
    unrelated = hashed_embedding("whisk eggs with sugar until pale", 256)
    assert float(query @ related) > 0.3 > abs(float(query @ unrelated))
    assert np.isclose(np.linalg.norm(query), 1.0)
    assert np.array_equal(query, hashed_embedding("Harbour LEDGERS of the customs house", 256))
    # A text of no words still gets a unit vector (the vendor refuses only empty input).
    assert np.isclose(np.linalg.norm(hashed_embedding("!!!", 16)), 1.0)


def test_token_estimate_counts_chinese_by_bytes_and_english_by_words() -> None:
    assert estimated_tokens("one two three") == 4  # 13 bytes / 4, rounded up
    assert estimated_tokens("港务局的档案") == 5  # 18 bytes / 4, rounded up
    assert estimated_tokens("a, b, c, d, e, f") == 11  # words and punctuation


async def test_injected_faults_come_before_the_key_check_and_are_counted(
    http: httpx.AsyncClient,
) -> None:
    async with serve_vendor() as vendor:
        vendor.fail_next(2, 503, retry_after_s=0.25)
        first = await _chat(http, vendor, [{"role": "user", "content": "hi"}])
        second = await http.post(f"{vendor.base_url}/embeddings", json={})  # no key: fault first
        third = await _chat(http, vendor, [{"role": "user", "content": "hi"}])
    assert (first.status_code, second.status_code, third.status_code) == (503, 503, 200)
    assert first.headers["retry-after"] == "1" and first.headers["retry-after-ms"] == "250"
    assert vendor.requests == {"/v1/chat/completions": 2, "/v1/embeddings": 1}


async def test_a_held_request_gets_no_answer_and_release_lets_the_next_through(
    http: httpx.AsyncClient,
) -> None:
    async with serve_vendor() as vendor:
        vendor.hold_next(1)
        with pytest.raises(httpx.ReadTimeout):
            await _chat(http, vendor, [{"role": "user", "content": "hi"}], timeout=0.3)
        vendor.release()
        response = await _chat(http, vendor, [{"role": "user", "content": "hi"}])
    assert response.status_code == 200
    assert vendor.requests["/v1/chat/completions"] == 2
