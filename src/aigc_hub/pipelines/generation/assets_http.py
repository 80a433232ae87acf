"""Asset routes, mounted under ``/v1`` (seed 004 §3.6.1): direct upload in presigned parts,
read, variants, playback grants; and ``GET /v1/playback/{token}/{path}``, the HLS playlists
a playback grant names (the token is the capability: players send no API key).

URLs that the store signs as paths of the hub itself (the local engine's ``/blobs/...``)
are answered absolute, on the origin the request came to.
"""

from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import urljoin

import pydantic
from fastapi import APIRouter, Depends, Request, Response

from aigc_hub.core import errors
from aigc_hub.interfaces.http import kit
from aigc_hub.interfaces.http.kit import Problem
from aigc_hub.pipelines.generation import assets, playback
from aigc_hub.pipelines.generation.state import STATE, Generation

router = APIRouter(prefix="/assets", tags=["assets"])
playback_router = APIRouter(prefix="/playback", tags=["assets"])


async def _generation(request: Request) -> Generation:
    return kit.state_of(request, STATE)


GenerationState = Annotated[Generation, Depends(_generation)]

_COMMON: dict[int | str, dict[str, Any]] = {
    401: {"description": "missing or unknown API key"},
    404: {"description": "no such asset (also for another tenant's asset ids)"},
    429: {"description": "rate limited (Retry-After)"},
    503: {"description": "the hub was deployed without a blob store"},
}


class PlaybackAnswer(pydantic.BaseModel):
    """A short-lived URL a player opens (HLS playlist on the hub, or a presigned object)."""

    url: str
    expires_at: int = pydantic.Field(description="epoch seconds")
    content_type: str


def _absolute(request: Request, url: str) -> str:
    return urljoin(str(request.base_url), url)


def _problem(exc: errors.HubError) -> Problem:
    """The problem answering an asset service error."""
    if isinstance(exc, assets.AssetNotFound):
        return kit.not_found("asset")
    if isinstance(exc, assets.AssetLimitExceeded):
        status, slug = {
            "size": (413, "asset-too-large"),
            "count": (409, "asset-count-limit"),
            "total_bytes": (429, "asset-storage-quota"),
        }[exc.limit]
        return Problem(status, str(exc), slug=slug, limit=exc.allowed, requested=exc.asked)
    if isinstance(exc, assets.UploadNotOpen):
        return Problem(409, str(exc), slug="upload-closed", status_now=exc.status)
    if isinstance(exc, playback.NotPlayable):
        return Problem(409, str(exc), slug="not-playable")
    if isinstance(exc, assets.NoBlobStore):  # the deployment's fault, not the request's
        return Problem(503, str(exc), slug="asset-storage-unavailable")
    if isinstance(exc, assets.PartsRejected):
        return Problem(400, str(exc), slug="parts-rejected")
    if isinstance(exc, errors.InvalidInput):
        field = f"body.{exc.field}"
        return Problem(
            422, f"invalid fields: {field}", errors=[{"field": field, "message": str(exc)}]
        )
    raise exc


_SERVICE_ERRORS = (
    assets.NoBlobStore,
    assets.AssetNotFound,
    assets.AssetLimitExceeded,
    assets.UploadNotOpen,
    playback.NotPlayable,
    errors.InvalidInput,
)


@router.post(
    "/uploads",
    status_code=201,
    response_model=assets.UploadStarted,
    summary="Start a direct upload",
    description="Creates an UPLOADING asset and answers presigned URLs, one per part: PUT "
    "each part's bytes to its URL with its headers and keep the ETag answered, then "
    "complete. The declared content type is not trusted: the bytes decide.",
    dependencies=[Depends(kit.admit("generation"))],
    responses={
        **_COMMON,
        409: {"description": "the tenant holds as many assets as allowed"},
        413: {"description": "larger than one asset may be"},
        422: {"description": "invalid field (named in `errors`)"},
        429: {"description": "rate limited, or the tenant's asset bytes would pass its quota"},
    },
)
async def start_upload(
    body: assets.StartUpload, request: Request, who: kit.LimitedTenant, gen: GenerationState
) -> dict[str, Any]:
    assert who.tenant_id is not None
    try:
        started = await assets.start_upload(gen, tenant_id=who.tenant_id, body=body)
    except _SERVICE_ERRORS as exc:
        raise _problem(exc) from None
    for part in started["upload"]["parts"]:
        part["url"] = _absolute(request, part["url"])
    return started


@router.post(
    "/{asset_id}/parts",
    response_model=assets.UploadPlan,
    summary="Fresh URLs for some parts",
    description="For parts to send (again), e.g. after a failure once the first URLs expired. "
    "`part_size` is 0 in the answer: keep the upload's.",
    responses={**_COMMON, 409: {"description": "the upload is closed"}},
)
async def part_urls(
    asset_id: str,
    body: assets.PartsRequest,
    request: Request,
    who: kit.LimitedTenant,
    gen: GenerationState,
) -> dict[str, Any]:
    assert who.tenant_id is not None
    try:
        plan = await assets.part_urls(
            gen, tenant_id=who.tenant_id, asset_id=asset_id, part_nos=body.part_nos
        )
    except _SERVICE_ERRORS as exc:
        raise _problem(exc) from None
    for part in plan["parts"]:
        part["url"] = _absolute(request, part["url"])
    return plan


@router.post(
    "/{asset_id}/complete",
    response_model=assets.AssetView,
    summary="Complete an upload",
    description="Joins the parts and checks size, checksum (where the store knows it) and the "
    "magic number: the asset is then PROCESSING (probed asynchronously, then READY or "
    "REJECTED) or REJECTED with `status_reason`. Repeatable.",
    responses={
        **_COMMON,
        400: {"description": "the store refused the part list; re-send parts, complete again"},
        409: {"description": "the upload is closed"},
    },
)
async def complete_upload(
    asset_id: str, body: assets.CompleteUpload, who: kit.LimitedTenant, gen: GenerationState
) -> dict[str, Any]:
    assert who.tenant_id is not None
    try:
        return await assets.complete_upload(
            gen, tenant_id=who.tenant_id, asset_id=asset_id, parts=body.parts
        )
    except (*_SERVICE_ERRORS, assets.PartsRejected) as exc:
        raise _problem(exc) from None


@router.get(
    "/{asset_id}", response_model=assets.AssetView, summary="Read an asset", responses=_COMMON
)
async def get_asset(asset_id: str, who: kit.LimitedTenant, gen: GenerationState) -> dict[str, Any]:
    assert who.tenant_id is not None
    try:
        return await assets.get_asset(gen, tenant_id=who.tenant_id, asset_id=asset_id)
    except assets.AssetNotFound as exc:
        raise _problem(exc) from None


@router.get(
    "/{asset_id}/variants",
    response_model=assets.AssetList,
    summary="An asset's variants (proxy, HLS, poster…)",
    responses=_COMMON,
)
async def list_variants(
    asset_id: str, who: kit.LimitedTenant, gen: GenerationState
) -> dict[str, Any]:
    assert who.tenant_id is not None
    try:
        items = await assets.list_variants(gen, tenant_id=who.tenant_id, asset_id=asset_id)
    except assets.AssetNotFound as exc:
        raise _problem(exc) from None
    return {"items": items}


@router.post(
    "/{asset_id}/playback",
    response_model=PlaybackAnswer,
    summary="A short-lived URL to play an asset",
    description="A source plays through its best READY variant (HLS, else the proxy MP4), "
    "else itself when READY. HLS answers a playlist served by the hub (segments are "
    "presigned store URLs); anything else a presigned URL of the object.",
    responses={**_COMMON, 409: {"description": "nothing playable yet"}},
)
async def grant_playback(
    asset_id: str, request: Request, who: kit.LimitedTenant, gen: GenerationState
) -> dict[str, Any]:
    assert who.tenant_id is not None
    try:
        grant = await playback.playback_grant(
            gen,
            tenant_id=who.tenant_id,
            asset_id=asset_id,
            expires_s=gen.settings.asset_playback_s,
        )
    except (assets.AssetNotFound, playback.NotPlayable) as exc:
        raise _problem(exc) from None
    return {
        "url": _absolute(request, grant.url),
        "expires_at": grant.expires_at,
        "content_type": grant.content_type,
    }


@playback_router.get(
    "/{token}/{path:path}",
    summary="An HLS playlist of a playback grant",
    description="No API key: the token in the path is the grant. Segment URIs are rewritten "
    "to presigned URLs valid as long as the token.",
    responses={
        200: {"content": {playback.HLS_TYPE: {}}, "description": "the playlist"},
        403: {"description": "token tampered or expired, or a path outside the variant"},
        404: {"description": "no such playlist"},
    },
)
async def serve_playlist(token: str, path: str, gen: GenerationState) -> Response:
    try:
        text = await playback.playlist(gen, token, path)
    except playback.PlaybackRefused as exc:
        raise Problem(403, str(exc), slug="playback-refused") from None
    except assets.AssetNotFound:
        raise kit.not_found("playlist") from None
    # private: the playlist holds presigned URLs; short: they expire with the token
    return Response(
        text,
        media_type=playback.HLS_TYPE,
        headers={"Cache-Control": "private, max-age=5"},
    )
