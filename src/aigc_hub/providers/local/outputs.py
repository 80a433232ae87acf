"""Output files behind HMAC-signed, expiring URLs, and the job JSON clients see.

A URL is ``<base_url>/outputs/<job_id>.mp4?expires=<epoch s>&sig=<hex>`` with ``sig`` an
HMAC-SHA256 over the job id and expiry. URLs are minted each time a job is shown, so a
client holding an expired one queries the job again for a fresh one (as with real vendors).
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Any
from urllib.parse import urlencode

from aigc_hub.core import errors
from aigc_hub.providers.local.jobs import Job, iso, now_ms

CONTENT_TYPE = "video/mp4"


class OutputRefused(errors.HubError):
    """A signed output URL that must not be served; ``status`` is 403 or 410."""

    def __init__(self, status: int, code: str) -> None:
        super().__init__(code)
        self.status = status
        self.code = code


class OutputSigner:
    """Mints and checks output URLs for one server (its key lives as long as the process)."""

    def __init__(self, key: bytes, base_url: str, ttl_s: int = 600) -> None:
        self._key = key
        self.base_url = base_url.rstrip("/")
        self.ttl_s = ttl_s

    def _sig(self, job_id: str, expires: int) -> str:
        message = f"aigc-hub-local-output-v1|{job_id}|{expires}".encode()
        return hmac.new(self._key, message, hashlib.sha256).hexdigest()

    def url(self, job_id: str, *, expired: bool = False) -> tuple[str, int]:
        """``(url, expires_at_ms)``; ``expired`` mints one that is already past (a fault)."""
        now_s = now_ms() // 1000
        expires = now_s - 1 if expired else now_s + self.ttl_s
        query = urlencode({"expires": expires, "sig": self._sig(job_id, expires)})
        return f"{self.base_url}/outputs/{job_id}.mp4?{query}", expires * 1000

    def check(self, job_id: str, expires: str, sig: str) -> None:
        """Raise :class:`OutputRefused` (403 forged, 410 expired) unless the URL is good."""
        if not (expires.isascii() and expires.isdigit() and len(expires) <= 12):
            raise OutputRefused(403, "bad_signature")
        expected = self._sig(job_id, int(expires))
        if not hmac.compare_digest(expected.encode(), sig.encode("utf-8", "replace")):
            raise OutputRefused(403, "bad_signature")
        if now_ms() >= int(expires) * 1000:
            raise OutputRefused(410, "output_expired")


def job_json(job: Job, signer: OutputSigner, *, expire_outputs: bool = False) -> dict[str, Any]:
    """The job as the API, the list route and webhooks show it."""
    spec = job.spec
    body: dict[str, Any] = {
        "id": job.id,
        "request_key": spec.request_key,
        "model": spec.model,
        "mode": spec.mode,
        "prompt": spec.prompt,
        "duration_s": spec.duration_s,
        "width": spec.width,
        "height": spec.height,
        "callback_url": spec.callback_url,
        "status": job.status,
        "progress": job.progress,
        "sequence": job.sequence,
        "created_at": iso(job.created_at_ms),
        "updated_at": iso(job.updated_at_ms),
        "output": None,
        "cost": job.cost,
        "error": job.error,
    }
    if job.status == "succeeded" and job.output_path is not None:
        url, expires_at_ms = signer.url(job.id, expired=expire_outputs)
        body["output"] = {
            "url": url,
            "expires_at": iso(expires_at_ms),
            "content_type": CONTENT_TYPE,
            "size_bytes": job.output_size,
        }
    return body
