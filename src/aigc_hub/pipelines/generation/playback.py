"""Playback grants: short-lived URLs a player opens (seed 004 §3.3.3-3 note 7, the CDN role).

A proxy MP4, a poster or a source is one object: its grant is a presigned GET, so the bytes
come from the store, never through the API. HLS is many objects (playlists and segments
under one key prefix), which no single presigned URL covers. Its grant is a hub path with a
signed, expiring token, ``/v1/playback/<token>/master.m3u8``: the API serves the playlists
(small text) from there, rewriting every segment URI into a presigned GET of that segment,
and leaves child playlist URIs relative, so they resolve to the same token path. Segment
bytes never pass through the API either.

The token is ``<asset_id>.<exp>.<sig>``, ``sig`` an HMAC-SHA256 over the first two with
``AIGC_HUB_GEN_ASSET_URL_SECRET`` (every API process needs the same one; when empty, a
random secret of this process's).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import posixpath
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import sqlalchemy as sa

from aigc_hub.blobs import keys
from aigc_hub.blobs.base import BlobNotFound
from aigc_hub.core import errors
from aigc_hub.pipelines.generation import assets
from aigc_hub.pipelines.generation.assets import AssetKind, AssetNotFound, AssetStatus
from aigc_hub.pipelines.generation.models import assets as assets_table
from aigc_hub.pipelines.generation.state import Generation
from aigc_hub.store.engine import reader

HLS_TYPE: Final = "application/vnd.apple.mpegurl"
#: Where the API serves HLS playlists (under ``/v1``).
PLAYBACK_PATH: Final = "/v1/playback"
#: Variants a source plays through, best first.
PLAYABLE: Final = ("hls", "proxy")
#: Largest playlist the API serves (a playlist is text: thousands of segments fit).
MAX_PLAYLIST_BYTES: Final = 1 << 20
#: Used when no secret is configured: valid in this process only.
_PROCESS_SECRET: Final = secrets.token_bytes(32)
_URI_ATTRIBUTE = re.compile(r'URI="([^"]*)"')


@dataclass(frozen=True)
class PlaybackGrant:
    """What a player opens, until when, and what it will get."""

    url: str  # HLS: a hub-served playlist URL; others: a presigned object URL
    expires_at: int  # epoch seconds
    content_type: str


class NotPlayable(errors.Conflict):
    """The asset has nothing to play yet (not READY, and no READY playable variant)."""


class PlaybackRefused(errors.PermanentError):
    """A playback token or path the hub does not honour (tampered, expired, outside)."""


def _secret(gen: Generation) -> bytes:
    configured = gen.settings.asset_url_secret.get_secret_value()
    return configured.encode() if configured else _PROCESS_SECRET


def _signature(gen: Generation, asset_id: str, exp: int) -> str:
    mac = hmac.new(_secret(gen), f"playback-v1:{asset_id}:{exp}".encode(), hashlib.sha256)
    return base64.urlsafe_b64encode(mac.digest()[:24]).decode().rstrip("=")


def sign_token(gen: Generation, asset_id: str, exp: int) -> str:
    """The token granting ``asset_id``'s playlists until epoch second ``exp``."""
    return f"{asset_id}.{exp}.{_signature(gen, asset_id, exp)}"


def verify_token(gen: Generation, token: str) -> tuple[str, int]:
    """(asset_id, exp) of a genuine, unexpired token; PlaybackRefused otherwise."""
    asset_id, _, rest = token.partition(".")
    exp_text, _, sig = rest.partition(".")
    if not (asset_id and exp_text.isdigit() and sig):
        raise PlaybackRefused("malformed playback token")
    exp = int(exp_text)
    if not hmac.compare_digest(_signature(gen, asset_id, exp).encode(), sig.encode()):
        raise PlaybackRefused("playback token refused")
    if gen.hub.clock.now_ms() >= exp * 1000:
        raise PlaybackRefused("playback token expired")
    return asset_id, exp


async def _chosen(gen: Generation, tenant_id: str, asset_id: str) -> Mapping[str, Any]:
    """The row to play: a variant as asked, else the source's best READY playable variant,
    else the source itself when READY."""
    async with reader(gen.hub.engine) as conn:
        row = await assets.asset_for_tenant(conn, tenant_id, asset_id)
        if row is None:
            raise AssetNotFound(asset_id)
        if row["kind"] == AssetKind.VARIANT:
            if row["status"] != AssetStatus.READY:
                raise NotPlayable(f"the variant is {row['status']}")
            return row
        variants = (
            await conn.execute(
                sa.select(assets_table).where(
                    assets_table.c.source_asset_id == asset_id,
                    assets_table.c.status == AssetStatus.READY.value,
                    assets_table.c.variant_profile.in_(PLAYABLE),
                )
            )
        ).all()
    by_profile = {v.variant_profile: dict(v._mapping) for v in variants}
    for profile in PLAYABLE:
        if profile in by_profile:
            return by_profile[profile]
    if row["status"] != AssetStatus.READY:
        raise NotPlayable(f"the asset is {row['status']}; nothing to play yet")
    return row


def _is_playlist(key: str) -> bool:
    return key.endswith(".m3u8")


async def playback_grant(
    gen: Generation, *, tenant_id: str, asset_id: str, expires_s: int = 600
) -> PlaybackGrant:
    """A grant for the asset (a source: its best playable variant, HLS first, else proxy, else
    itself) valid ``expires_s`` seconds. AssetNotFound for another tenant's asset,
    NotPlayable when nothing is ready. The HLS URL is a path on the API (``/v1/...``)."""
    row = await _chosen(gen, tenant_id, asset_id)
    exp = gen.hub.clock.now_ms() // 1000 + expires_s
    if _is_playlist(row["object_key"]):
        token = sign_token(gen, row["id"], exp)
        name = posixpath.basename(row["object_key"])
        return PlaybackGrant(f"{PLAYBACK_PATH}/{token}/{name}", exp, HLS_TYPE)
    url = await assets.store_of(gen).presign_get(row["object_key"], expires_s)
    return PlaybackGrant(url, exp, row["content_type"] or assets.STORED_TYPE)


def _inside(prefix: str, base_dir: str, uri: str) -> str:
    """The object key ``uri`` (relative to ``base_dir``) names; PlaybackRefused unless it is
    a plain relative reference that stays under ``prefix``."""
    if not uri or "://" in uri or uri.startswith(("/", "\\")) or "?" in uri or "#" in uri:
        raise PlaybackRefused(f"playlist reference {uri[:80]!r} is not a relative path")
    key = posixpath.normpath(posixpath.join(base_dir, uri))
    if not key.startswith(prefix + "/"):
        raise PlaybackRefused(f"playlist reference {uri[:80]!r} leaves the variant")
    try:
        return keys.check_key(key)
    except ValueError:
        raise PlaybackRefused(f"playlist reference {uri[:80]!r} is no valid key") from None


async def _rewrite(gen: Generation, text: str, prefix: str, key: str, expires_s: int) -> str:
    """The playlist with each segment URI replaced by a presigned GET of its object; child
    playlist URIs are checked and kept relative (the same token path serves them)."""
    store = assets.store_of(gen)
    base_dir = posixpath.dirname(key)

    async def target(uri: str) -> str:
        found = _inside(prefix, base_dir, uri)
        if _is_playlist(found):
            return uri
        return await store.presign_get(found, expires_s)

    lines = []
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped:
            lines.append(line)
        elif stripped.startswith("#"):
            match = _URI_ATTRIBUTE.search(stripped)
            if match:  # EXT-X-MAP, EXT-X-MEDIA, EXT-X-I-FRAME-STREAM-INF …
                uri = await target(match.group(1))
                stripped = f"{stripped[: match.start(1)]}{uri}{stripped[match.end(1) :]}"
            lines.append(stripped)
        else:
            lines.append(await target(stripped))
    return "\n".join(lines) + "\n"


async def playlist(gen: Generation, token: str, path: str) -> str:
    """The playlist ``path`` (relative to the HLS variant's main file) that ``token`` grants,
    rewritten for the player. PlaybackRefused for a bad token or path, AssetNotFound when the
    asset or the playlist is gone."""
    asset_id, exp = verify_token(gen, token)
    async with reader(gen.hub.engine) as conn:
        row = await assets.load(conn, asset_id)
    if row is None or row["status"] != AssetStatus.READY:
        raise AssetNotFound(asset_id)
    prefix = posixpath.dirname(row["object_key"])
    key = _inside(prefix, prefix, path)
    if not _is_playlist(key):
        raise PlaybackRefused("only playlists are served here; segments are presigned")
    chunks, size = [], 0
    try:
        async for chunk in assets.store_of(gen).stream(key, 64 * 1024):
            size += len(chunk)
            if size > MAX_PLAYLIST_BYTES:
                raise PlaybackRefused(f"playlist larger than {MAX_PLAYLIST_BYTES} bytes")
            chunks.append(chunk)
    except BlobNotFound:
        raise AssetNotFound(path) from None
    try:
        text = b"".join(chunks).decode("utf-8")
    except UnicodeDecodeError:
        raise PlaybackRefused("the playlist is not UTF-8 text") from None
    expires_s = max(1, exp - gen.hub.clock.now_ms() // 1000)
    return await _rewrite(gen, text, prefix, key, expires_s)
