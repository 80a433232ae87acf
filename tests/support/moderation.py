"""A moderation for tests: the real local moderation behind its own interface, made to be
unreachable or to decide otherwise on request (as a hosted moderation service's outage or a
stricter policy would). Counts the reviews it was asked for."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from aigc_hub.media.frames import GrayFrame
from aigc_hub.moderation import Decision, Moderation, ModerationUnavailable, Verdict


class ScriptedModeration:
    """Wraps ``inner``: prompt reviews fail while ``text_down``; the first
    ``frame_failures`` frame reviews fail; ``frame_verdict`` (with ``frame_rules``) replaces
    the frame reviews' verdict."""

    def __init__(
        self,
        inner: Moderation,
        *,
        text_down: bool = False,
        frame_failures: int = 0,
        frame_verdict: Verdict | None = None,
        frame_rules: tuple[str, ...] = (),
    ) -> None:
        self.inner, self.name = inner, inner.name
        self.text_down = text_down
        self.frame_failures = frame_failures
        self.frame_verdict, self.frame_rules = frame_verdict, frame_rules
        self.frame_calls = 0

    async def review_text(self, text: str, *, tenant_id: str) -> Decision:
        if self.text_down:
            raise ModerationUnavailable("moderation service unreachable")
        return await self.inner.review_text(text, tenant_id=tenant_id)

    async def review_frames(
        self,
        frames: Sequence[GrayFrame],
        *,
        duration_ms: int,
        expected_duration_ms: int | None,
        tenant_id: str,
    ) -> Decision:
        self.frame_calls += 1
        if self.frame_calls <= self.frame_failures:
            raise ModerationUnavailable("moderation service unreachable")
        decided = await self.inner.review_frames(
            frames,
            duration_ms=duration_ms,
            expected_duration_ms=expected_duration_ms,
            tenant_id=tenant_id,
        )
        if self.frame_verdict is None:
            return decided
        return dataclasses.replace(decided, verdict=self.frame_verdict, hit_rules=self.frame_rules)
