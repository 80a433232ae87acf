"""Playing a published video: its DASH manifest and segments through one signed grant.

A DASH manifest names its segments by a template relative to itself, which no single
presigned URL covers. So the API hands out ``/v1/vistack/play/<token>/manifest.mpd``, the
token a grant on the run's ``dash/{videoID}/<run>/`` prefix (``blobs/grants.py``): the
manifest (small text) is served from there, and every other path under the token answers a
redirect to a presigned GET of that object, so segment bytes come from the store, never
through the API. The cover is one object: a presigned URL.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from typing import Any, Final

from aigc_hub.blobs.grants import PrefixGrants

from .state import Vistack

#: Where the API serves manifests and redirects segments (under ``/v1``).
PLAY_PATH: Final = "/v1/vistack/play"
MPD_TYPE: Final = "application/dash+xml"
#: Largest manifest the API serves.
MAX_MANIFEST_BYTES: Final = 1 << 20


def grants(vs: Vistack) -> PrefixGrants:
    """The signer of this hub's playback grants (``AIGC_HUB_VISTACK_URL_SECRET``)."""
    return PrefixGrants(vs.settings.url_secret.get_secret_value())


async def urls(vs: Vistack, row: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """The manifest URL (hub path) and the cover URL (presigned) of a published video."""
    manifest_key, cover_key = row.get("manifest_key"), row.get("cover_key")
    ttl = vs.settings.manifest_url_ttl_s
    manifest_url = None
    if manifest_key:
        directory, name = posixpath.split(str(manifest_key))
        exp = vs.hub.clock.now_ms() // 1000 + ttl
        manifest_url = f"{PLAY_PATH}/{grants(vs).sign(directory + '/', exp)}/{name}"
    cover_url = await vs.store.presign_get(str(cover_key), ttl) if cover_key else None
    return manifest_url, cover_url
