"""Playback routes under ``/v1/avcc``: platform nodes report plays, completions and purchases
(``POST /playback``, a node's own key), and admins register and revoke nodes."""

from __future__ import annotations

import dataclasses
from decimal import Decimal
from typing import Annotated, Any

import pydantic
import sqlalchemy as sa
from fastapi import APIRouter, Depends, Path, Query, Request, Response

from aigc_hub.core.errors import InvalidInput, RetryableError
from aigc_hub.interfaces.http import kit
from aigc_hub.interfaces.http.kit import Problem

from . import events, gateway, nodes, playback_views
from .playback import BatchRefused
from .state import STATE, Avcc

playback_router = APIRouter(prefix="/avcc", tags=["avcc playback"])
nodes_router = APIRouter(prefix="/avcc/admin/nodes", tags=["avcc playback"])
watch_router = APIRouter(prefix="/avcc/admin/playback", tags=["avcc playback"])


def _avcc(request: Request) -> Avcc:
    return kit.state_of(request, STATE)


AvccState = Annotated[Avcc, Depends(_avcc)]
_CHALLENGE = {"WWW-Authenticate": "Bearer"}


async def _node(request: Request, avcc: AvccState) -> str:
    """The node whose key the request carries (``Authorization: Bearer avn_…``); else 401."""
    scheme, _, key = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not key.strip().startswith(nodes.KEY_PREFIX):
        raise Problem(
            401,
            "a platform node's key is required: Authorization: Bearer avn_…",
            headers=_CHALLENGE,
        )
    node = await avcc.node_keys.node_of(key.strip())
    if node is None:
        raise Problem(401, "the node key is unknown or revoked", headers=_CHALLENGE)
    return node


NodeCode = Annotated[str, Depends(_node)]


class PlaybackEventIn(pydantic.BaseModel):
    """One event as a node sends it: the seed's envelope without ``source`` (§9.2)."""

    event_id: str = pydantic.Field(examples=["0190a0b4-1c2d-7e3f-8a9b-0c1d2e3f4a5b"])
    timestamp: int = pydantic.Field(description="epoch milliseconds", examples=[1717312200000])
    payload: events.PlaybackPayload


class PlaybackBatchIn(pydantic.BaseModel):
    """A node's batch (documentation only: the gateway checks it itself, see playback.py)."""

    events: list[PlaybackEventIn]


def _inlined(model: type[pydantic.BaseModel]) -> dict[str, Any]:
    """``model``'s JSON schema with its ``$defs`` put in place (an OpenAPI operation cannot
    point into a schema's own ``$defs``)."""
    schema = model.model_json_schema()
    defs = schema.pop("$defs", {})

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref", "")
            if ref.startswith("#/$defs/"):
                return walk(defs[ref.removeprefix("#/$defs/")])
            return {k: walk(v) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    result: dict[str, Any] = walk(schema)
    return result


class PlaybackAccepted(pydantic.BaseModel):
    """The batch was taken whole."""

    accepted: int
    purchases: int


@playback_router.post(
    "/playback",
    status_code=202,
    response_model=PlaybackAccepted,
    summary="Report playback (a platform node)",
    description="A batch of the seed's playback events (§9.2.4), sent with the node's own key. "
    "Taken whole or refused whole: a 422 names each bad event by its index. Every event goes "
    "to `topic.playback.event` (the at-most-once telemetry road, for analytics and anomaly "
    "detection); a purchase is also recorded for settlement, once per `event_id`.",
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": _inlined(PlaybackBatchIn)}},
        }
    },
    responses={
        401: {"description": "no node key, or an unknown or revoked one"},
        413: {"description": "the body is larger than the API takes"},
        415: {"description": "not sent as application/json"},
        422: {"description": "the batch was refused: the bad events in `errors`"},
        503: {"description": "the event log cannot be reached: resend the batch"},
    },
)
async def report_playback(request: Request, node: NodeCode, avcc: AvccState) -> dict[str, int]:
    media = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if media != "application/json":
        raise Problem(
            415, "send the batch as Content-Type: application/json", slug="unsupported-media-type"
        )
    body = await request.body()
    try:
        done = await gateway.ingest(avcc, node, body)
    except BatchRefused as exc:
        raise Problem(
            422, str(exc), slug="playback-refused", errors=exc.errors, invalid_events=exc.total
        ) from None
    except (RetryableError, sa.exc.OperationalError, ConnectionError, TimeoutError) as exc:
        raise Problem(
            503,
            f"the event log cannot be reached ({type(exc).__name__}): resend the batch",
            retry_after_s=1,
        ) from None
    return {"accepted": done.accepted, "purchases": done.purchases}


class NewNode(pydantic.BaseModel):
    """A platform node to register."""

    model_config = pydantic.ConfigDict(extra="forbid")

    code: str = pydantic.Field(pattern=r"^[0-9]{2,8}$", examples=["8361"])
    name: str = pydantic.Field(min_length=1, max_length=200, examples=["video site A"])


def _node_answer(node: nodes.PlatformNode) -> dict[str, Any]:
    return {
        "code": node.code,
        "name": node.name,
        "created_at": node.created_at,
        "revoked_at": node.revoked_at,
    }


@nodes_router.post(
    "",
    status_code=201,
    summary="Register a platform node (admin)",
    description="Answers the node's key once: keep it, the hub stores only its hash.",
    responses={409: {"description": "a node with this code exists"}},
)
async def add_node(body: NewNode, who: kit.AdminPrincipal, avcc: AvccState) -> dict[str, Any]:
    try:
        node, key = await nodes.add_node(avcc.hub.engine, body.code, body.name)
    except nodes.NodeExists as exc:
        raise Problem(409, str(exc), slug="node-exists") from None
    except InvalidInput as exc:
        raise Problem(
            422, str(exc), errors=[{"field": f"body.{exc.field}", "message": str(exc)}]
        ) from None
    return {**_node_answer(node), "key": key}


@nodes_router.get("", summary="Platform nodes (admin)")
async def list_nodes(who: kit.AdminPrincipal, avcc: AvccState) -> dict[str, Any]:
    return {"nodes": [_node_answer(n) for n in await nodes.list_nodes(avcc.hub.engine)]}


@nodes_router.delete(
    "/{code}",
    status_code=204,
    summary="Revoke a platform node's key (admin)",
    description=f"Its reports are refused within {nodes.CACHE_S:g} s in every process.",
)
async def revoke_node(
    code: Annotated[str, Path(pattern=r"^[0-9]{2,8}$")], who: kit.AdminPrincipal, avcc: AvccState
) -> Response:
    if not await nodes.revoke_node(avcc.hub.engine, code):
        raise kit.not_found("node")
    return Response(status_code=204)


def _plain(value: Any) -> Any:
    """A view's dataclasses as JSON values (money as its decimal text)."""
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


@watch_router.get(
    "",
    summary="Playback at a glance (admin)",
    description="The analytics sink's lag beside its insert rate, the stored totals, plays per "
    "code per bucket over the window, the top codes and the latest anomalies (what the "
    "console's Playback page shows). `store_note` says why stored figures are missing.",
)
async def playback_summary(
    who: kit.AdminPrincipal,
    avcc: AvccState,
    window_s: Annotated[int, Query(ge=10, le=86_400)] = 900,
    bucket_s: Annotated[int, Query(ge=1, le=3600)] = 10,
) -> dict[str, Any]:
    view = await playback_views.playback_view(avcc, window_s=window_s, bucket_s=bucket_s)
    result: dict[str, Any] = _plain(dataclasses.asdict(view))
    return result


@watch_router.get("/anomalies", summary="Anomalies the playback detector found (admin)")
async def list_anomalies(
    who: kit.AdminPrincipal,
    avcc: AvccState,
    kind: Annotated[str | None, Query(pattern=r"^[a-z_]{1,30}$")] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
) -> dict[str, Any]:
    found = await playback_views.recent_anomalies(avcc, limit, kind)
    return {"anomalies": [dataclasses.asdict(a) for a in found]}
