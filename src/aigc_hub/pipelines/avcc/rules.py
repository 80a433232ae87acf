"""The review rubric: from what the review found to a decision, a level and a score. Pure.

The seed names the levels P, G, O and promises "O 类作品秒级赋码" (O works coded within
seconds) without defining them; docs/avcc.md is the rubric's user-facing text. In short:

* **O — original**: approved by the machine with nothing to remark (score ≥ 85). The fast
  path: its chain statement is sealed at once, never waiting for others to batch with.
* **G — general**: approved by the machine with minor findings (65 ≤ score < 85): an AI
  tool we do not know, some resemblance to a coded work below the duplicate line. Coded
  through the normal batch (``AIGC_HUB_AVCC_BATCH_WINDOW_MS``).
* **P — person-reviewed**: only a reviewer grants it, after the machine could not decide
  (40 ≤ score < 65, or moderation asked for a human).

Refused outright: the stored bytes do not match the declared hash, moderation rejected the
content, the work is a near-duplicate of a coded work, the declaration is incomplete, or
the score is below 40.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

#: Score bands (inclusive lower bounds).
O_FROM, G_FROM, HUMAN_FROM = 85.0, 65.0, 40.0
#: What a resemblance to the nearest coded work costs, at similarity 1.0 (just under the
#: duplicate line it costs nearly this much).
SIMILARITY_PENALTY = 40.0
#: An AI tool outside the known list: the declaration cannot be checked against it.
UNKNOWN_TOOL_PENALTY = 25.0
#: Moderation unsure ("review"): a human looks at it whatever the score.
MODERATION_REVIEW_PENALTY = 30.0

#: AI tools whose declarations the review recognises (lower-case names, without version).
KNOWN_TOOLS = frozenset(
    {
        "stable-diffusion-xl",
        "stable-diffusion-3",
        "flux.1",
        "midjourney",
        "dall-e-3",
        "sora",
        "kling",
        "runway-gen-3",
        "veo",
        "hunyuan-video",
        "wan",
        "qwen",
        "gpt-4o",
        "deepseek",
        "local",
    }
)

Decision = Literal["approved", "rejected", "need_human"]
Level = Literal["P", "G", "O"]
ModerationVerdict = Literal["allow", "review", "reject"]


@dataclass(frozen=True)
class Findings:
    """What the review's checks found about one work."""

    #: The stored bytes hash to the declared ``content_hash``.
    integrity_ok: bool
    #: The declaration's problems (empty: complete).
    declaration_problems: tuple[str, ...]
    model_name: str
    moderation: ModerationVerdict
    moderation_rules: tuple[str, ...] = ()
    #: Similarity in [0, 1] to the nearest coded work (0: nothing alike), and which.
    similarity: float = 0.0
    nearest_record_id: int | None = None
    #: Past the duplicate line of its kind (similarity.py decides it).
    near_duplicate: bool = False


@dataclass(frozen=True)
class Verdict:
    """The review's outcome: the seed's ``decision``, ``final_level``, ``overall_score``."""

    decision: Decision
    level: Level | None
    score: float
    reasons: tuple[str, ...] = field(default=())


def known_tool(model_name: str) -> bool:
    """Whether the declared tool is one the review recognises."""
    return model_name.strip().lower() in KNOWN_TOOLS


def score(found: Findings) -> float:
    """100 less the penalties, in [0, 100], rounded to one decimal like the seed's 78.5."""
    value = 100.0 - SIMILARITY_PENALTY * max(0.0, min(1.0, found.similarity))
    if not known_tool(found.model_name):
        value -= UNKNOWN_TOOL_PENALTY
    if found.moderation == "review":
        value -= MODERATION_REVIEW_PENALTY
    return round(max(0.0, min(100.0, value)), 1)


def judge(found: Findings) -> Verdict:
    """The decision for ``found``: refusals first, then the score bands."""
    points = score(found)
    if not found.integrity_ok:
        return Verdict("rejected", None, 0.0, ("integrity: the stored bytes do not match",))
    if found.declaration_problems:
        return Verdict("rejected", None, points, found.declaration_problems)
    if found.moderation == "reject":
        rules = ", ".join(found.moderation_rules) or "policy"
        return Verdict("rejected", None, points, (f"moderation: rejected ({rules})",))
    if found.near_duplicate:
        return Verdict(
            "rejected", None, points, (f"duplicate: of coded work {found.nearest_record_id}",)
        )
    reasons = _remarks(found)
    if found.moderation == "review" or HUMAN_FROM <= points < G_FROM:
        return Verdict("need_human", None, points, reasons)
    if points < HUMAN_FROM:
        return Verdict("rejected", None, points, reasons or ("score below 40",))
    return Verdict("approved", "O" if points >= O_FROM else "G", points, reasons)


def _remarks(found: Findings) -> tuple[str, ...]:
    remarks = []
    if not known_tool(found.model_name):
        remarks.append(f"declaration: unknown AI tool {found.model_name!r}")
    if found.moderation == "review":
        rules = ", ".join(found.moderation_rules) or "policy"
        remarks.append(f"moderation: a reviewer must look ({rules})")
    if found.similarity >= 0.25 and found.nearest_record_id is not None:
        remarks.append(
            f"similarity: {found.similarity:.2f} to coded work {found.nearest_record_id}"
        )
    return tuple(remarks)


def human_may_grant(decision: Decision, level: Level | None) -> str | None:
    """Why a reviewer's decision is not acceptable, or None: an approval names a level; a
    rejection names none; need_human is not a reviewer's answer."""
    if decision == "need_human":
        return "a reviewer approves or rejects"
    if decision == "approved" and level is None:
        return "an approval names the level granted (P, G or O)"
    if decision == "rejected" and level is not None:
        return "a rejection grants no level"
    return None
