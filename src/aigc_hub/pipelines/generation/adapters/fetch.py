"""SSRF-safe download of a provider's output file, shared by adapters.

An output URL comes from the provider's answer, which we do not control: it could point at
an internal address. So only the provider's configured origin (scheme, host, port) is
fetched, a URL with user info (``user:pass@host``) never is, redirects are never followed,
and the body is bounded. The file is written beside ``dest`` and renamed into place only
when complete, hashed while it streams.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from aigc_hub.pipelines.generation.adapters.base import FetchedFile, ProviderError, RetryClass

CHUNK_SIZE = 64 * 1024


def has_userinfo(url: str) -> bool:
    """True when ``url``'s authority has a user-info part (``user@``, ``user:pass@``, ``@``).

    Parsers disagree on where such an authority's host is (``http://a\\@b``), so an origin
    check on one parser's answer can be walked around: such URLs are refused outright.
    """
    try:
        return "@" in urlsplit(url).netloc
    except ValueError:
        return False


def origin(url: str) -> tuple[str, str, int] | None:
    """``(scheme, host, port)`` of an http(s) URL with default ports filled in, else None
    (also for a URL with user info: it never names an origin we fetch from)."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or not parts.hostname or has_userinfo(url):
        return None
    return scheme, parts.hostname.lower(), port or (443 if scheme == "https" else 80)


def _refused(message: str, code: str, retry: RetryClass = RetryClass.PERMANENT) -> ProviderError:
    return ProviderError(message, retry_class=retry, code=code)


async def fetch_to_file(
    http: httpx.AsyncClient,
    url: str,
    dest: Path,
    *,
    allowed_origin: str,
    max_bytes: int,
    timeout_s: float,
    content_type: str | None = None,
) -> FetchedFile:
    """Stream ``url`` to ``dest``; size, sha256 and content type measured on the way.

    Raises ProviderError: PERMANENT ``output_url_refused`` (another origin, or user info),
    ``output_redirect_refused``, ``output_too_large``; RETRYABLE ``output_expired`` on
    403/410. Other HTTP and transport errors propagate for the adapter to classify.
    Nothing is left at ``dest`` (or beside it) when it fails.
    """
    if has_userinfo(url):
        raise _refused(
            "output URL carries user info (user:password@host), which is never fetched",
            "output_url_refused",
        )
    target = origin(url)
    if target is None or target != origin(allowed_origin):
        raise _refused("output URL is not on the provider's origin", "output_url_refused")
    part = dest.with_name(f".{dest.name}.part")
    digest, size = hashlib.sha256(), 0
    try:
        async with http.stream("GET", url, timeout=timeout_s, follow_redirects=False) as response:
            if response.is_redirect:
                raise _refused("output redirect refused", "output_redirect_refused")
            if response.status_code in (403, 410):
                raise _refused(
                    f"output URL refused with {response.status_code}",
                    "output_expired",
                    RetryClass.RETRYABLE,
                )
            response.raise_for_status()
            declared = response.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > max_bytes:
                raise _refused(f"output is larger than {max_bytes} bytes", "output_too_large")
            content_type = response.headers.get("content-type") or content_type
            await asyncio.to_thread(dest.parent.mkdir, parents=True, exist_ok=True)
            out = await asyncio.to_thread(open, part, "wb")
            try:
                async for chunk in response.aiter_bytes(CHUNK_SIZE):
                    size += len(chunk)
                    if size > max_bytes:
                        raise _refused(
                            f"output is larger than {max_bytes} bytes", "output_too_large"
                        )
                    digest.update(chunk)
                    await asyncio.to_thread(out.write, chunk)
            finally:
                await asyncio.to_thread(out.close)
        await asyncio.to_thread(os.replace, part, dest)
    except BaseException:
        part.unlink(missing_ok=True)
        raise
    return FetchedFile(dest, size, digest.hexdigest(), content_type)
