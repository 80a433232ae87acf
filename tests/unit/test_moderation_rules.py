"""Moderation by the versioned rule set alone: normalisation, keyword and regex rules,
evasions, the strictest verdict, evidence and logs that never hold the prompt, and policy
files that cannot work."""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.support.logs import captured_logs

from aigc_hub.core.errors import ConfigurationError
from aigc_hub.moderation import (
    LocalModeration,
    ModerationSettings,
    Verdict,
    load_policy,
    make_moderation,
    strictest,
)
from aigc_hub.moderation import local as local_mod
from aigc_hub.moderation.normalize import digest, join_spelled, normalize, spelled_runs, variants
from aigc_hub.moderation.policy import DEFAULT_POLICY

RULES_ONLY = ModerationSettings(semantic=False)


@pytest.fixture
def moderation() -> LocalModeration:
    """The shipped policy, semantic matching off: keyword and regex rules only."""
    return LocalModeration(RULES_ONLY)


@pytest.fixture
def log_lines() -> Iterator[io.StringIO]:
    with captured_logs() as out:
        yield out


def _lines(out: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.getvalue().splitlines() if line.strip()]


@pytest.mark.parametrize(
    ("raw", "normal"),
    [
        ("ＤＥＥＰＦＡＫＥ", "deepfake"),  # full-width letters
        ("Deep\u200bfake", "deepfake"),  # zero-width space
        ("deep\u00adfake", "deepfake"),  # soft hyphen
        ("dee\u200dp\ufefffake", "deepfake"),  # zero-width joiner, BOM
        ("\u202edeepfake\u202c", "deepfake"),  # bidi override
        ("STRASSE  and\t\nStraße", "strasse and strasse"),  # casefold, whitespace
        ("ﬁre", "fire"),  # a ligature
    ],
)
def test_normalize_folds_width_case_and_removes_invisible_characters(raw: str, normal: str) -> None:
    assert normalize(raw) == normal


@pytest.mark.parametrize(
    ("text", "joined"),
    [
        ("d e e p f a k e now", "deepfake now"),
        ("d.e.e.p.f.a.k.e", "deepfake"),
        ("d-e-e-p f-a-k-e", "deepfake"),
        ("a skill in a b test", "a skill in a b test"),  # ordinary words are never joined
    ],
)
def test_spelled_out_words_are_joined_and_ordinary_words_are_not(text: str, joined: str) -> None:
    assert join_spelled(text) == joined


def test_spelled_out_runs_are_joined_with_a_neighbouring_one_letter_word() -> None:
    assert spelled_runs("a d e e p f a k e of a b o m b, a skill") == ["adeepfake", "abomb"]


async def test_benign_prompts_are_allowed(moderation: LocalModeration) -> None:
    for prompt in [
        "a cat playing with a ball of yarn in a sunny kitchen",
        "a drone shot over snowy mountains at sunrise, cinematic",
        "children playing football in a park",
        "一只猫在阳光下的厨房里玩毛线球",
        "a skilled chef explains step by step how to bake sourdough bread",
    ]:
        decision = await moderation.review_text(prompt, tenant_id="t1")
        assert decision.verdict is Verdict.ALLOW, prompt
        assert decision.hit_rules == ()
        assert decision.reason == "no rule matched"


@pytest.mark.parametrize(
    ("prompt", "rule", "verdict"),
    [
        ("a deepfake of my neighbour", "likeness.deepfake.keyword", Verdict.HUMAN_REVIEW),
        ("A NUDE portrait", "sexual.adult.keyword", Verdict.HUMAN_REVIEW),
        ("做一个换脸视频", "likeness.deepfake.keyword", Verdict.HUMAN_REVIEW),  # CJK: substring
        ("教我如何自制炸弹", "weapons.explosives.keyword", Verdict.REJECT),
        ("a beheading scene", "violence.gore.keyword", Verdict.HUMAN_REVIEW),
        (
            "a tutorial on how to build a bomb in the garage",
            "weapons.explosives.pattern",
            Verdict.REJECT,
        ),
        ("my number is 078-05-1120, read it aloud", "personal_data.pattern", Verdict.HUMAN_REVIEW),
        ("身份证 11010519491231002X", "personal_data.pattern", Verdict.HUMAN_REVIEW),
    ],
)
async def test_keyword_and_regex_rules_hit_with_their_verdict(
    moderation: LocalModeration, prompt: str, rule: str, verdict: Verdict
) -> None:
    decision = await moderation.review_text(prompt, tenant_id="t1")
    assert rule in decision.hit_rules
    assert decision.verdict is verdict
    assert decision.policy_version == "default-v1"
    assert decision.model_version == local_mod.RULES_ONLY


@pytest.mark.parametrize(
    "evasion",
    [
        "a ＤＥＥＰＦＡＫＥ of the mayor",
        "a deep\u200bfake of the mayor",
        "a dee\u00adp\u200dfake of the mayor",
        "a d e e p f a k e of the mayor",
        "a d.e.e.p.f.a.k.e of the mayor",
        "a DeEpFaKe of the mayor",
    ],
)
async def test_trivial_evasions_still_hit_the_keyword(
    moderation: LocalModeration, evasion: str
) -> None:
    decision = await moderation.review_text(evasion, tenant_id="t1")
    assert decision.hit_rules == ("likeness.deepfake.keyword",)
    assert decision.verdict is Verdict.HUMAN_REVIEW


async def test_keywords_match_whole_words_only(moderation: LocalModeration) -> None:
    # "nude" inside "denuded", "porn" inside "pornstar"-less words like "popcorn": no hit.
    for prompt in ["a denuded hillside after the fire", "popcorn at the cinema"]:
        decision = await moderation.review_text(prompt, tenant_id="t1")
        assert decision.verdict is Verdict.ALLOW, prompt


async def test_the_strictest_verdict_wins_and_every_hit_is_recorded(
    moderation: LocalModeration,
) -> None:
    decision = await moderation.review_text(
        "a nude deepfake with a pipe bomb tutorial", tenant_id="t1"
    )
    assert decision.verdict is Verdict.REJECT
    assert set(decision.hit_rules) == {
        "sexual.adult.keyword",
        "likeness.deepfake.keyword",
        "weapons.explosives.keyword",
    }
    assert decision.reason == "instructions for weapons or explosives"


def test_strictest_orders_reject_over_review_over_watermark_over_allow() -> None:
    assert strictest([]) is Verdict.ALLOW
    assert strictest([Verdict.WATERMARK, Verdict.ALLOW]) is Verdict.WATERMARK
    assert strictest([Verdict.WATERMARK, Verdict.HUMAN_REVIEW]) is Verdict.HUMAN_REVIEW
    assert strictest([Verdict.HUMAN_REVIEW, Verdict.REJECT, Verdict.ALLOW]) is Verdict.REJECT


async def test_evidence_is_a_digest_of_the_normalised_text_never_the_text(
    moderation: LocalModeration,
) -> None:
    prompt = "Ａ secret deepfake of Alice Example"
    decision = await moderation.review_text(prompt, tenant_id="t1")
    expected = "sha256:" + hashlib.sha256(normalize(prompt).encode()).hexdigest()
    assert decision.evidence_ref == expected == digest(variants(prompt)[0])
    assert "alice" not in (decision.evidence_ref or "").lower()
    assert "alice" not in decision.reason.lower()


async def test_logs_name_the_decision_and_never_the_prompt(
    moderation: LocalModeration, log_lines: io.StringIO
) -> None:
    await moderation.review_text("a deepfake of Alice Example", tenant_id="t1")
    lines = [line for line in _lines(log_lines) if line["event"] == "moderation.decided"]
    assert len(lines) == 1
    assert lines[0]["verdict"] == "human_review"
    assert lines[0]["hit_rules"] == ["likeness.deepfake.keyword"]
    assert lines[0]["tenant_id"] == "t1"
    assert "alice" not in log_lines.getvalue().lower()


async def test_text_longer_than_the_limit_is_rejected_unread() -> None:
    moderation = LocalModeration(ModerationSettings(semantic=False, max_text_chars=50))
    decision = await moderation.review_text("a calm lake " * 10, tenant_id="t1")
    assert decision.verdict is Verdict.REJECT
    assert decision.hit_rules == (local_mod.TOO_LONG,)
    assert decision.evidence_ref is None


async def test_make_moderation_builds_the_local_adapter_from_settings() -> None:
    moderation = make_moderation(RULES_ONLY)
    assert isinstance(moderation, LocalModeration)
    assert moderation.name == "local"
    assert (await moderation.review_text("a deepfake", tenant_id="t")).verdict is (
        Verdict.HUMAN_REVIEW
    )


def test_settings_read_their_environment_twins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIGC_HUB_MODERATION_SEMANTIC", "false")
    monkeypatch.setenv("AIGC_HUB_MODERATION_BLACK_LUMA_MAX", "12.5")
    settings = ModerationSettings()
    assert settings.semantic is False
    assert settings.frame_thresholds().black_luma_max == 12.5
    assert settings.policy_path == DEFAULT_POLICY


def test_the_shipped_policy_loads_with_a_version_and_every_kind_of_rule() -> None:
    policy = load_policy()
    assert policy.version == "default-v1"
    assert policy.patterns and policy.semantic
    verdicts = {r.verdict for r in (*policy.patterns, *policy.semantic)}
    assert verdicts == {Verdict.REJECT, Verdict.HUMAN_REVIEW, Verdict.WATERMARK}


async def test_a_policy_file_of_ones_own_is_used_and_its_version_recorded(
    tmp_path: Path,
) -> None:
    path = tmp_path / "house.toml"
    path.write_text(
        'version = "house-7"\n'
        "[[rules]]\n"
        'id = "brand.rival"\nkind = "keyword"\nverdict = "watermark"\n'
        'reason = "a rival brand"\nkeywords = ["Acme Cola"]\n'
    )
    moderation = LocalModeration(ModerationSettings(policy_path=path))
    decision = await moderation.review_text("two friends share an ACME  cola", tenant_id="t")
    assert (decision.verdict, decision.hit_rules) == (Verdict.WATERMARK, ("brand.rival",))
    assert decision.policy_version == "house-7"
    assert decision.model_version == local_mod.RULES_ONLY  # no semantic rules: no model


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        ("version = ", "house.toml"),
        ('rules = []\n', "version"),
        ('version = "v"\n[[rules]]\nid = "a"\nkind = "keyword"\nverdict = "allow"\n'
         'reason = "r"\nkeywords = ["x"]\n', "rules.0.keyword.verdict"),
        ('version = "v"\n[[rules]]\nid = "a"\nkind = "regex"\nverdict = "reject"\n'
         'reason = "r"\npattern = "(unclosed"\n', "bad pattern"),
        ('version = "v"\n[[rules]]\nid = "a"\nkind = "semantic"\nverdict = "reject"\n'
         'reason = "r"\nexemplars = ["x"]\nthreshold = 1.5\n', "threshold"),
        ('version = "v"\n' + '[[rules]]\nid = "a"\nkind = "keyword"\nverdict = "reject"\n'
         'reason = "r"\nkeywords = ["x"]\n' * 2, "repeats"),
    ],
)  # fmt: skip
def test_a_policy_that_cannot_work_is_refused_naming_the_problem(
    tmp_path: Path, body: str, problem: str
) -> None:
    path = tmp_path / "house.toml"
    path.write_text(body)
    with pytest.raises(ConfigurationError, match=problem):
        load_policy(path)


def test_a_missing_policy_file_is_a_configuration_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match=r"nothing\.toml"):
        LocalModeration(ModerationSettings(policy_path=tmp_path / "nothing.toml"))


def test_the_moderation_doc_names_every_setting() -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / "moderation.md").read_text()
    for name in ModerationSettings.model_fields:
        assert f"AIGC_HUB_MODERATION_{name.upper()}" in text, name


async def test_a_clean_allow_is_logged_at_debug_and_a_hit_at_info(
    moderation: LocalModeration, log_lines: io.StringIO
) -> None:
    await moderation.review_text("a calm lake at dawn", tenant_id="t1")
    await moderation.review_text("a deepfake of Alice Example", tenant_id="t1")
    lines = [line for line in _lines(log_lines) if line["event"] == "moderation.decided"]
    assert [(line["verdict"], line["level"]) for line in lines] == [
        ("allow", "debug"),
        ("human_review", "info"),
    ]
