"""Webhook verification: a small :class:`WebhookVerifier` protocol every signing scheme
implements, and the one scheme implemented here, Standard Webhooks
(https://www.standardwebhooks.com; Replicate signs this way too), stdlib only.

A delivery carries three headers: ``webhook-id`` (the same for every retry of one event, so
receivers can drop duplicates), ``webhook-timestamp`` (epoch seconds of this attempt) and
``webhook-signature``: one or more space-separated ``v1,<base64 HMAC-SHA256>`` over
``f"{id}.{timestamp}.{body}"``. Secrets are ``whsec_<base64 key>`` (prefix and padding
optional, as in the reference library); a receiver holds several while a secret rotates and
accepts a delivery signed by any of them.

:func:`verify` (and :class:`StandardWebhooks`, the same as a verifier value) raises
:class:`WebhookVerificationError` with a stable ``reason`` for every missing, malformed, stale
or forged delivery, and nothing else on any headers or body. A malformed secret is
configuration: :class:`WebhookSecretError`.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets as _secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Literal, Protocol

from aigc_hub.core.errors import ConfigurationError, PermanentError

ID_HEADER: Final = "webhook-id"
TIMESTAMP_HEADER: Final = "webhook-timestamp"
SIGNATURE_HEADER: Final = "webhook-signature"
SECRET_PREFIX: Final = "whsec_"
DEFAULT_TOLERANCE_S: Final = 300

# Bounds on what we are willing to parse: a header past these is malformed, not slow.
_MAX_ID_LEN = 256
_MAX_SIGNATURE_HEADER_LEN = 4096
_MAX_TIMESTAMP_DIGITS = 12

Reason = Literal["missing_header", "malformed_header", "timestamp_out_of_window", "bad_signature"]


class WebhookVerificationError(PermanentError):
    """The delivery is not a genuine, fresh webhook; ``reason`` is a stable machine word."""

    def __init__(self, reason: Reason, detail: str = "") -> None:
        self.reason: Reason = reason
        super().__init__(f"{reason}: {detail}" if detail else reason)


class WebhookSecretError(ConfigurationError, ValueError):
    """A webhook secret is not a usable key (the message never contains the secret)."""


@dataclass(frozen=True)
class VerifiedWebhook:
    """What a verified delivery proves: its event id (for replay protection) and its time."""

    id: str
    timestamp: int


class WebhookVerifier(Protocol):
    """One signing scheme with its keys: checks a delivery, or says why it is not genuine."""

    def verify(self, headers: Mapping[str, str], body: bytes, now_s: float) -> VerifiedWebhook:
        """The id and time ``headers`` and ``body`` prove at ``now_s`` (epoch seconds);
        raises :class:`WebhookVerificationError`, and nothing else, when not genuine."""
        ...


def generate_secret(n_bytes: int = 32) -> str:
    """A fresh random secret in the ``whsec_<base64>`` form."""
    return SECRET_PREFIX + base64.b64encode(_secrets.token_bytes(n_bytes)).decode()


def decode_secret(secret: str) -> bytes:
    """The HMAC key of a secret; raises WebhookSecretError (a ValueError, never naming the
    secret) when not one.

    Accepts what the Standard Webhooks reference library accepts: base64 with or without the
    ``whsec_`` prefix, padded or not. Stricter on one point: a character outside the base64
    alphabet is refused, where the reference drops it silently and so signs with another key.
    """
    if not isinstance(secret, str):
        raise WebhookSecretError("a webhook secret is a string: 'whsec_<base64>'")
    encoded = secret.removeprefix(SECRET_PREFIX).rstrip("=")
    try:
        key = base64.b64decode(encoded + "=" * (-len(encoded) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise WebhookSecretError(
            "a webhook secret is base64 (the 'whsec_' prefix and '=' padding optional)"
        ) from None
    if not key:
        raise WebhookSecretError("a webhook secret's key is empty")
    return key


def _digest(key: bytes, msg_id: str, timestamp_s: int, body: bytes) -> bytes:
    signed = f"{msg_id}.{timestamp_s}.".encode() + body
    return hmac.new(key, signed, hashlib.sha256).digest()


def sign(secret: str, msg_id: str, timestamp_s: int, body: bytes | str) -> str:
    """``v1,<base64 HMAC-SHA256 of "{msg_id}.{timestamp_s}.{body}">`` under ``secret``."""
    raw = body.encode() if isinstance(body, str) else body
    digest = _digest(decode_secret(secret), msg_id, int(timestamp_s), raw)
    return "v1," + base64.b64encode(digest).decode()


def sign_headers(secret: str, msg_id: str, timestamp_s: int, body: bytes | str) -> dict[str, str]:
    """The three Standard Webhooks headers for one delivery attempt."""
    return {
        ID_HEADER: msg_id,
        TIMESTAMP_HEADER: str(int(timestamp_s)),
        SIGNATURE_HEADER: sign(secret, msg_id, timestamp_s, body),
    }


def _header(headers: Mapping[str, str], name: str) -> str:
    # Header names are case-insensitive; a plain dict from a test or framework may not be.
    value: object = None
    try:
        # A header sent twice is ambiguous (which id is deduplicated, which time is checked?):
        # refused, even when both copies agree. Multi-value header types expose getlist.
        getlist = getattr(headers, "getlist", None)
        if callable(getlist) and len(getlist(name)) > 1:
            raise WebhookVerificationError("malformed_header", f"{name} repeated")
        value = headers.get(name)
        if value is None:
            value = next((v for k, v in headers.items() if str(k).lower() == name), None)
    except WebhookVerificationError:
        raise
    except Exception:
        raise WebhookVerificationError("malformed_header", "unreadable headers") from None
    if value is None or value == "":
        raise WebhookVerificationError("missing_header", name)
    if not isinstance(value, str):
        raise WebhookVerificationError("malformed_header", name)
    return value


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates
        return False
    return True


def _signatures(header: str) -> list[bytes]:
    if len(header) > _MAX_SIGNATURE_HEADER_LEN:
        raise WebhookVerificationError("malformed_header", "signature header too long")
    found: list[bytes] = []
    for part in header.split(" "):
        version, sep, value = part.partition(",")
        if not sep or version != "v1":
            continue  # other schemes (e.g. v1a asymmetric) are allowed and ignored
        try:
            found.append(base64.b64decode(value.encode("ascii"), validate=True))
        except (binascii.Error, ValueError, UnicodeEncodeError):
            continue
    if not found:
        raise WebhookVerificationError("malformed_header", "no v1 signature")
    return found


def verify(
    secrets: Sequence[str],
    headers: Mapping[str, str],
    body: bytes,
    now_s: float,
    tolerance_s: int = DEFAULT_TOLERANCE_S,
) -> VerifiedWebhook:
    """Check a delivery against every secret; the id and timestamp it proves, or raise.

    Raises :class:`WebhookVerificationError` (and nothing else) for any headers and body:
    ``missing_header``, ``malformed_header`` (also: one of the three headers sent more than
    once), ``timestamp_out_of_window`` (older or newer
    than ``tolerance_s`` around ``now_s``) or ``bad_signature``. Signatures are compared in
    constant time. ``secrets`` are configuration: a malformed one raises WebhookSecretError.
    """
    keys = [decode_secret(s) for s in secrets]
    msg_id = _header(headers, ID_HEADER)
    raw_ts = _header(headers, TIMESTAMP_HEADER)
    raw_sig = _header(headers, SIGNATURE_HEADER)
    if len(msg_id) > _MAX_ID_LEN or not msg_id.isprintable() or not _utf8(msg_id):
        raise WebhookVerificationError("malformed_header", ID_HEADER)
    if not (raw_ts.isascii() and raw_ts.isdigit() and len(raw_ts) <= _MAX_TIMESTAMP_DIGITS):
        raise WebhookVerificationError("malformed_header", TIMESTAMP_HEADER)
    timestamp = int(raw_ts)
    if abs(now_s - timestamp) > tolerance_s:
        raise WebhookVerificationError("timestamp_out_of_window", f"{timestamp} vs {now_s:.0f}")
    candidates = _signatures(raw_sig)
    if not isinstance(body, bytes | bytearray | memoryview):
        raise WebhookVerificationError("malformed_header", "body is not bytes")
    matched = False
    for key in keys:
        expected = _digest(key, msg_id, timestamp, bytes(body))
        for candidate in candidates:
            # no early exit: the time taken does not depend on which pair matched
            matched |= hmac.compare_digest(expected, candidate)
    if not matched:
        raise WebhookVerificationError("bad_signature")
    return VerifiedWebhook(id=msg_id, timestamp=timestamp)


@dataclass(frozen=True)
class StandardWebhooks:
    """The Standard Webhooks :class:`WebhookVerifier` for a set of secrets (several while one
    rotates); a malformed secret raises :class:`WebhookSecretError` here, not per delivery."""

    secrets: Sequence[str]
    tolerance_s: int = DEFAULT_TOLERANCE_S

    def __post_init__(self) -> None:
        object.__setattr__(self, "secrets", tuple(self.secrets))  # frozen: no caller's list
        if self.tolerance_s < 0:
            raise ConfigurationError(f"webhook tolerance must be >= 0 s, got {self.tolerance_s}")
        for secret in self.secrets:
            decode_secret(secret)

    def verify(self, headers: Mapping[str, str], body: bytes, now_s: float) -> VerifiedWebhook:
        """See :func:`verify`: the delivery checked against every secret of this verifier."""
        return verify(self.secrets, headers, body, now_s, self.tolerance_s)
