"""The hybrid search's ranking: meaning first, wording to tell paraphrases from the source."""

from __future__ import annotations

import pytest

from aigc_hub.pipelines.documents import rules


def test_the_chunk_holding_the_querys_words_outranks_a_nearer_paraphrase() -> None:
    query = "The harbour handled more containers this year"
    texts = [
        "Port traffic grew: the docks moved a larger number of boxes in twelve months.",
        "The harbour handled more containers this year, and cranes were repainted.",
    ]
    ranked = rules.rerank(query, texts, [0.80, 0.70], k=2)
    assert [r.index for r in ranked] == [1, 0]
    assert ranked[0].score == pytest.approx(0.70 + rules.LEXICAL_WEIGHT * 1.0)


@pytest.mark.parametrize(
    ("query", "texts", "similarities", "k", "order"),
    [
        ("tides", ["tides a", "tides b"], [0.2, 0.9], 2, [1, 0]),  # same words: meaning decides
        ("tides", ["tides here", "no match"], [0.2, 0.9], 2, [0, 1]),  # the words win
        ("", ["a", "b"], [0.1, 0.3], 2, [1, 0]),  # no words: cosine alone
        ("same", ["same", "same"], [0.5, 0.5], 2, [0, 1]),  # ties keep the store's order
        ("x", ["x", "y", "z"], [0.3, 0.2, 0.1], 1, [0]),  # only k come back
        ("潮汐 发电", ["潮汐 发电 站", "其他"], [0.4, 0.5], 2, [0, 1]),  # any script's words
    ],
)
def test_rerank_table(
    query: str, texts: list[str], similarities: list[float], k: int, order: list[int]
) -> None:
    assert [r.index for r in rules.rerank(query, texts, similarities, k)] == order


def test_the_pool_is_wider_than_what_is_asked() -> None:
    assert rules.pool_size(3) == rules.MIN_POOL
    assert rules.pool_size(30) == 600
    assert rules.pool_size(100) == rules.MAX_POOL
