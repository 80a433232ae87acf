"""How a consumer group finished with one record: metrics label and stored inbox code alike."""

from __future__ import annotations

import enum


class HandlingOutcome(enum.StrEnum):
    """The runtime's distinct endings for a record; the value is the stored/labelled string."""

    #: The handler's staged writes and returned events committed with the inbox mark.
    APPLIED = "applied"
    #: The inbox mark committed; the handler staged nothing and returned no events.
    NO_OP = "no_op"
    #: The inbox already had the mark: nothing was applied a second time.
    DUPLICATE = "duplicate"
    #: An earlier record of the same key is parked; this one waits behind it.
    PARKED_BEHIND = "parked_behind"
    #: The handling failed and the record was parked for a delayed redelivery.
    PARKED = "parked"
    #: A parked record failed again and got a later due time.
    RESCHEDULED = "rescheduled"
    #: The handling failed for good; the record is in the dead-letter store.
    DEAD_LETTERED = "dead_lettered"
    #: A copy of a parked head that another run settled first (nothing was written).
    STALE = "stale"
