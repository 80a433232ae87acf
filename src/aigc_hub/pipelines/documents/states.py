"""The state machine of a document's task (``documents_tasks.status``), the seed's states
(§3.4: ``queued``, ``processing``, ``failed``) and the two ends it implies::

    queued ──▶ processing ──▶ completed
       │            │
       └────────────┴──▶ failed ──(retried from the DLQ)──▶ processing
                                            (any of them) ──▶ deleted

``processing`` spans chunking, embedding, storing and the analysis (``stage`` and
``progress`` say which); ``failed`` keeps its reason; ``deleted`` is the end of every task
whose document was deleted (its chunks and vectors are gone).
"""

from __future__ import annotations

import enum

from aigc_hub.core.states import StateMachine
from aigc_hub.store.transitions import History, Stateful

from .models import documents_task_events, documents_tasks


class TaskStatus(enum.StrEnum):
    """Where a document's processing is."""

    QUEUED = "queued"
    PROCESSING = "processing"
    COMPLETED = "completed"
    FAILED = "failed"
    DELETED = "deleted"


S = TaskStatus
TASK_MACHINE = StateMachine(
    "documents_task",
    {
        S.QUEUED: frozenset({S.PROCESSING, S.FAILED, S.DELETED}),
        S.PROCESSING: frozenset({S.COMPLETED, S.FAILED, S.DELETED}),
        S.COMPLETED: frozenset({S.DELETED}),
        # A dead letter retried (the seed's DLQ API) takes its task up again.
        S.FAILED: frozenset({S.PROCESSING, S.DELETED}),
        S.DELETED: frozenset(),
    },
    terminal=frozenset({S.DELETED}),
)

TASKS = Stateful(documents_tasks, TASK_MACHINE, History(documents_task_events))
