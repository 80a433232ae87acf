"""The alert of the seed's roadmap: a transcode that used its last attempt goes to the DLQ
and someone is told, instead of being dropped in silence.

Three signals, so whichever the operator watches fires: a warning log line with the facts,
the counter ``aigc_hub_vistack_transcode_gave_up`` (the Prometheus rule
``AigcHubVistackTranscodeGaveUp`` in ``deploy/prometheus``), and a POST of the alert as JSON
to the hub's alert webhook (``AIGC_HUB_ALERT_WEBHOOK``) when one is set.
"""

from __future__ import annotations

import asyncio
import json
import logging
import urllib.request
from typing import Any

from . import metrics

log = logging.getLogger(__name__)
ALERT = "VistackTranscodeGaveUp"
_pending: set[asyncio.Task[None]] = set()


def transcode_gave_up(
    webhook: str | None, *, video_id: str, tenant_id: str, attempts: int, reason: str
) -> None:
    """Raise the alert for ``video_id`` (the webhook is posted in the background)."""
    payload: dict[str, Any] = {
        "alert": ALERT,
        "state": "firing",
        "video_id": video_id,
        "tenant_id": tenant_id,
        "attempts": attempts,
        "reason": reason[:500],
    }
    metrics.GAVE_UP.inc()
    log.warning("alert %s", json.dumps(payload))
    if webhook:
        task = asyncio.get_running_loop().create_task(_post(webhook, payload))
        _pending.add(task)
        task.add_done_callback(_pending.discard)


async def _post(url: str, payload: dict[str, Any]) -> None:
    request = urllib.request.Request(
        url, data=json.dumps(payload).encode(), headers={"content-type": "application/json"}
    )
    try:
        await asyncio.to_thread(urllib.request.urlopen, request, timeout=5)
    except OSError as exc:
        log.warning("alert webhook failed: %s", exc)
