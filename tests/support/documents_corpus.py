"""A corpus of real documents for the ``documents`` pipeline's tests, built offline.

Seed 003's acceptance test asks for "500 real documents of mixed formats" and a search probe
per document. The text is real prose found on this machine: the long descriptions in the
installed distributions' METADATA, the licences, READMEs and docs they ship (found through
their RECORD, not by walking site-packages), the standard library's module docstrings and
text files, and the pydoc topics. Each text is normalised the way the parser normalises and
cut to 12,000 words; one past 1,000 words is cut into sections of 500+ words at paragraph
breaks: the project's environment holds ~240 distinct texts of 300+ words, ~360,000 words
once near-copies are dropped, so 500 documents average ~550 words.

Duplicates are dropped: the same content (MIT and Apache licences ship dozens of times),
the same first 300 characters (a licence under another copyright line), and near-copies
(a README whose sentences mostly appeared already, in its METADATA).

:func:`corpus` then renders the texts, shuffled by ``seed``, as ``.txt`` (40 %), ``.md``,
``.html``, ``.pdf`` and ``.docx`` (15 % each), and gives each a probe: one sentence of 8-30
words that occurs in no other document of the corpus (compared after whitespace
normalisation and case folding). The scan is cached in-process; so is each corpus.
"""

from __future__ import annotations

import functools
import hashlib
import os
import random
import re
import sysconfig
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from aigc_hub.pipelines.documents import formats
from tests.support import documents_render as render

MIN_WORDS = 300
MAX_WORDS = 12_000
#: Longer texts are cut into sections of about this many words.
SECTION_WORDS = 500
WHOLE_UP_TO = 1_000
PROBE_WORDS = (8, 30)
#: The format of the i-th document is CYCLE[i % 20]: 40 % text, 15 % each of the others.
CYCLE = (
    "txt", "md", "html", "pdf", "docx", "txt", "txt", "md", "html", "pdf",
    "txt", "docx", "txt", "md", "html", "pdf", "txt", "docx", "txt", "txt",
)  # fmt: skip

_DOC_FILE = re.compile(
    r"(?:^|/)(?:(?:licen[cs]e|copying|notice|authors|readme)[^/]*|[^/]+\.(?:md|rst|txt))$", re.I
)
_NOT_PROSE = re.compile(
    r"\.dist-info/(?:RECORD|top_level\.txt|entry_points\.txt|WHEEL|INSTALLER|REQUESTED)$"
    r"|(?:requirements[^/]*|SOURCES|dependency_links|namespace_packages|top_level)\.txt$",
    re.I,
)
_DOCSTRING = re.compile(r'\A(?:\s*#[^\n]*\n)*\s*[rRuU]?("""|\'\'\')(.*?)\1', re.S)
_STDLIB_SKIP = frozenset({"site-packages", "dist-packages", "test", "tests", "idle_test"})
_WORDY = re.compile(r"(?<!\S)[A-Za-z][a-z]+[,.;:!?)]*(?!\S)")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z])")
_PROBE_WORD = re.compile(r"[(\"']?[A-Za-z][A-Za-z'-]*[,.;:!?)\"']*")
_MARKUP = re.compile(r"[<>{}\[\]|`*_#=\\/@~^$%\xad]|\s[-+]\s|https?:")
#: Enough for 12,000 words of prose; the rest of a longer file is cut anyway.
_READ_CAP = 128 * 1024
_PROSE_SAMPLE = 8_000  # characters from the start judged for prose


@dataclass(frozen=True)
class CorpusDocument:
    """A document as a user uploads it, the text it carries, and a sentence unique to it."""

    name: str
    data: bytes
    mime: str
    text: str
    probe: str


@dataclass(frozen=True)
class Source:
    """A distinct real text: where it comes from and its paragraphs (normalised)."""

    origin: str
    title: str
    paragraphs: tuple[str, ...]


def corpus(n: int = 500, seed: int = 0) -> list[CorpusDocument]:
    """``n`` documents of mixed formats, each with a unique probe; the same for a given
    ``seed`` and set of installed packages. Raises ValueError when fewer texts exist."""
    return list(_corpus(n, seed))


def normalized(text: str) -> str:
    """``text`` as probes are compared: whitespace collapsed, case folded."""
    return " ".join(text.split()).casefold()


@functools.cache
def _corpus(n: int, seed: int) -> tuple[CorpusDocument, ...]:
    pool = sources()
    candidates = probe_candidates()
    rng = random.Random(seed)
    order = list(range(len(pool)))
    rng.shuffle(order)
    chosen = [(index, rng.choice(candidates[index])) for index in order if candidates[index]]
    if len(chosen) < n:
        raise ValueError(f"only {len(chosen)} documents with a unique probe exist here, not {n}")
    documents = []
    for number, (index, probe) in enumerate(chosen[:n]):
        source = pool[index]
        kind = CYCLE[number % len(CYCLE)]
        name, data, mime, text = render.render(number, kind, source.title, source.paragraphs)
        documents.append(CorpusDocument(name, data, mime, text, probe))
    return tuple(documents)


# --- the scan -----------------------------------------------------------------------------


@functools.cache
def sources() -> tuple[Source, ...]:
    """Every distinct real text of 300+ words on this machine, sectioned (cached)."""
    seen: set[bytes] = set()
    openings: set[str] = set()
    sentences: set[str] = set()
    found: list[Source] = []
    for origin, raw in sorted(_texts()):
        text = formats.normalize_text(raw)
        sample = text[:_PROSE_SAMPLE].split()
        if len(sample) < MIN_WORDS and len(text.split()) < MIN_WORDS:
            continue
        if len(_WORDY.findall(text[:_PROSE_SAMPLE])) < 0.6 * len(sample):
            continue  # tables, test vectors, code: not prose
        key = normalized(text)
        digest = hashlib.blake2b(key.encode(), digest_size=16).digest()
        if digest in seen or key[:300] in openings:
            continue
        seen.add(digest)
        openings.add(key[:300])
        for title, paragraphs in _sections(origin, text):
            if _near_copy(paragraphs, sentences):
                continue
            found.append(Source(origin, title, paragraphs))
    return tuple(found)


def _texts() -> Iterator[tuple[str, str]]:
    yield from _installed_texts()
    yield from _stdlib_texts()


def _installed_texts() -> Iterator[tuple[str, str]]:
    site = Path(sysconfig.get_paths()["purelib"])
    for info in sorted(site.glob("*.dist-info")):
        metadata = _read(info / "METADATA")
        if metadata:
            yield f"{info.name}/METADATA", metadata.partition("\n\n")[2]
        record = _read(info / "RECORD") or ""
        for line in record.splitlines():
            # path,hash,size; a path with a comma in it is quoted, and never a doc file's.
            path, _, size = line.rsplit(",", 2) if line.count(",") >= 2 else ("", "", "")
            if not _DOC_FILE.search(path) or _NOT_PROSE.search(path) or path.startswith('"'):
                continue
            if size.isdigit() and int(size) < MIN_WORDS * 5:
                continue  # too short to hold 300 words: not worth opening
            text = _read(site / path)
            if text:
                yield path, text


def _stdlib_texts() -> Iterator[tuple[str, str]]:
    from pydoc_data.topics import topics

    for name in sorted(topics):
        yield f"pydoc/{name}", topics[name]
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    for folder, dirs, files in os.walk(stdlib):
        dirs[:] = sorted(d for d in dirs if d not in _STDLIB_SKIP and not d.startswith("__"))
        for name in sorted(files):
            path = Path(folder, name)
            if name.endswith(".py"):
                match = _DOCSTRING.match(_read(path) or "")
                if match:
                    yield f"stdlib/{path.relative_to(stdlib)}", match.group(2)
            elif _DOC_FILE.search(name):
                text = _read(path)
                if text:
                    yield f"stdlib/{path.relative_to(stdlib)}", text


def _read(path: Path) -> str | None:
    try:
        with path.open("rb") as file:
            data = file.read(_READ_CAP)
    except OSError:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        if len(data) == _READ_CAP and error.start >= _READ_CAP - 3:
            return data[: error.start].decode("utf-8")  # a character cut by the cap
        return None


def _sections(origin: str, text: str) -> Iterator[tuple[str, tuple[str, ...]]]:
    paragraphs = [p for p in text.split("\n\n") if p.strip()]
    kept: list[str] = []
    total = 0
    for paragraph in paragraphs:
        kept.append(paragraph.strip("\n"))
        total += len(paragraph.split())
        if total >= MAX_WORDS:
            break
    title = _title(origin)
    if total <= WHOLE_UP_TO:
        yield title, tuple(kept)
        return
    section: list[str] = []
    words = number = 0
    for paragraph in kept:
        section.append(paragraph)
        words += len(paragraph.split())
        if words >= SECTION_WORDS and total - words >= MIN_WORDS:
            number += 1
            yield f"{title} (part {number})", tuple(section)
            total -= words
            section, words = [], 0
    if section:
        yield f"{title} (part {number + 1})", tuple(section)


def _title(origin: str) -> str:
    if origin.startswith("pydoc/"):
        return f"Python reference: {origin[6:]}"
    parts = origin.split("/")
    head = parts[0].split("-")[0] if parts[0].endswith(".dist-info") else parts[0]
    return f"{head}: {parts[-1]}" if len(parts) > 1 else head


def _near_copy(paragraphs: tuple[str, ...], seen: set[str]) -> bool:
    # A near-copy is mostly sentences already met (a README repeated in METADATA, a licence
    # under another copyright line); the first copy met, in sorted order, is kept.
    met = {normalized(s) for p in paragraphs for s in _SENTENCE_END.split(p)} - {""}
    repeated = len(met & seen)
    seen |= met
    return repeated * 2 > len(met)


# --- probes -------------------------------------------------------------------------------


@functools.cache
def probe_candidates() -> tuple[tuple[str, ...], ...]:
    """For each source, its sentences fit to be a probe that occur in no other source's
    document, whatever format either is rendered in."""
    # A sentence P found in another document D has its inner words (all but the first and
    # last, which may be cut inside D's words) as whole words of D. So P occurs nowhere else
    # when the run of its 2nd-7th words belongs to its own source alone, among the runs of
    # every text a rendering may carry (render.word_streams), compared as case folded
    # latin-1 (the PDF's text). P is plain words only, so a run through a list marker, a
    # heading mark or a number, which the streams may lack, can never be P's.
    pool = sources()
    fit = [[(s, tuple(s.casefold().split()[1:7])) for s in _sentences(src)] for src in pool]
    holders: dict[tuple[str, ...], set[int]] = {gram: set() for c in fit for _, gram in c}
    for index, source in enumerate(pool):
        for stream in render.word_streams(source.title, source.paragraphs):
            words = render.latin1(stream).casefold().split()
            for gram in zip(*(words[i:] for i in range(6)), strict=False):
                if gram in holders:
                    holders[gram].add(index)
    return tuple(
        tuple(s for s, gram in candidates if holders[gram] == {index})
        for index, candidates in enumerate(fit)
    )


def _sentences(source: Source) -> Iterator[str]:
    # Whole sentences of plain words (no numbers, markup, paths or URLs) in the characters a
    # PDF can carry, outside lists (whose renderings drop the item markers).
    for paragraph in source.paragraphs:
        if render.is_list(paragraph):
            continue
        for sentence in _SENTENCE_END.split(" ".join(paragraph.split())):
            words = sentence.split()
            if not PROBE_WORDS[0] <= len(words) <= PROBE_WORDS[1]:
                continue
            if not sentence[0].isupper() or sentence[-1] not in ".!?":
                continue
            if _MARKUP.search(sentence) or sentence != render.latin1(sentence):
                continue
            if all(_PROBE_WORD.fullmatch(word) for word in words):
                yield sentence
