"""A hosted embedding model behind the OpenAI embeddings API (§4.2, §7).

``POST {base_url}/embeddings`` with ``{"model", "input": [...], "encoding_format":
"float"}`` and a bearer key: OpenAI itself, or any vendor or gateway that speaks its API
(Azure's, vLLM, Ollama, LiteLLM...). A batch larger than ``max_batch`` goes as several
requests, one after another (the vendor's rate limit is per request and per token, so
sending them at once would only meet it sooner); rows are put back in input order by their
``index``, checked against the configured dimension, and normalised.

What a failed request means for the worker:

=========================================  ==============================================
vendor's answer                            raised
=========================================  ==============================================
429, 503 (``Retry-After`` if sent)         :class:`~.embedder.EmbedderOverloaded`: retry
                                           later and turn backpressure on (§7)
408, other 5xx, timeout, connection error  :class:`~.embedder.EmbedderUnavailable`: retry
other 4xx (400, 401, 413, 422...)          :class:`~.embedder.EmbeddingRefused` with the
                                           vendor's message: the same request never passes
200 with rows of another length            :class:`~.embedder.DimensionMismatch`
any other answer (3xx, a malformed body)   :class:`~.embedder.EmbedderUnavailable`
=========================================  ==============================================

A 401 is refused rather than retried: a wrong key does not heal by itself, and the DLQ
keeps the chunks for a replay once it is fixed.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import email.utils
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import httpx

from aigc_hub.core.errors import ConfigurationError
from aigc_hub.pipelines.documents.adapters.embedder import (
    DimensionMismatch,
    EmbedderOverloaded,
    EmbedderUnavailable,
    EmbeddingRefused,
)

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

#: The statuses by which a vendor says "too much, later".
OVERLOADED = frozenset({429, 503})


class OpenAIEmbedder:
    """:class:`~.embedder.Embedder` over the OpenAI embeddings API; safe to share between
    tasks. ``name`` is ``openai:<model>``."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        model: str,
        dimensions: int,
        timeout_s: float = 30.0,
        max_batch: int = 256,
        *,
        http: httpx.AsyncClient | None = None,
    ) -> None:
        if dimensions < 1 or max_batch < 1 or timeout_s <= 0:
            raise ConfigurationError(
                f"OpenAIEmbedder needs dimensions, max_batch and timeout_s above 0, "
                f"not {dimensions}, {max_batch} and {timeout_s:g}"
            )
        self.name = f"openai:{model}"
        self.dimensions = dimensions
        self._model = model
        self._url = base_url.rstrip("/") + "/embeddings"
        self._headers = {"Authorization": f"Bearer {api_key}"}
        self._timeout_s = timeout_s
        self._max_batch = max_batch
        self._owns_http = http is None
        # trust_env=False: no proxy from the environment between us and the vendor.
        self._http = http or httpx.AsyncClient(
            trust_env=False, follow_redirects=False, timeout=timeout_s
        )

    async def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Unit rows for ``texts`` in order, ``max_batch`` texts a request; each request
        within ``timeout_s``. The first failed request fails the whole call."""
        import numpy as np

        batch = list(texts)
        if not batch:
            return np.zeros((0, self.dimensions), dtype=np.float32)
        parts = [
            await self._request(batch[i : i + self._max_batch])
            for i in range(0, len(batch), self._max_batch)
        ]
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    async def close(self) -> None:
        """Close the HTTP client if this embedder made it."""
        if self._owns_http:
            await self._http.aclose()

    async def _request(self, texts: list[str]) -> npt.NDArray[np.float32]:
        body = {"model": self._model, "input": texts, "encoding_format": "float"}
        try:
            # httpx's timeout bounds each read; this one the whole exchange, so a vendor
            # that trickles bytes cannot hold the worker past ``timeout_s`` either.
            async with asyncio.timeout(self._timeout_s):
                response = await self._http.post(self._url, json=body, headers=self._headers)
        except (TimeoutError, httpx.TimeoutException):
            raise EmbedderUnavailable(
                f"{self.name}: no answer within {self._timeout_s:g} s"
            ) from None
        except httpx.TransportError as exc:
            raise EmbedderUnavailable(f"{self.name}: {type(exc).__name__}: {exc}") from exc
        if response.status_code != 200:
            raise _failure(self.name, response)
        return self._rows(response, len(texts))

    def _rows(self, response: httpx.Response, count: int) -> npt.NDArray[np.float32]:
        """The answer's rows in input order, checked and normalised."""
        import numpy as np

        try:
            data = response.json()["data"]
            ordered = sorted(data, key=lambda item: int(item["index"]))
            if [int(item["index"]) for item in ordered] != list(range(count)):
                raise ValueError(f"indexes are not 0..{count - 1}")
            rows = np.asarray([item["embedding"] for item in ordered], dtype=np.float32)
        except (ValueError, KeyError, TypeError) as exc:
            raise EmbedderUnavailable(f"{self.name}: malformed answer ({exc})") from exc
        if rows.ndim != 2 or rows.shape[1] != self.dimensions:
            raise DimensionMismatch(self.name, self.dimensions, int(rows.shape[-1]))
        norms = np.linalg.norm(rows, axis=1, keepdims=True)
        if not np.all(np.isfinite(norms)) or not np.all(norms > 0):
            raise EmbedderUnavailable(f"{self.name}: malformed answer (a zero or NaN vector)")
        normalised: npt.NDArray[np.float32] = (rows / norms).astype(np.float32)
        return normalised


def _failure(name: str, response: httpx.Response) -> Exception:
    """The error a non-200 answer stands for (the table in the module docstring)."""
    status = response.status_code
    said = f"{name}: HTTP {status}: {_vendor_message(response)}"
    if status in OVERLOADED:
        return EmbedderOverloaded(said, retry_after_s=retry_after(response.headers))
    if status >= 500 or status == 408:
        return EmbedderUnavailable(said)
    if status >= 400:
        return EmbeddingRefused(said, status=status)
    return EmbedderUnavailable(f"{name}: unexpected HTTP {status}")


def _vendor_message(response: httpx.Response) -> str:
    """OpenAI's ``error.message``, else the start of the body."""
    try:
        message = response.json()["error"]["message"]
        if isinstance(message, str) and message:
            return message
    except (ValueError, KeyError, TypeError):
        pass
    return response.text[:200] or response.reason_phrase


def retry_after(headers: httpx.Headers) -> float | None:
    """Seconds the vendor asks us to wait: ``retry-after-ms`` (OpenAI's), else
    ``Retry-After`` in seconds or as an HTTP date; None when it said nothing usable."""
    millis = _number(headers.get("retry-after-ms"))
    if millis is not None:
        return millis / 1000
    value = (headers.get("retry-after") or "").strip()
    seconds = _number(value)
    if seconds is not None or not value:
        return seconds
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:  # "-0000": UTC, by RFC 5322
        when = when.replace(tzinfo=dt.UTC)
    return max(0.0, (when - dt.datetime.now(dt.UTC)).total_seconds())


def _number(value: str | None) -> float | None:
    """A finite, non-negative number of ``value``, else None."""
    try:
        number = float(value) if value else None
    except ValueError:
        return None
    return number if number is not None and math.isfinite(number) and number >= 0 else None
