"""Webhook secrets in every form the Standard Webhooks reference accepts, and garbage."""

from __future__ import annotations

import base64

# A 32-byte key: its base64 ends in one "=", so padded and unpadded forms differ.
KEY = bytes(range(32))
PADDED = base64.b64encode(KEY).decode()
ACCEPTED_FORMS = {
    "prefix, padded": "whsec_" + PADDED,
    "prefix, unpadded": "whsec_" + PADDED.rstrip("="),
    "bare, padded": PADDED,
    "bare, unpadded": PADDED.rstrip("="),
}
GARBAGE = {
    "not base64": "whsec_not base64!",
    "url-safe alphabet": "whsec_" + base64.urlsafe_b64encode(b"\xfb\xff" * 16).decode(),
    "impossible length": "whsec_AAAAA",
    "empty key": "whsec_",
    "padding only": "==",
}
