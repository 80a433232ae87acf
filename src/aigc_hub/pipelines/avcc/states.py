"""The state machine of an application (``avcc_records.status``).

::

    APPLIED ──review──▶ APPROVED ──▶ ANCHORING ──▶ ANCHORED ──▶ CODED
       │                   ▲
       ├──────────▶ NEED_HUMAN ──reviewer──┘
       │                   │
       └──────────▶ REJECTED ◀─────────────┘

``APPLIED`` passed the precheck (§9.2.1); the review decides; ``ANCHORING`` waits for the
chain; ``ANCHORED`` has its receipt; ``CODED`` has its code. REJECTED and CODED are ends.
"""

from __future__ import annotations

import enum

from aigc_hub.core.states import StateMachine
from aigc_hub.store.transitions import History, Stateful

from .models import avcc_record_events, avcc_records


class RecordStatus(enum.StrEnum):
    """Where an application is."""

    APPLIED = "APPLIED"
    APPROVED = "APPROVED"
    NEED_HUMAN = "NEED_HUMAN"
    REJECTED = "REJECTED"
    ANCHORING = "ANCHORING"
    ANCHORED = "ANCHORED"
    CODED = "CODED"


S = RecordStatus
RECORD_MACHINE = StateMachine(
    "avcc_record",
    {
        S.APPLIED: frozenset({S.APPROVED, S.NEED_HUMAN, S.REJECTED}),
        S.NEED_HUMAN: frozenset({S.APPROVED, S.REJECTED}),
        S.APPROVED: frozenset({S.ANCHORING}),
        S.ANCHORING: frozenset({S.ANCHORED}),
        S.ANCHORED: frozenset({S.CODED}),
        S.REJECTED: frozenset(),
        S.CODED: frozenset(),
    },
    terminal=frozenset({S.REJECTED, S.CODED}),
)

RECORDS = Stateful(
    avcc_records,
    RECORD_MACHINE,
    History(avcc_record_events),
)
