"""A Python client of the AIGC Hub HTTP API: :class:`HubClient` (sync), :class:`AsyncHubClient`.

Both share one core (:mod:`aigc_hub.client._core`): typed answers, problem+json errors as
:class:`HubAPIError` subclasses, and retries only where repeating a request is safe (GETs and
POSTs carrying an ``Idempotency-Key``, which is generated once per logical call)::

    with HubClient("http://127.0.0.1:8000", api_key=ADMIN_KEY) as hub:
        accepted = hub.dlq_replay_bulk(topic="effects.requests", max=100)
        job = hub.wait_job(accepted.job_id, timeout=60)

    with HubClient("http://127.0.0.1:8000", api_key=TENANT_KEY) as hub:
        for event in hub.events(subject_id=task_id):   # SSE, reconnects with Last-Event-ID
            ...                                         # event.kind: notification | reset
"""

from aigc_hub.client._clients import AsyncHubClient, HubClient
from aigc_hub.client._core import NO_RETRY, Call, RetryPolicy
from aigc_hub.client._errors import (
    BadRequest,
    Conflict,
    Forbidden,
    HubAPIError,
    JobTimeout,
    NotFound,
    RateLimited,
    ServerError,
    Unauthorized,
    Unavailable,
    ValidationFailed,
    WaitTimeout,
)
from aigc_hub.client._events import Event
from aigc_hub.client._models import (
    AuditEntry,
    AuditPage,
    DeadLetter,
    DeadLetterDetail,
    DeadLetterPage,
    Dismissed,
    Health,
    Job,
    JobAccepted,
    Lag,
    Notification,
    Outbox,
    PartitionLag,
    TopicLag,
)

__all__ = [
    "NO_RETRY",
    "AsyncHubClient",
    "AuditEntry",
    "AuditPage",
    "BadRequest",
    "Call",
    "Conflict",
    "DeadLetter",
    "DeadLetterDetail",
    "DeadLetterPage",
    "Dismissed",
    "Event",
    "Forbidden",
    "Health",
    "HubAPIError",
    "HubClient",
    "Job",
    "JobAccepted",
    "JobTimeout",
    "Lag",
    "NotFound",
    "Notification",
    "Outbox",
    "PartitionLag",
    "RateLimited",
    "RetryPolicy",
    "ServerError",
    "TopicLag",
    "Unauthorized",
    "Unavailable",
    "ValidationFailed",
    "WaitTimeout",
]
