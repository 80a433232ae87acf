"""What a guarded fetch raises.

::

    HubError
    ├── PermanentError
    │   └── EgressRefused        the URL, a redirect or the answer breaks the policy (``code``)
    ├── RetryableError
    │   ├── EgressTimeout        the total deadline or the idle timeout passed
    │   └── EgressConnectionError  resolution or the connection failed (nothing refused)
    └── EgressHTTPError          the server answered a non-2xx status (``status``)

``EgressHTTPError`` is neither retryable nor permanent on its own: the caller decides from
``status`` (403/410 on a signed URL usually means it expired; 5xx is worth another try).
"""

from __future__ import annotations

from aigc_hub.core.errors import HubError, PermanentError, RetryableError

#: Every refusal code, one per rule of the policy.
REFUSAL_CODES = frozenset(
    {"url", "scheme", "userinfo", "host", "port", "origin", "address", "redirect", "too_large"}
)


class EgressRefused(PermanentError):
    """The egress policy refuses this fetch."""

    def __init__(self, code: str, message: str, *, hop: int = 0, url: str | None = None) -> None:
        assert code in REFUSAL_CODES, code
        self.code = code
        #: 0 for the URL asked for, n for the n-th redirect's target
        self.hop = hop
        #: the URL refused (never logged with its query: signed URLs carry secrets there)
        self.url = url
        super().__init__(f"egress refused ({code}): {message}")


class EgressTimeout(RetryableError):
    """The fetch did not finish within its deadline."""


class EgressConnectionError(RetryableError):
    """The host name did not resolve, or the connection failed or broke."""


class EgressHTTPError(HubError):
    """The server answered with a non-2xx status."""

    def __init__(self, status: int, url: str) -> None:
        self.status = status
        self.url = url
        super().__init__(f"egress: HTTP {status} from {_origin_only(url)}")


def _origin_only(url: str) -> str:
    # the path and query of a provider's signed URL are a credential: keep them out of messages
    scheme, _, rest = url.partition("://")
    return f"{scheme}://{rest.split('/', 1)[0]}" if rest else url
