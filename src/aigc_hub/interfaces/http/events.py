"""``GET /v1/events``: the tenant's notifications as server-sent events, fed from the broker.

Each API process tails ``notification.event`` (:class:`NotificationFeed`) and streams the
caller's tenant's notifications as they arrive, i.e. after their facts committed and the
relay published them. Events:

* ``event: notification``, ``id: <feed>-<seq>``, ``data:`` the notification as JSON;
* ``event: reset``: notifications may have been missed (``Last-Event-ID`` unknown, from
  another process, or out of the resume window; or this client fell behind): re-read the
  snapshots of what you watch; its ``id`` is where the stream goes on from;
* ``: heartbeat`` comments while idle, and one ``: ready`` comment once subscribed.

Ids resume only on the process that issued them (a sticky connection); elsewhere the client
gets ``reset``. A stream ends after ``max_seconds`` (bounded by the server's limit); clients
reconnect with ``Last-Event-ID``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Request
from fastapi.sse import EventSourceResponse, ServerSentEvent

from aigc_hub.interfaces.http.admin import ProblemDetails
from aigc_hub.interfaces.http.auth import hub_of
from aigc_hub.interfaces.http.limits import LimitedTenant
from aigc_hub.interfaces.http.problems import MEDIA_TYPE
from aigc_hub.reliability.notification_feed import FeedItem, Gap

#: What a client is told to do on ``reset``.
RESET_ADVICE = "notifications may have been missed: re-read the snapshots of what you watch"
#: Reconnection delay suggested to ``EventSource`` clients, milliseconds.
RETRY_MS = 2_000

router = APIRouter(tags=["events"])


def _problem(description: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {MEDIA_TYPE: {"schema": ProblemDetails.model_json_schema()}},
    }


_DESCRIPTION = """\
Server-sent events (`text/event-stream`) of the caller's tenant's notifications: task status
changes and progress, published only after their facts committed. `event: notification`
carries the notification as JSON with an `id:`; `event: reset` means notifications may have
been missed, re-read the snapshots; `: heartbeat` comments keep idle connections open.
Resume with the `Last-Event-ID` header (or `last_event_id`): ids resume on the process that
issued them, within its window (default 10 000 notifications or 10 minutes); else `reset`.
The stream ends after `max_seconds` (at most the server's limit, default one hour)."""


@router.get(
    "/events",
    response_class=EventSourceResponse,
    summary="Stream the tenant's notifications (SSE)",
    description=_DESCRIPTION,
    responses={
        200: {"description": "An event stream (text/event-stream)"},
        401: _problem("No, an unknown or a revoked API key"),
        403: _problem("The key is not a tenant key"),
        422: _problem("Invalid parameters"),
        429: _problem("Too many requests for this tenant (see Retry-After)"),
    },
)
async def events(
    request: Request,
    who: LimitedTenant,
    subject_id: Annotated[
        list[str] | None,
        Query(description="Only these subjects (repeatable)", max_length=100),
    ] = None,
    last_event_id: Annotated[
        str | None,
        Query(description="Resume after this id (for clients that cannot set headers)"),
    ] = None,
    last_event_id_header: Annotated[
        str | None, Header(alias="Last-Event-ID", description="Resume after this id")
    ] = None,
    max_seconds: Annotated[
        float | None,
        Query(gt=0, le=86_400, description="End the stream after this many seconds"),
    ] = None,
) -> AsyncIterator[ServerSentEvent]:
    """The tenant's notifications as SSE; see the module docstring for the event format."""
    feed = hub_of(request).notification_feed
    settings = feed.settings
    await feed.start()
    assert who.tenant_id is not None  # a tenant principal always has one
    resume = last_event_id_header or last_event_id
    sub = feed.subscribe(who.tenant_id, subject_id, resume)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + min(max_seconds or settings.max_stream_s, settings.max_stream_s)
    try:
        yield ServerSentEvent(comment="ready", retry=RETRY_MS)
        while (left := deadline - loop.time()) > 0:
            item = await sub.next(min(settings.heartbeat_s, left))
            if isinstance(item, FeedItem):
                yield ServerSentEvent(event="notification", id=item.id, data=item.notification)
            elif isinstance(item, Gap):
                yield ServerSentEvent(
                    event="reset",
                    id=item.id,
                    data={"reason": item.reason, "detail": RESET_ADVICE},
                )
            elif sub.closed:
                return  # the feed stopped (shutdown)
            elif deadline - loop.time() > 0:
                yield ServerSentEvent(comment="heartbeat")
    finally:
        sub.close()
