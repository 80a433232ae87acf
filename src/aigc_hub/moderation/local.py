"""``LocalModeration``: the versioned rule set, MiniLM semantic matching and frame checks.

Everything runs on this machine: keyword and regex rules on the normalised prompt, semantic
rules through :class:`~aigc_hub.moderation.semantic.SemanticMatcher` when the ``ml`` extra is
installed, and the model-free frame checks on outputs. The strictest verdict of all hits wins.
Logs name the verdict, the rule ids and the text's digest, never the text.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Final

from aigc_hub.core import failpoints as fp
from aigc_hub.moderation import frame_checks, normalize, semantic
from aigc_hub.moderation.base import Decision, Verdict, strictest
from aigc_hub.moderation.policy import Policy, load_policy
from aigc_hub.moderation.settings import ModerationSettings
from aigc_hub.observability.logging import get_logger

if TYPE_CHECKING:
    from aigc_hub.media.frames import GrayFrame

log = get_logger(__name__)

#: ``model_version`` of a text review that used no model: the policy has no semantic rules
#: or semantic matching is switched off.
RULES_ONLY: Final = "rules-only"
#: ``model_version`` of a text review whose semantic rules were skipped: no ``ml`` extra.
RULES_ONLY_NO_ML: Final = "rules-only:ml-extra-missing"
#: ``model_version`` of a frame review: the checks use no model.
FRAME_CHECKS: Final = "frame-checks"
TOO_LONG: Final = "text.too_long"
EVIDENCE_MAX: Final = 300  # the width of moderation_decisions.evidence_ref


class LocalModeration:
    """The hub's own moderation; safe to share between concurrent reviews."""

    name = "local"

    def __init__(
        self,
        settings: ModerationSettings | None = None,
        *,
        policy: Policy | None = None,
        failpoints: fp.Failpoints = fp.NONE,
    ) -> None:
        self.settings = settings or ModerationSettings()
        self.policy = policy or load_policy(self.settings.policy_path)
        self._thresholds = self.settings.frame_thresholds()
        self._matcher: semantic.SemanticMatcher | None = None
        if self.settings.semantic and self.policy.semantic:
            self._matcher = semantic.SemanticMatcher(
                self.policy.semantic,
                model_dir=self.settings.model_dir,
                load_timeout_s=self.settings.load_timeout_s,
                timeout_s=self.settings.timeout_s,
                torch_threads=self.settings.torch_threads,
                failpoints=failpoints,
            )

    async def review_text(self, text: str, *, tenant_id: str) -> Decision:
        """Review a prompt; raises ``ModerationUnavailable`` if the model cannot answer."""
        if len(text) > self.settings.max_text_chars:
            return self._decided(
                Verdict.REJECT,
                RULES_ONLY,
                (TOO_LONG,),
                None,
                f"text longer than {self.settings.max_text_chars} characters",
                tenant_id,
            )
        forms = normalize.variants(text)
        runs = normalize.spelled_runs(forms[0])
        hits: dict[str, Verdict] = {}
        for rule in self.policy.patterns:
            if rule.hits(forms, runs):
                hits[rule.id] = rule.verdict
        model_version = RULES_ONLY
        scores = ""
        if self._matcher is not None:
            matched = await self._matcher.match(semantic.windows(forms[0]))
            if matched is None:
                model_version = RULES_ONLY_NO_ML
            else:
                model_version, semantic_hits = matched
                for hit in semantic_hits:
                    hits[hit.rule_id] = self._verdict_of(hit.rule_id)
                scores = "".join(f";{h.rule_id}={h.score:.2f}" for h in semantic_hits)
        evidence = normalize.digest(forms[0]) + scores
        verdict = strictest(hits.values())
        reason = (
            "no rule matched"
            if verdict is Verdict.ALLOW
            else self.policy.reason_of(next(r for r, v in hits.items() if v is verdict))
        )
        return self._decided(verdict, model_version, tuple(hits), evidence, reason, tenant_id)

    async def review_frames(
        self,
        frames: Sequence[GrayFrame],
        *,
        duration_ms: int,
        expected_duration_ms: int | None,
        tenant_id: str,
    ) -> Decision:
        """Review an output: black, frozen, wrong length (each hit rejects)."""
        hits = frame_checks.check(
            frames,
            duration_ms=duration_ms,
            expected_duration_ms=expected_duration_ms,
            thresholds=self._thresholds,
        )
        sampled = "frames@" + ",".join(str(f.at_ms) for f in sorted(frames, key=lambda f: f.at_ms))
        evidence = ";".join([sampled, *(h.evidence for h in hits)])
        if not hits:
            return self._decided(
                Verdict.ALLOW, FRAME_CHECKS, (), evidence, "no frame check hit", tenant_id
            )
        reason = "; ".join(frame_checks.REASONS[h.rule_id] for h in hits)
        ids = tuple(h.rule_id for h in hits)
        return self._decided(Verdict.REJECT, FRAME_CHECKS, ids, evidence, reason, tenant_id)

    async def warm_up(self, timeout_s: float | None = None) -> None:
        """Load the semantic model now rather than on the first review (no-op without it).

        Raises ``ModerationUnavailable`` as a review would; ``timeout_s`` replaces the load
        deadline for this wait.
        """
        if self._matcher is not None:
            await self._matcher.warm_up(timeout_s)

    def close(self) -> None:
        """Release the model's worker thread."""
        if self._matcher is not None:
            self._matcher.close()

    def _verdict_of(self, rule_id: str) -> Verdict:
        return next(r.verdict for r in self.policy.semantic if r.id == rule_id)

    def _decided(
        self,
        verdict: Verdict,
        model_version: str,
        hit_rules: tuple[str, ...],
        evidence: str | None,
        reason: str,
        tenant_id: str,
    ) -> Decision:
        if evidence is not None and len(evidence) > EVIDENCE_MAX:
            evidence = evidence[: EVIDENCE_MAX - 1] + "…"
        decision = Decision(
            verdict, self.policy.version, model_version, hit_rules, evidence, reason
        )
        # A clean allow is the common case (every danmaku, every chat line): at info it
        # would cost more than the check and bury the decisions worth reading.
        clean = verdict is Verdict.ALLOW and not hit_rules
        (log.debug if clean else log.info)(
            "moderation.decided",
            tenant_id=tenant_id,
            verdict=verdict.value,
            hit_rules=list(hit_rules),
            policy_version=self.policy.version,
            model_version=model_version,
            evidence_ref=decision.evidence_ref,
        )
        return decision
