"""Download of a provider's output file, shared by adapters, through the guarded egress.

An output URL comes from the provider's answer, which we do not control: it could point at
an internal address. So it is fetched by :mod:`aigc_hub.egress` under a policy made here:
only the provider's configured origins, user info never, every resolved address public
unless the exact origin is trusted (the hub's own local provider, at the URL the settings
name), redirects followed by hand and each hop checked again, a byte cap and a total
deadline. The file lands at ``dest`` only when complete, hashed while it streams. This
module turns the fetcher's outcomes into the ProviderError codes the pipeline reacts to.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from aigc_hub.egress import (
    EgressConnectionError,
    EgressFetcher,
    EgressHTTPError,
    EgressPolicy,
    EgressRefused,
    EgressTimeout,
    urls,
)
from aigc_hub.pipelines.generation.adapters.base import FetchedFile, ProviderError, RetryClass

#: A whole output download, connect to last byte; under the OUTPUT_FETCHING scanner's
#: deadline (``fetch_deadline_s``, 600 s by default) so a fetch ends before it is redone.
DEFAULT_DEADLINE_S = 300.0


@dataclass(frozen=True)
class OutputFetch:
    """How an adapter downloads outputs.

    ``egress``: the fetcher to use (default: one of the adapter's own, system resolver);
    ``trusted_origins``: exact origins that may resolve to non-public addresses (the local
    provider's URL; tests: a loopback fake vendor); ``deadline_s``: total per download.
    """

    egress: EgressFetcher | None = None
    trusted_origins: tuple[str, ...] = ()
    deadline_s: float = DEFAULT_DEADLINE_S

    def fetcher(self) -> EgressFetcher:
        """``egress``, or a new fetcher (it holds nothing open, so it needs no closing).

        Its own policy refuses every body: each download passes the policy it needs."""
        return self.egress or EgressFetcher(EgressPolicy(max_bytes=0, deadline_s=1.0))


def check_origins(allowed: Sequence[str], trusted: Sequence[str] = ()) -> None:
    """ValueError naming the first entry that is not an origin (or a ``*.`` pattern)."""
    EgressPolicy(
        max_bytes=0, deadline_s=1.0, allowed_origins=frozenset(allowed),
        trusted_origins=frozenset(trusted),
    )  # fmt: skip


def origin_of(url: str) -> str:
    """The canonical ``scheme://host[:port]`` of ``url``; ValueError if it has none."""
    try:
        return urls.parse(url).origin
    except EgressRefused as exc:
        raise ValueError(f"not an http(s) URL with a host: {url!r} ({exc})") from None


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


async def fetch_to_file(
    egress: EgressFetcher,
    url: str,
    dest: Path,
    *,
    allowed_origins: Sequence[str],
    trusted_origins: Sequence[str] = (),
    max_bytes: int,
    timeout_s: float,
    deadline_s: float = DEFAULT_DEADLINE_S,
    content_type: str | None = None,
) -> FetchedFile:
    """Stream ``url`` to ``dest``; size, sha256 and content type measured on the way.

    ``allowed_origins`` are exact origins or ``https://*.domain`` patterns; ``timeout_s``
    bounds connecting and each silence between reads, ``deadline_s`` the whole download.
    Raises ProviderError: PERMANENT ``output_url_refused`` (scheme, user info, origin, port,
    address), ``output_redirect_refused`` (a redirect's target refused, or too many),
    ``output_too_large``; RETRYABLE ``output_expired`` on 403/410, ``output_timeout``,
    ``output_unreachable``; other statuses as the shared table says (429 RATE_LIMITED,
    5xx/408 RETRYABLE, other 4xx PERMANENT ``http_<status>``). Nothing is left at ``dest``
    (or beside it) when it fails.
    """
    policy = EgressPolicy(
        max_bytes=max_bytes,
        deadline_s=deadline_s,
        allowed_origins=frozenset(allowed_origins),
        trusted_origins=frozenset(trusted_origins),
        connect_timeout_s=timeout_s,
        idle_timeout_s=timeout_s,
    )
    try:
        got = await egress.fetch_to_file(url, dest, policy=policy)
    except EgressRefused as exc:
        raise refusal(exc) from exc
    except EgressHTTPError as exc:
        raise http_error(exc.status) from exc
    except EgressTimeout as exc:
        raise ProviderError(
            f"output download: {exc}", retry_class=RetryClass.RETRYABLE, code="output_timeout"
        ) from exc
    except EgressConnectionError as exc:
        raise ProviderError(
            f"output download: {exc}", retry_class=RetryClass.RETRYABLE, code="output_unreachable"
        ) from exc
    return FetchedFile(got.path, got.size, got.sha256, got.content_type or content_type)


def refusal(exc: EgressRefused) -> ProviderError:
    """The PERMANENT ProviderError for a refused fetch (no retry makes the URL acceptable)."""
    if exc.code == "too_large":
        code = "output_too_large"
    elif exc.hop > 0 or exc.code == "redirect":
        code = "output_redirect_refused"
    else:
        code = "output_url_refused"
    return ProviderError(f"output URL refused: {exc}", retry_class=RetryClass.PERMANENT, code=code)


def http_error(status: int) -> ProviderError:
    """403/410 on a signed output URL means it expired: RETRYABLE ``output_expired`` (the
    caller may ask the provider for a fresh URL); the rest as the shared retry table."""
    message = f"output download: HTTP {status}"
    if status in (403, 410):
        return ProviderError(message, retry_class=RetryClass.RETRYABLE, code="output_expired")
    if status == 429:
        return ProviderError(message, retry_class=RetryClass.RATE_LIMITED, code="http_429")
    if status >= 500 or status == 408:
        return ProviderError(message, retry_class=RetryClass.RETRYABLE, code=f"http_{status}")
    return ProviderError(message, retry_class=RetryClass.PERMANENT, code=f"http_{status}")
