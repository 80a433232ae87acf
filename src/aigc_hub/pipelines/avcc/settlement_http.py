"""settlement-svc's routes: a tenant's statement and its lines' proofs under
``/v1/avcc/settlements``, the periods and their reconciliation for admins under
``/v1/avcc/admin/settlement-periods``. A tenant sees only its own lines: another tenant's
line answers exactly like a missing one."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Request

from aigc_hub.interfaces.http import kit
from aigc_hub.interfaces.http.kit import Problem

from . import settlement_services as services
from .settlement import InvalidPeriod
from .state import STATE, Avcc


def _avcc(request: Request) -> Avcc:
    return kit.state_of(request, STATE)


AvccState = Annotated[Avcc, Depends(_avcc)]
#: A period id, checked here so a malformed one is a 422, never a query.
PeriodId = Annotated[str, Path(pattern=r"^[0-9]{8}T[0-9]{4}Z$", examples=["20261201T0000Z"])]
LineId = Annotated[int, Path(ge=1, le=2**62)]

router = APIRouter(prefix="/avcc/settlements", tags=["avcc settlement"])
admin_router = APIRouter(prefix="/avcc/admin/settlement-periods", tags=["avcc settlement"])


def _bad_period(exc: InvalidPeriod) -> Problem:
    return Problem(422, str(exc), errors=[{"field": "path.period", "message": str(exc)}])


@router.get(
    "/{period}",
    summary="Your settlement statement for a period",
    description="Your lines of the period (amounts in fen), their count and total, and the "
    "period's status and chain fields (`lines_root`, `tx_hash`… once sealed and anchored).",
)
async def statement(period: PeriodId, who: kit.LimitedTenant, avcc: AvccState) -> dict[str, Any]:
    assert who.tenant_id is not None
    try:
        return await services.tenant_statement(avcc.hub.engine, who.tenant_id, period)
    except InvalidPeriod as exc:
        raise _bad_period(exc) from None
    except services.PeriodNotFound:
        raise kit.not_found("settlement period") from None


@router.get(
    "/{period}/lines/{line_id}/proof",
    summary="A line's inclusion proof",
    description="The line's canonical text, its audit path to the period's `lines_root`, the "
    "statement notarized and the chain's receipt: check it offline with "
    "`aigc-hub avcc settlement verify-line`.",
    responses={409: {"description": "the period is still open (no batch yet)"}},
)
async def line_proof(
    period: PeriodId, line_id: LineId, who: kit.LimitedTenant, avcc: AvccState
) -> dict[str, Any]:
    assert who.tenant_id is not None
    try:
        return await services.line_proof(avcc.hub.engine, period, line_id, tenant_id=who.tenant_id)
    except InvalidPeriod as exc:
        raise _bad_period(exc) from None
    except services.PeriodNotFound:
        raise kit.not_found("settlement period") from None
    except services.LineNotFound:
        raise kit.not_found("settlement line") from None
    except services.NotSealed as exc:
        raise Problem(409, str(exc), slug="period-open") from None


@admin_router.get("", summary="Settlement periods, newest first (admin)")
async def periods(
    who: kit.AdminPrincipal,
    avcc: AvccState,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> dict[str, Any]:
    return {"items": await services.list_periods(avcc.hub.engine, limit=limit)}


@admin_router.get("/{period}/reconciliation", summary="A period against its ledger (admin)")
async def reconciliation(
    period: PeriodId, who: kit.AdminPrincipal, avcc: AvccState
) -> dict[str, Any]:
    try:
        found = await services.reconcile(avcc.hub.engine, period)
    except InvalidPeriod as exc:
        raise _bad_period(exc) from None
    except services.PeriodNotFound:
        raise kit.not_found("settlement period") from None
    return {
        "period": found.period,
        "status": found.status,
        "ok": found.ok,
        "accounts": found.accounts,
        "lines_total_fen": found.lines_total_fen,
        "line_count": found.line_count,
        "purchases": found.purchases,
        "problems": found.problems,
    }
