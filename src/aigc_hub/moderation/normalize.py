"""Text normalisation before matching, so trivial evasions do not pass.

Rules match the *normalised* text: NFKC (full-width and compatibility forms fold to their
plain letters: ``ｂｏｍｂ`` → ``bomb``), case folding (``BOMB``, ``ß``), every format character
removed (Unicode category ``Cf``: zero-width spaces and joiners, soft hyphens, bidi controls
that hide or reorder letters), and runs of whitespace collapsed to one space. A second form
joins letters spelled out one by one (``b o m b``, ``b.o.m.b``, ``b-o-m-b``) so a spaced-out
word still matches, without joining ordinary words (``a skill`` never becomes ``askill``);
keywords are also searched inside each such run, which may have swallowed a one-letter word
next to it (``a d e e p f a k e`` → ``adeepfake``).
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from typing import Final

_SPACES: Final = re.compile(r"\s+")
# Three or more single word characters separated by one run of spacing or punctuation:
# the shape of a word spelled out to dodge a keyword. Two letters ("a b") are too common.
_SPELLED: Final = re.compile(r"(?<!\w)\w(?:[\s.\-_*·|/\\]+\w(?!\w)){2,}")
_SEPARATORS: Final = re.compile(r"[\s.\-_*·|/\\]+")


def normalize(text: str) -> str:
    """NFKC, casefolded, format characters removed, whitespace collapsed and stripped."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    # casefold can produce sequences NFKC would compose differently; normalise once more.
    folded = unicodedata.normalize("NFKC", folded)
    visible = "".join(ch for ch in folded if unicodedata.category(ch) != "Cf")
    return _SPACES.sub(" ", visible).strip()


def join_spelled(normalized: str) -> str:
    """``normalized`` with spelled-out words joined (``k i l l`` → ``kill``)."""
    return _SPELLED.sub(lambda m: _SEPARATORS.sub("", m.group(0)), normalized)


def spelled_runs(normalized: str) -> list[str]:
    """Each spelled-out run of ``normalized``, joined (``a d e e p f a k e`` → ``adeepfake``).

    A run may swallow a neighbouring one-letter word (the article in ``a b o m b``), so
    keywords are searched in runs as substrings, not as whole words.
    """
    return [_SEPARATORS.sub("", m.group(0)) for m in _SPELLED.finditer(normalized)]


def variants(text: str) -> tuple[str, ...]:
    """The forms rules are matched against: the normalised text, and its joined form."""
    base = normalize(text)
    joined = join_spelled(base)
    return (base,) if joined == base else (base, joined)


def digest(normalized: str) -> str:
    """``sha256:<hex>`` of the normalised text: evidence that names a text without holding it."""
    return "sha256:" + hashlib.sha256(normalized.encode("utf-8")).hexdigest()
