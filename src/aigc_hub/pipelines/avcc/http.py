"""avcc's routes under ``/v1/avcc``: works, applications, the public code answer, the log's
public key, and the human review queue (admin keys: the reviewers)."""

from __future__ import annotations

from typing import Annotated, Any

import pydantic
from fastapi import APIRouter, Depends, Path, Query, Request
from fastapi.responses import PlainTextResponse

from aigc_hub.blobs.keys import object_key, safe_filename
from aigc_hub.core import errors, ids
from aigc_hub.interfaces.http import kit
from aigc_hub.interfaces.http.kit import Idempotency, IdempotentRoute, Problem
from aigc_hub.tenancy import Principal

from . import human, services
from .state import STATE, Avcc

#: Largest work one signed upload takes (S3's single PUT allows 5 GiB).
UPLOAD_MAX_BYTES = 5 * 1024**3
#: How long a signed upload stays usable.
UPLOAD_URL_S = 3600


def _avcc(request: Request) -> Avcc:
    return kit.state_of(request, STATE)


AvccState = Annotated[Avcc, Depends(_avcc)]
RecordId = Annotated[int, Path(ge=1, le=2**62)]

router = APIRouter(prefix="/avcc", tags=["avcc"], route_class=IdempotentRoute)
public_router = APIRouter(prefix="/avcc", tags=["avcc"])
review_router = APIRouter(prefix="/avcc/reviews", tags=["avcc"])


def _refused(exc: errors.InvalidInput) -> Problem:
    return Problem(
        422,
        f"invalid fields: body.{exc.field}",
        errors=[{"field": f"body.{exc.field}", "message": str(exc)}],
    )


class NewWork(pydantic.BaseModel):
    """A work to put into the hub's store before applying for its code."""

    model_config = pydantic.ConfigDict(extra="forbid")

    filename: str = pydantic.Field("work", min_length=1, max_length=200)
    content_type: str = pydantic.Field(min_length=3, max_length=100, examples=["image/png"])
    size_bytes: int = pydantic.Field(ge=1, le=UPLOAD_MAX_BYTES)
    content_hash: str = pydantic.Field(pattern=r"^sha256:[0-9a-f]{64}$")


@router.post(
    "/works",
    status_code=201,
    summary="Where to upload a work",
    description="Answers the work's `content_url` and a signed upload: PUT the bytes to "
    "`upload.url` with exactly `upload.headers`; the store refuses any other size or hash. "
    "The bytes never pass through the API. Then apply with that `content_url`.",
)
async def upload_work(body: NewWork, who: kit.LimitedTenant, avcc: AvccState) -> dict[str, Any]:
    assert who.tenant_id is not None
    filename = safe_filename(body.filename, default="work")
    key = object_key(who.tenant_id, "avcc-work", ids.new_id_str(), filename)
    put = await avcc.store.presign_put(
        key,
        UPLOAD_URL_S,
        body.content_type,
        size=body.size_bytes,
        sha256=body.content_hash.removeprefix("sha256:"),
    )
    return {
        "content_url": f"blob:{key}",
        "upload": {"url": put.url, "headers": dict(put.headers), "expires_at": put.expires_at},
    }


@router.post(
    "/applications",
    status_code=201,
    summary="Apply for a code",
    description="Prechecks the work (yours, present, its bytes hash to `content_hash`, the "
    "AI tool declared) and records the application with `topic.avcc.apply.created`, in one "
    "transaction. Requires Idempotency-Key.",
    dependencies=[Depends(kit.admit("avcc"))],
    responses={
        409: {"description": "this content already has a live application of yours"},
        422: {"description": "precheck refused: the field and the reason in `errors`"},
        429: {"description": "rate limited, or the review is behind (Retry-After)"},
    },
)
async def apply(
    body: services.Apply, who: kit.LimitedTenant, idem: Idempotency, avcc: AvccState
) -> dict[str, Any]:
    assert who.tenant_id is not None
    try:
        return await services.apply(
            avcc, tenant_id=who.tenant_id, body=body, idempotency_key=idem.key
        )
    except services.ContentRefused as exc:
        raise _refused(exc) from None
    except services.AlreadyApplied as exc:
        raise Problem(409, str(exc), slug="already-applied", avcc_record_id=exc.record_id) from None


@router.get("/applications/{record_id}", summary="An application of yours")
async def get_application(
    record_id: RecordId, who: kit.LimitedTenant, avcc: AvccState
) -> dict[str, Any]:
    assert who.tenant_id is not None
    try:
        return await services.get_record(avcc, tenant_id=who.tenant_id, record_id=record_id)
    except services.RecordNotFound:
        raise kit.not_found("application") from None


@router.get(
    "/applications/{record_id}/signed-work",
    summary="Where to download your coded work with its C2PA manifest",
    description="A URL (valid an hour) of the work signed with its code, level and proof; "
    "404 until the code is embedded (images and MP4s only).",
)
async def signed_work(
    record_id: RecordId, who: kit.LimitedTenant, avcc: AvccState
) -> dict[str, Any]:
    assert who.tenant_id is not None
    key = await services.signed_copy_key(avcc, tenant_id=who.tenant_id, record_id=record_id)
    if key is None:
        raise kit.not_found("signed work")
    return {"url": await avcc.store.presign_get(key, 3600), "expires_s": 3600}


@router.get("/applications", summary="Your applications, newest first")
async def list_applications(
    who: kit.LimitedTenant,
    avcc: AvccState,
    status: Annotated[str | None, Query(max_length=20)] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    after: Annotated[int | None, Query(ge=1, description="cursor: the last id seen")] = None,
) -> dict[str, Any]:
    assert who.tenant_id is not None
    items = await services.list_records(
        avcc, tenant_id=who.tenant_id, status=status, limit=limit, after_id=after
    )
    return {"items": items, "next": items[-1]["avcc_record_id"] if len(items) == limit else None}


@public_router.get(
    "/codes/{code:path}",
    summary="Verify a code (public)",
    description="The work's level, issue time, content hash and chain proof; nothing private.",
)
async def verify_code(code: Annotated[str, Path(max_length=64)], avcc: AvccState) -> dict[str, Any]:
    try:
        return await services.verify_code(avcc, code)
    except errors.InvalidInput as exc:
        raise Problem(422, str(exc), slug="invalid-code") from None
    except services.CodeNotFound:
        raise kit.not_found("code") from None


@public_router.get(
    "/log/public-key",
    summary="The verifiable log's public key (PEM)",
    response_class=PlainTextResponse,
)
async def log_public_key(avcc: AvccState) -> PlainTextResponse:
    return PlainTextResponse(
        avcc.chain.public_key_pem().decode(), media_type="application/x-pem-file"
    )


@public_router.get(
    "/c2pa/trust-anchor",
    summary="The certificate the C2PA manifests chain to (PEM)",
    description="Give it to a C2PA validator as a trust anchor to check a signed work.",
    response_class=PlainTextResponse,
)
async def c2pa_trust_anchor(avcc: AvccState) -> PlainTextResponse:
    signer = await avcc.c2pa_signer()
    return PlainTextResponse(signer.anchor_pem().decode(), media_type="application/x-pem-file")


@review_router.get("", summary="The human review queue (admin)")
async def review_queue(
    who: kit.AdminPrincipal,
    avcc: AvccState,
    open_only: bool = True,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
) -> dict[str, Any]:
    return {"items": await human.list_queue(avcc, open_only=open_only, limit=limit)}


@review_router.post("/{record_id}/claim", summary="Claim a work to review (admin)")
async def claim_review(
    record_id: RecordId, who: kit.AdminPrincipal, avcc: AvccState
) -> dict[str, Any]:
    try:
        return await human.claim(avcc, record_id=record_id, reviewer=_reviewer(who))
    except human.QueueEntryNotFound:
        raise kit.not_found("work in the review queue") from None
    except human.ClaimRefused as exc:
        raise Problem(409, str(exc), slug="claim-refused") from None


@review_router.post("/{record_id}/decision", summary="Decide a claimed work (admin)")
async def decide_review(
    record_id: RecordId, body: human.HumanDecision, who: kit.AdminPrincipal, avcc: AvccState
) -> dict[str, Any]:
    try:
        return await human.decide(avcc, record_id=record_id, reviewer=_reviewer(who), body=body)
    except human.QueueEntryNotFound:
        raise kit.not_found("work in the review queue") from None
    except human.ClaimRefused as exc:
        raise Problem(409, str(exc), slug="claim-refused") from None
    except errors.InvalidInput as exc:
        raise _refused(exc) from None


def _reviewer(who: Principal) -> str:
    return f"admin:{who.key_id}"
