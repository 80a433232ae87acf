"""What the loopback OpenAI vendor (:mod:`aigc_hub.testing.openai_vendor`) computes and
says: its vectors, its token estimate, the checks a real vendor makes of a request, and
OpenAI's response and error bodies. No I/O: the vendor module serves these.

The checks are the ones a client can trip on: no ``model``; ``input`` not a string or a
list of strings, empty, longer than 2,048 items, or holding an empty text or one over
8,192 tokens; ``messages`` not a list of ``{role, content}``; ``json_object`` mode with
no mention of JSON in the messages.
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import math
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt
from starlette.responses import JSONResponse, Response

MAX_INPUTS: Final = 2048
MAX_INPUT_TOKENS: Final = 8192
_WORD: Final = re.compile(r"\w+")
_TOKENISH: Final = re.compile(r"\w+|[^\w\s]")

#: A chat request's messages, as the vendor received them.
Messages = list[dict[str, object]]


def hashed_embedding(text: str, dimensions: int) -> npt.NDArray[np.float32]:
    """The stand-in's vector for ``text``: each lower-cased word and word bigram adds ±1
    at a hashed position; unit length. Texts that share words are near. A text without
    words hashes as one feature."""
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
    """Tokens-ish, without a tokenizer: the larger of the count of words and punctuation
    and a quarter of the UTF-8 bytes (so Chinese, one "word" to ``\\w+``, is not undercounted)."""
    return max(len(_TOKENISH.findall(text)), math.ceil(len(text.encode()) / 4))


def check_embeddings(body: dict[str, object]) -> tuple[list[str], str] | JSONResponse:
    """``(texts, encoding_format)`` of a valid embeddings request, else its 400."""
    texts = body.get("input")
    if isinstance(texts, str):
        texts = [texts]
    if not isinstance(body.get("model"), str):
        return error(400, "you must provide a model parameter", "model")
    if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
        return error(400, "'$.input' is invalid: a string or a list of strings", "input")
    if len(texts) > MAX_INPUTS:
        return error(400, f"'$.input' must have at most {MAX_INPUTS} items", "input")
    for text in texts:
        if not text:
            return error(400, "'$.input' is invalid: an input is empty", "input")
        if (tokens := estimated_tokens(text)) > MAX_INPUT_TOKENS:
            return error(
                400,
                f"This model's maximum context length is {MAX_INPUT_TOKENS} tokens, "
                f"however you requested {tokens} tokens. Please reduce your prompt.",
                "input",
            )
    encoding = body.get("encoding_format", "float")
    if encoding not in ("float", "base64"):
        return error(400, "'$.encoding_format' must be 'float' or 'base64'", "encoding_format")
    return texts, str(encoding)


def embeddings_body(
    model: str, texts: list[str], dimensions: int, encoding: str, *, reverse: bool
) -> dict[str, object]:
    """OpenAI's answer to an embeddings request (data last first when ``reverse``)."""
    data = [
        {"object": "embedding", "index": i, "embedding": _encoded(text, dimensions, encoding)}
        for i, text in enumerate(texts)
    ]
    if reverse:
        data.reverse()
    used = sum(estimated_tokens(t) for t in texts)
    return {
        "object": "list",
        "data": data,
        "model": model,
        "usage": {"prompt_tokens": used, "total_tokens": used},
    }


def check_chat(body: dict[str, object]) -> tuple[Messages, bool] | JSONResponse:
    """``(messages, json_mode)`` of a valid chat request, else its 400."""
    messages = body.get("messages")
    if not isinstance(body.get("model"), str):
        return error(400, "you must provide a model parameter", "model")
    if not isinstance(messages, list) or not messages or not all(map(_is_message, messages)):
        return error(400, "'$.messages' must be a list of {role, content} objects", "messages")
    wanted = body.get("response_format")
    kind = wanted.get("type", "text") if isinstance(wanted, dict) else "text"
    if kind == "json_object" and "json" not in json.dumps(messages).lower():
        return error(
            400,
            "'messages' must contain the word 'json' in some form, to use "
            "'response_format' of type 'json_object'.",
            "messages",
        )
    return messages, kind in ("json_object", "json_schema")


def chat_body(number: int, model: str, messages: Messages, content: str) -> dict[str, object]:
    """OpenAI's answer to a chat completion: one choice, ``content``, finished."""
    prompt = sum(estimated_tokens(str(m.get("content", ""))) for m in messages)
    completion = estimated_tokens(content)
    return {
        "id": f"chatcmpl-{number}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
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


def is_json_object(content: str) -> bool:
    """Whether ``content`` parses as a JSON object (what JSON mode promises)."""
    try:
        return isinstance(json.loads(content), dict)
    except ValueError:
        return False


def error(
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


@dataclass(frozen=True)
class Fault:
    """An answer the vendor was told to give instead of serving: a status, a wait, a body."""

    status: int
    retry_after_s: float | None = None
    body: bytes | None = None

    @classmethod
    def of(
        cls, status: int, retry_after_s: float | None, body: bytes | Mapping[str, object] | None
    ) -> Fault:
        """A fault whose body, when a mapping, is sent as JSON."""
        raw = json.dumps(body).encode() if isinstance(body, Mapping) else body
        return cls(status, retry_after_s, raw)

    def response(self) -> Response:
        """The answer: the body given, else OpenAI's words for the status."""
        headers: dict[str, str] = {}
        if self.retry_after_s is not None:
            # OpenAI sends both; the whole-second header is the standard one.
            headers["retry-after"] = str(math.ceil(self.retry_after_s))
            headers["retry-after-ms"] = str(round(self.retry_after_s * 1000))
        if self.body is not None:
            return Response(self.body, self.status, headers, media_type="application/json")
        message = {
            429: "Rate limit reached for requests. Please try again later.",
            503: "The engine is currently overloaded, please try again later.",
        }.get(self.status, f"injected failure: HTTP {self.status}")
        kind = "rate_limit_exceeded" if self.status == 429 else "server_error"
        response = error(self.status, message, kind=kind)
        response.headers.update(headers)
        return response


def _encoded(text: str, dimensions: int, encoding: str) -> list[float] | str:
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
