"""A loopback stand-in for a hosted OpenAI-compatible vendor: embeddings and chat.

Tests reach it only through the real adapters, over real HTTP on 127.0.0.1, so what they
exercise is our client: its request shape, its key, its batching, and what it makes of the
vendor's refusals and overloads.

- ``POST /v1/embeddings``: deterministic vectors of the configured dimension, by feature
  hashing of the lower-cased words and word bigrams of each text, normalised
  (:func:`hashed_embedding`). Texts that share words are near, so search tests behave.
- ``POST /v1/chat/completions``: answers a fixed JSON object, a fixed text, or what a
  callable makes of the messages; ``response_format`` ``json_object`` / ``json_schema``
  is honoured (the answer must be a JSON object, and, as OpenAI does for ``json_object``,
  the messages must mention JSON).

Like the real service it checks the bearer key (401), refuses more than 2,048 inputs, an
empty input and a text over 8,192 tokens (estimated: the larger of its word and
punctuation count and a quarter of its UTF-8 bytes), with OpenAI's error body, 400.

Faults, for tests: :meth:`OpenAIVendor.fail_next` answers the next requests with a status
(and a ``Retry-After``, or a body of the test's choosing: a malformed 200),
:meth:`OpenAIVendor.fail_until` answers every request with a status until a time of the
vendor's clock (injectable, so a test moves time instead of sleeping), and
:meth:`OpenAIVendor.hold_next` keeps requests unanswered until :meth:`OpenAIVendor.release`.
These come before the key check: they stand for the vendor's gateway.

    async with serve_vendor(dimensions=64) as vendor:
        embedder = OpenAIEmbedder(vendor.base_url, vendor.api_key, "text-embedding-3-small", 64)
"""

from __future__ import annotations

import asyncio
import base64
import collections
import contextlib
import hashlib
import itertools
import json
import math
import re
import secrets
import socket
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

HOST: Final = "127.0.0.1"
MAX_INPUTS: Final = 2048
MAX_INPUT_TOKENS: Final = 8192
_WORD: Final = re.compile(r"\w+")
_TOKENISH: Final = re.compile(r"\w+|[^\w\s]")

#: A chat answer: a JSON object, a text, or a function of the request's messages.
Messages = list[dict[str, object]]
ChatAnswer = Mapping[str, object] | str | Callable[[Messages], Mapping[str, object] | str]


def hashed_embedding(text: str, dimensions: int) -> npt.NDArray[np.float32]:
    """The stand-in's vector for ``text``: each lower-cased word and word bigram adds ±1
    at a hashed position; unit length. A text without words hashes as one feature."""
    words = _WORD.findall(text.lower())
    features = words + [f"{a} {b}" for a, b in itertools.pairwise(words)] or [text]
    vector = np.zeros(dimensions, dtype=np.float64)
    for feature in features:
        digest = int.from_bytes(hashlib.blake2b(feature.encode(), digest_size=8).digest())
        vector[digest % dimensions] += 1.0 if digest >> 63 else -1.0
    norm = float(np.linalg.norm(vector))
    if norm == 0.0:  # features that cancelled out: any fixed unit vector will do
        vector[0], norm = 1.0, 1.0
    return (vector / norm).astype(np.float32)


def estimated_tokens(text: str) -> int:
    """Tokens-ish: a tokenizer-free estimate that does not undercount Chinese."""
    return max(len(_TOKENISH.findall(text)), math.ceil(len(text.encode()) / 4))


@dataclass(frozen=True)
class _Fault:
    status: int
    retry_after_s: float | None
    body: bytes | None


class OpenAIVendor:
    """The stand-in's state: what it was asked, and the faults it is told to make."""

    def __init__(
        self,
        *,
        api_key: str,
        dimensions: int,
        chat: ChatAnswer,
        reverse_order: bool,
        clock: Callable[[], float],
    ) -> None:
        self.api_key = api_key
        self.dimensions = dimensions
        self.chat = chat
        #: Answer embeddings last input first (the ``index`` field still says which is
        #: which), to show a client orders by ``index`` and not by position.
        self.reverse_order = reverse_order
        self.clock = clock
        #: Set by :func:`serve_vendor`: ``http://127.0.0.1:<port>/v1``.
        self.base_url = ""
        #: Requests received per path, faults and refusals included.
        self.requests: collections.Counter[str] = collections.Counter()
        #: The number of inputs of each embeddings request that passed the checks.
        self.batches: list[int] = []
        #: The messages of each chat request that passed the checks.
        self.conversations: list[Messages] = []
        self._faults: collections.deque[_Fault] = collections.deque()
        self._fault_until: tuple[float, _Fault] | None = None
        self._to_hold = 0
        self._released = asyncio.Event()
        self.app = Starlette(
            routes=[
                Route("/v1/embeddings", self._embeddings, methods=["POST"]),
                Route("/v1/chat/completions", self._chat, methods=["POST"]),
            ]
        )

    def fail_next(
        self,
        n: int,
        status: int,
        retry_after_s: float | None = None,
        *,
        body: bytes | Mapping[str, object] | None = None,
    ) -> None:
        """Answer the next ``n`` requests with ``status``: OpenAI's error body, or ``body``."""
        raw = json.dumps(body).encode() if isinstance(body, Mapping) else body
        self._faults.extend(_Fault(status, retry_after_s, raw) for _ in range(n))

    def fail_until(
        self, monotonic_deadline: float, status: int, retry_after_s: float | None = None
    ) -> None:
        """Answer every request with ``status`` until the vendor's clock reaches the deadline."""
        self._fault_until = (monotonic_deadline, _Fault(status, retry_after_s, None))

    def hold_next(self, n: int) -> None:
        """Keep the next ``n`` requests unanswered until :meth:`release` (or the server stops)."""
        self._to_hold += n

    def release(self) -> None:
        """Let every held request (and any held later) go on."""
        self._released.set()

    # -- the HTTP side -----------------------------------------------------------------

    async def _gate(self, request: Request) -> Response | None:
        """Count, hold, fault, check the key: a response ends the request here."""
        self.requests[request.url.path] += 1
        if self._to_hold:
            self._to_hold -= 1
            await self._released.wait()
        fault = self._faults.popleft() if self._faults else None
        if fault is None and self._fault_until is not None:
            deadline, lasting = self._fault_until
            fault = lasting if self.clock() < deadline else None
        if fault is not None:
            return _fault_response(fault)
        given = request.headers.get("authorization", "")
        if not secrets.compare_digest(given.encode(), f"Bearer {self.api_key}".encode()):
            return _error(401, "Incorrect API key provided.", code="invalid_api_key")
        return None

    async def _embeddings(self, request: Request) -> Response:
        stop = await self._gate(request)
        if stop is not None:
            return stop
        body = await _json_object(request)
        if isinstance(body, Response):
            return body
        texts = body.get("input")
        if isinstance(texts, str):
            texts = [texts]
        if not isinstance(body.get("model"), str):
            return _error(400, "you must provide a model parameter", param="model")
        if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
            return _error(400, "'$.input' is invalid: a string or a list of strings", "input")
        if len(texts) > MAX_INPUTS:
            return _error(400, f"'$.input' must have at most {MAX_INPUTS} items", "input")
        for text in texts:
            tokens = estimated_tokens(text)
            if not text:
                return _error(400, "'$.input' is invalid: an input is empty", "input")
            if tokens > MAX_INPUT_TOKENS:
                return _error(
                    400,
                    f"This model's maximum context length is {MAX_INPUT_TOKENS} tokens, "
                    f"however you requested {tokens} tokens. Please reduce your prompt.",
                    "input",
                )
        encoding = body.get("encoding_format", "float")
        if encoding not in ("float", "base64"):
            return _error(400, "'$.encoding_format' must be 'float' or 'base64'", "encoding_format")
        self.batches.append(len(texts))
        data = [
            {
                "object": "embedding",
                "index": i,
                "embedding": _encoded(text, self.dimensions, encoding),
            }
            for i, text in enumerate(texts)
        ]
        if self.reverse_order:
            data.reverse()
        used = sum(estimated_tokens(t) for t in texts)
        return JSONResponse(
            {
                "object": "list",
                "data": data,
                "model": body["model"],
                "usage": {"prompt_tokens": used, "total_tokens": used},
            }
        )

    async def _chat(self, request: Request) -> Response:
        stop = await self._gate(request)
        if stop is not None:
            return stop
        body = await _json_object(request)
        if isinstance(body, Response):
            return body
        messages = body.get("messages")
        if not isinstance(body.get("model"), str):
            return _error(400, "you must provide a model parameter", param="model")
        if (
            not isinstance(messages, list)
            or not messages
            or not all(_is_message(m) for m in messages)
        ):
            return _error(400, "'$.messages' must be a list of {role, content} objects", "messages")
        wanted = body.get("response_format")
        kind = wanted.get("type", "text") if isinstance(wanted, dict) else "text"
        json_mode = kind in ("json_object", "json_schema")
        if kind == "json_object" and "json" not in json.dumps(messages).lower():
            return _error(
                400,
                "'messages' must contain the word 'json' in some form, to use "
                "'response_format' of type 'json_object'.",
                "messages",
            )
        self.conversations.append(messages)
        answer = self.chat(messages) if callable(self.chat) else self.chat
        content = answer if isinstance(answer, str) else json.dumps(dict(answer))
        if json_mode and not _is_json_object(content):
            return _error(500, "the stand-in's answer is not a JSON object", kind="server_error")
        prompt = sum(estimated_tokens(str(m.get("content", ""))) for m in messages)
        completion = estimated_tokens(content)
        return JSONResponse(
            {
                "id": f"chatcmpl-{len(self.conversations)}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": body["model"],
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": content},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {
                    "prompt_tokens": prompt,
                    "completion_tokens": completion,
                    "total_tokens": prompt + completion,
                },
            }
        )


@contextlib.asynccontextmanager
async def serve_vendor(
    *,
    api_key: str = "sk-loopback-test",
    dimensions: int = 256,
    chat: ChatAnswer | None = None,
    reverse_order: bool = False,
    clock: Callable[[], float] = time.monotonic,
) -> AsyncIterator[OpenAIVendor]:
    """Serve a fresh :class:`OpenAIVendor` on a free 127.0.0.1 port in this event loop
    until the block ends. ``chat`` defaults to the answer ``{"ok": true}``.

    The socket listens before the server starts, so ``base_url`` takes requests at once
    (they wait in the backlog); held requests are released when the block ends.
    """
    import uvicorn

    vendor = OpenAIVendor(
        api_key=api_key,
        dimensions=dimensions,
        chat={"ok": True} if chat is None else chat,
        reverse_order=reverse_order,
        clock=clock,
    )
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind((HOST, 0))
    sock.listen(128)
    vendor.base_url = f"http://{HOST}:{sock.getsockname()[1]}/v1"

    class _Server(uvicorn.Server):
        # The test process owns signals; uvicorn must not take them.
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

    server = _Server(
        uvicorn.Config(
            vendor.app,
            log_config=None,
            log_level="warning",
            access_log=False,
            lifespan="off",
            timeout_graceful_shutdown=5,
        )
    )
    serving = asyncio.create_task(server.serve(sockets=[sock]), name="openai-vendor")
    try:
        yield vendor
    finally:
        vendor.release()
        server.should_exit = True
        try:
            await asyncio.wait_for(serving, 10)
        finally:
            sock.close()


def _encoded(text: str, dimensions: int, encoding: object) -> list[float] | str:
    vector = hashed_embedding(text, dimensions)
    if encoding == "base64":
        return base64.b64encode(vector.astype("<f4").tobytes()).decode()
    return [float(x) for x in vector]


def _is_message(message: object) -> bool:
    return (
        isinstance(message, dict)
        and isinstance(message.get("role"), str)
        and isinstance(message.get("content"), str | list)
    )


def _is_json_object(content: str) -> bool:
    try:
        return isinstance(json.loads(content), dict)
    except ValueError:
        return False


async def _json_object(request: Request) -> dict[str, object] | Response:
    try:
        body = json.loads(await request.body())
    except ValueError:
        body = None
    if not isinstance(body, dict):
        return _error(400, "We could not parse the JSON body of your request.")
    return body


def _error(
    status: int,
    message: str,
    param: str | None = None,
    *,
    kind: str = "invalid_request_error",
    code: str | None = None,
) -> JSONResponse:
    """OpenAI's error body: ``{"error": {"message", "type", "param", "code"}}``."""
    return JSONResponse(
        {"error": {"message": message, "type": kind, "param": param, "code": code}},
        status_code=status,
    )


def _fault_response(fault: _Fault) -> Response:
    headers: dict[str, str] = {}
    if fault.retry_after_s is not None:
        # OpenAI sends both; the whole-second header is the standard one.
        headers["retry-after"] = str(math.ceil(fault.retry_after_s))
        headers["retry-after-ms"] = str(round(fault.retry_after_s * 1000))
    if fault.body is not None:
        return Response(fault.body, fault.status, headers, media_type="application/json")
    kind = "rate_limit_exceeded" if fault.status == 429 else "server_error"
    message = {
        429: "Rate limit reached for requests. Please try again later.",
        503: "The engine is currently overloaded, please try again later.",
    }.get(fault.status, f"injected failure: HTTP {fault.status}")
    body = {"error": {"message": message, "type": kind, "param": None, "code": None}}
    return JSONResponse(body, fault.status, headers)
