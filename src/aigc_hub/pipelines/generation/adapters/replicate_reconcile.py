"""Finding a Replicate prediction by our request key (reconciling a lost submit).

Replicate cannot look a prediction up by a key of ours, so the adapter puts the key in the
``webhook`` URL it sends and this module scans ``GET /v1/predictions`` (newest first,
cursor-paginated) for it. List items may omit ``webhook``; those are fetched one by one.

The answer is honest about what a bounded scan proves:

* a prediction whose webhook carries the key → that prediction;
* NOT_FOUND only when the scan was *complete*: it reached the end of the list, or a
  prediction created before the window (``window_s`` ago; keep it longer than the hub's
  SUBMIT_UNKNOWN give-up) with every newer prediction checked;
* otherwise (page or candidate budget spent, a ``next`` link off the API origin) UNKNOWN:
  the hub keeps waiting and asks again later.

A submit made without a callback URL carries no key and can never be found: the hub always
sends one, so predictions without a webhook are not ours.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

from aigc_hub.pipelines.generation.adapters import hosted
from aigc_hub.pipelines.generation.adapters.base import NormalizedStatus

MAX_PAGES = 5
MAX_DETAILS = 50


def key_of(webhook: object) -> str | None:
    """The request key in a webhook URL we set, else None."""
    if not isinstance(webhook, str):
        return None
    keys = parse_qs(urlsplit(webhook).query).get("request_key")
    return keys[0] if keys else None


async def find(
    http: hosted.VendorHttp,
    request_key: str,
    *,
    window_s: float,
    timeout_s: float,
    now_s: float | None = None,
) -> Mapping[str, Any] | NormalizedStatus:
    """The prediction submitted under ``request_key``, or NOT_FOUND / UNKNOWN (see module)."""
    since_ms = int(((now_s if now_s is not None else time.time()) - window_s) * 1000)
    path: str | None = "/v1/predictions"
    details = 0
    for _ in range(MAX_PAGES):
        if path is None:
            return NormalizedStatus.NOT_FOUND  # the whole list was read
        page, _ = await http.call("query", "GET", path, timeout_s)
        items = page.get("results") if isinstance(page, dict) else None
        if not isinstance(items, list):
            raise hosted.malformed("query", ValueError("no results list"))
        for item in items:
            created = hosted.stamp_ms(item.get("created_at"))
            if created is not None and created < since_ms:
                return NormalizedStatus.NOT_FOUND  # older than any submit we still care about
            if "webhook" not in item:
                if details >= MAX_DETAILS:
                    return NormalizedStatus.UNKNOWN
                details += 1
                item, _ = await http.call(
                    "query", "GET", f"/v1/predictions/{quote(str(item['id']), safe='')}", timeout_s
                )
            if key_of(item.get("webhook")) == request_key:
                return dict(item)
        path = _next_path(page.get("next"), http.base_url)
        if path == "":
            return NormalizedStatus.UNKNOWN  # a cursor we will not follow
    return NormalizedStatus.UNKNOWN if path is not None else NormalizedStatus.NOT_FOUND


def _next_path(link: object, base_url: str) -> str | None:
    """The next page's path; None at the end; "" for a link off the API origin (refused)."""
    if not link:
        return None
    if not isinstance(link, str) or not link.startswith(base_url + "/"):
        return ""
    return link[len(base_url) :]
