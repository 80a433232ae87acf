"""The state machine of a video (``vistack_videos.status``), the seed's states::

    pending ──▶ processing ──▶ published
       ▲            │  │
       └──(retry)───┘  └──▶ failed ──(replayed from the DLQ)──▶ pending

``processing`` goes back to ``pending`` when a transcode failed and waits for its retry
(``retry_at``) or when the watchdog found it stuck; ``failed`` keeps its reason. A deleted
video has no row at all (delete_file removes it with everything attached).
"""

from __future__ import annotations

import enum

from aigc_hub.core.states import StateMachine
from aigc_hub.store.transitions import History, Stateful

from .models import vistack_video_events, vistack_videos


class VideoStatus(enum.StrEnum):
    """Where a video's transcode is."""

    PENDING = "pending"
    PROCESSING = "processing"
    PUBLISHED = "published"
    FAILED = "failed"


S = VideoStatus
VIDEO_MACHINE = StateMachine(
    "vistack_video",
    {
        S.PENDING: frozenset({S.PROCESSING, S.FAILED}),
        # processing → processing: another worker took over a run whose lease ran out.
        S.PROCESSING: frozenset({S.PROCESSING, S.PUBLISHED, S.PENDING, S.FAILED}),
        S.PUBLISHED: frozenset(),
        S.FAILED: frozenset({S.PENDING}),
    },
    terminal=frozenset({S.PUBLISHED}),
)

VIDEOS = Stateful(vistack_videos, VIDEO_MACHINE, History(vistack_video_events))
