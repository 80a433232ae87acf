"""A loopback stand-in for a hosted OpenAI-compatible vendor: embeddings and chat.

Tests reach it only through the real adapters, over real HTTP on 127.0.0.1, so what they
exercise is our client: its request shape, its key, its batching, and what it makes of the
vendor's refusals and overloads.

- ``POST /v1/embeddings``: deterministic vectors of the configured dimension, by feature
  hashing of the lower-cased words and word bigrams of each text, normalised
  (:func:`~aigc_hub.testing.openai_wire.hashed_embedding`). Texts that share words are
  near, so search tests behave.
- ``POST /v1/chat/completions``: answers a fixed JSON object, a fixed text, or what a
  callable makes of the messages; ``response_format`` ``json_object`` / ``json_schema``
  is honoured (the answer must be a JSON object, and, as OpenAI does for ``json_object``,
  the messages must mention JSON).

Like the real service it checks the bearer key (401) and refuses, with OpenAI's error body,
400, what OpenAI refuses: more than 2,048 inputs, an empty input, a text over 8,192 tokens
(:mod:`aigc_hub.testing.openai_wire` has the checks, the vectors and the bodies).

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
import collections
import contextlib
import json
import secrets
import socket
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from aigc_hub.testing import openai_wire as wire
from aigc_hub.testing.openai_wire import Messages

HOST = "127.0.0.1"

#: A chat answer: a JSON object, a text, or a function of the request's messages.
ChatAnswer = Mapping[str, object] | str | Callable[[Messages], Mapping[str, object] | str]


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
        self._faults: collections.deque[wire.Fault] = collections.deque()
        self._fault_until: tuple[float, wire.Fault] | None = None
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
        self._faults.extend(wire.Fault.of(status, retry_after_s, body) for _ in range(n))

    def fail_until(
        self, monotonic_deadline: float, status: int, retry_after_s: float | None = None
    ) -> None:
        """Answer every request with ``status`` until the vendor's clock reaches the deadline."""
        self._fault_until = (monotonic_deadline, wire.Fault(status, retry_after_s))

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
            return fault.response()
        given = request.headers.get("authorization", "")
        if not secrets.compare_digest(given.encode(), f"Bearer {self.api_key}".encode()):
            return wire.error(401, "Incorrect API key provided.", code="invalid_api_key")
        return None

    async def _embeddings(self, request: Request) -> Response:
        body = await self._admitted(request)
        if isinstance(body, Response):
            return body
        checked = wire.check_embeddings(body)
        if isinstance(checked, Response):
            return checked
        texts, encoding = checked
        self.batches.append(len(texts))
        model = str(body["model"])
        answer = wire.embeddings_body(
            model, texts, self.dimensions, encoding, reverse=self.reverse_order
        )
        return JSONResponse(answer)

    async def _chat(self, request: Request) -> Response:
        body = await self._admitted(request)
        if isinstance(body, Response):
            return body
        checked = wire.check_chat(body)
        if isinstance(checked, Response):
            return checked
        messages, json_mode = checked
        self.conversations.append(messages)
        answer = self.chat(messages) if callable(self.chat) else self.chat
        content = answer if isinstance(answer, str) else json.dumps(dict(answer))
        if json_mode and not wire.is_json_object(content):
            return wire.error(
                500, "the stand-in's answer is not a JSON object", kind="server_error"
            )
        number = len(self.conversations)
        return JSONResponse(wire.chat_body(number, str(body["model"]), messages, content))

    async def _admitted(self, request: Request) -> dict[str, object] | Response:
        """The request's JSON object, or the answer that ends it: a fault, 401, or 400."""
        stop = await self._gate(request)
        if stop is not None:
            return stop
        try:
            body = json.loads(await request.body())
        except ValueError:
            body = None
        if not isinstance(body, dict):
            return wire.error(400, "We could not parse the JSON body of your request.")
        return body


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
