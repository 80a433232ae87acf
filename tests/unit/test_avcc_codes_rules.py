"""avcc's pure decisions: the code's form and check character, the review rubric and the
resemblance it weighs."""

from __future__ import annotations

import pytest

from aigc_hub.pipelines.avcc import rules
from aigc_hub.pipelines.avcc.codes import InvalidCode, make_code, parse_code
from aigc_hub.pipelines.avcc.fingerprints import Kind
from aigc_hub.pipelines.avcc.likeness import similarity
from aigc_hub.pipelines.avcc.rules import Findings


@pytest.mark.parametrize("record_id", [1, 98, 36**8 - 1, 36**8, 2**62])
def test_a_code_parses_back_to_its_segments_and_record(record_id: int) -> None:
    code = make_code("156", "10005", "8361", record_id)

    assert code.startswith("MA.156.10005.8361/")
    parts = parse_code(code)
    assert (parts.country, parts.issuer, parts.node, parts.record_id) == (
        "156",
        "10005",
        "8361",
        record_id,
    )


def test_the_documented_example_is_record_98() -> None:
    assert make_code("156", "10005", "8361", 98) == "MA.156.10005.8361/0000002QJ"


@pytest.mark.parametrize(
    "typo",
    [
        "MA.156.10005.8361/0000002QK",  # check character changed
        "MA.156.10005.8316/0000002QJ",  # node digits swapped
        "MA.156.10005.8361/0000003QJ",  # serial changed
        "MA.157.10005.8361/0000002QJ",  # country changed
    ],
)
def test_a_mistyped_code_is_caught_by_its_check_character(typo: str) -> None:
    with pytest.raises(InvalidCode, match="check character"):
        parse_code(typo)


@pytest.mark.parametrize("text", ["", "MA.156.10005/0000002QJ", "XX.156.10005.8361/0000002QJ"])
def test_a_malformed_code_is_refused_with_the_expected_form(text: str) -> None:
    with pytest.raises(InvalidCode, match="expected MA"):
        parse_code(text)


def _found(**changes: object) -> Findings:
    base: dict[str, object] = {
        "integrity_ok": True,
        "declaration_problems": (),
        "model_name": "Stable-Diffusion-XL",
        "moderation": "allow",
    }
    return Findings(**(base | changes))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("changes", "decision", "level"),
    [
        ({}, "approved", "O"),
        ({"similarity": 0.5}, "approved", "G"),
        ({"model_name": "my-own-model"}, "approved", "G"),
        ({"model_name": "my-own-model", "similarity": 0.5}, "need_human", None),
        ({"moderation": "review"}, "need_human", None),
        ({"similarity": 0.95, "model_name": "x"}, "rejected", None),
        ({"near_duplicate": True, "nearest_record_id": 7, "similarity": 1.0}, "rejected", None),
        ({"moderation": "reject"}, "rejected", None),
        ({"integrity_ok": False}, "rejected", None),
        ({"declaration_problems": ("declaration: no model version",)}, "rejected", None),
    ],
)
def test_the_rubric_decides_by_refusals_then_score_bands(
    changes: dict[str, object], decision: str, level: str | None
) -> None:
    verdict = rules.judge(_found(**changes))

    assert (verdict.decision, verdict.level) == (decision, level)
    assert 0.0 <= verdict.score <= 100.0


def test_a_duplicate_names_the_coded_work_it_copies() -> None:
    verdict = rules.judge(_found(near_duplicate=True, nearest_record_id=7, similarity=1.0))

    assert verdict.reasons == ("duplicate: of coded work 7",)


@pytest.mark.parametrize(
    ("decision", "level", "refused"),
    [
        ("approved", "P", False),
        ("rejected", None, False),
        ("approved", None, True),
        ("rejected", "G", True),
        ("need_human", None, True),
    ],
)
def test_a_reviewer_approves_with_a_level_or_rejects_without(
    decision: str, level: str | None, refused: bool
) -> None:
    assert (rules.human_may_grant(decision, level) is not None) is refused  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kind", "distance", "expected"),
    [
        (Kind.IMAGE, 0.0, 1.0),
        (Kind.IMAGE, 24.0, 1.0),
        (Kind.IMAGE, 28.0, 0.5),
        (Kind.IMAGE, 32.0, 0.0),
        (Kind.VIDEO, 45.0, 0.0),
        (Kind.TEXT, 0.30, 1.0),
        (Kind.TEXT, 0.45, 0.0),
        (Kind.TEXT, 0.9, 0.0),
    ],
)
def test_resemblance_runs_from_the_duplicate_line_to_zero_a_few_bits_past_it(
    kind: Kind, distance: float, expected: float
) -> None:
    assert similarity(kind, distance) == pytest.approx(expected)
