"""The moderation seam: verdicts, the decision value, and the ``Moderation`` protocol.

A decision is a business outcome, not an error: a rejected prompt or output is answered
(422, or the task fails with class ``moderation``) and never retried, because retrying would
submit the same content for review again (seed 004 §3.8.4). Only an infrastructure failure of
moderation itself (a model that cannot load, a review past its deadline) raises
:class:`ModerationUnavailable`, a :class:`RetryableError`; callers then fail closed: no new
paid work starts while moderation is down (§3.10, row Billing/Moderation).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Protocol

from aigc_hub.core.errors import RetryableError

if TYPE_CHECKING:
    # Only a type here: importing the media toolkit is not needed to review frames.
    from aigc_hub.media.frames import GrayFrame


class Verdict(enum.StrEnum):
    """What moderation decides about one subject; :data:`SEVERITY` orders them."""

    ALLOW = "allow"
    REJECT = "reject"
    HUMAN_REVIEW = "human_review"
    WATERMARK = "watermark"


#: Strictness, lowest first: when several rules hit, the strictest verdict wins.
SEVERITY: Final[dict[Verdict, int]] = {
    Verdict.ALLOW: 0,
    Verdict.WATERMARK: 1,
    Verdict.HUMAN_REVIEW: 2,
    Verdict.REJECT: 3,
}


def strictest(verdicts: Iterable[Verdict]) -> Verdict:
    """The strictest of ``verdicts`` (``ALLOW`` for none)."""
    return max(verdicts, key=SEVERITY.__getitem__, default=Verdict.ALLOW)


@dataclass(frozen=True)
class Decision:
    """One recorded moderation outcome.

    ``evidence_ref`` never holds the reviewed prompt or media: a digest of the normalised
    text, rule scores or sampled frame timestamps, so the row can be kept and shown to
    operators without copying the content. ``reason`` is short and safe for a problem body
    and for logs.
    """

    verdict: Verdict
    policy_version: str
    model_version: str
    hit_rules: tuple[str, ...]
    evidence_ref: str | None
    reason: str

    @property
    def allowed(self) -> bool:
        """Whether the subject may go on unchanged (``ALLOW``)."""
        return self.verdict is Verdict.ALLOW


class ModerationUnavailable(RetryableError):
    """Moderation could not decide (its model cannot load, or a review timed out)."""


class Moderation(Protocol):
    """A moderation adapter: reviews prompts and sampled output frames.

    Implementations are safe to share between concurrent tasks; each review either returns
    a :class:`Decision` or raises :class:`ModerationUnavailable`.
    """

    name: str

    async def review_text(self, text: str, *, tenant_id: str) -> Decision:
        """Review a prompt (or any user text) before work starts."""
        ...

    async def review_frames(
        self,
        frames: Sequence[GrayFrame],
        *,
        duration_ms: int,
        expected_duration_ms: int | None,
        tenant_id: str,
    ) -> Decision:
        """Review an output from frames sampled across it and its measured duration."""
        ...
