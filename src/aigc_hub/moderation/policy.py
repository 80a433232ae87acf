"""The versioned rule set: a TOML file read once, validated, its patterns compiled.

A policy file names its ``version`` (recorded with every decision, so a decision can be
explained later by the rules in force when it was made) and a list of ``[[rules]]``, each
with an ``id``, the ``verdict`` it gives when it hits, a short ``reason`` safe to show, and
one of three kinds:

- ``keyword``: ``keywords``, matched as whole words in the normalised text (CJK keywords,
  which have no word boundaries, as substrings);
- ``regex``: ``pattern``, a Python regular expression searched in the normalised text;
- ``semantic``: ``exemplars``, phrases whose meaning the rule catches, and a cosine
  ``threshold`` (embedding similarity with the prompt at or above it hits).

Keywords and exemplars are normalised like the text they are matched against. A file that
cannot be read or is invalid raises :class:`ConfigurationError` naming the file and field.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Final, Literal

import pydantic

from aigc_hub.core.errors import ConfigurationError
from aigc_hub.moderation.base import Verdict
from aigc_hub.moderation.normalize import normalize

#: The rule set shipped with the hub.
DEFAULT_POLICY: Final = Path(__file__).resolve().parent / "policies" / "default-v1.toml"

RuleVerdict = Literal[Verdict.REJECT, Verdict.HUMAN_REVIEW, Verdict.WATERMARK]


class _Rule(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)

    id: Annotated[str, pydantic.StringConstraints(pattern=r"^[a-z0-9][a-z0-9_.\-]{0,63}$")]
    verdict: RuleVerdict
    reason: Annotated[str, pydantic.StringConstraints(min_length=1, max_length=120)]


class KeywordRule(_Rule):
    """Hits when one of ``keywords`` appears as a whole word."""

    kind: Literal["keyword"]
    keywords: Annotated[list[str], pydantic.Field(min_length=1)]


class RegexRule(_Rule):
    """Hits when ``pattern`` is found in the normalised text."""

    kind: Literal["regex"]
    pattern: Annotated[str, pydantic.StringConstraints(min_length=1)]


class SemanticRule(_Rule):
    """Hits when the text's meaning is close to one of ``exemplars``."""

    kind: Literal["semantic"]
    exemplars: Annotated[list[str], pydantic.Field(min_length=1)]
    threshold: Annotated[float, pydantic.Field(gt=0.0, le=1.0)]


Rule = Annotated[KeywordRule | RegexRule | SemanticRule, pydantic.Field(discriminator="kind")]


class _PolicyFile(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)

    version: Annotated[str, pydantic.StringConstraints(pattern=r"^[A-Za-z0-9_.\-]{1,40}$")]
    rules: list[Rule]


@dataclass(frozen=True)
class PatternRule:
    """A keyword or regex rule, compiled.

    ``pattern`` is searched in the normalised text (and its spelled-out-words-joined form);
    ``in_runs``, for keyword rules, in each joined spelled-out run, as a substring.
    """

    id: str
    verdict: Verdict
    reason: str
    pattern: re.Pattern[str]
    in_runs: re.Pattern[str] | None = None

    def hits(self, forms: tuple[str, ...], runs: list[str]) -> bool:
        """Whether the rule hits any of the text's ``forms`` or spelled-out ``runs``."""
        if any(self.pattern.search(form) for form in forms):
            return True
        return self.in_runs is not None and any(self.in_runs.search(run) for run in runs)


@dataclass(frozen=True)
class Exemplars:
    """A semantic rule, its exemplars normalised."""

    id: str
    verdict: Verdict
    reason: str
    phrases: tuple[str, ...]
    threshold: float


@dataclass(frozen=True)
class Policy:
    """A loaded rule set: pattern rules (no model needed) and semantic rules."""

    version: str
    patterns: tuple[PatternRule, ...]
    semantic: tuple[Exemplars, ...]

    def reason_of(self, rule_id: str) -> str:
        """The reason text of rule ``rule_id``."""
        reasons = {r.id: r.reason for r in self.patterns} | {r.id: r.reason for r in self.semantic}
        return reasons[rule_id]


def load_policy(path: Path = DEFAULT_POLICY) -> Policy:
    """Read, validate and compile the policy at ``path``; ``ConfigurationError`` if it cannot."""
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigurationError(f"moderation policy {path.name}: {exc}") from exc
    try:
        parsed = _PolicyFile.model_validate(raw)
    except pydantic.ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ConfigurationError(f"moderation policy {path.name}: {where}: {first['msg']}") from exc
    ids = [rule.id for rule in parsed.rules]
    if len(ids) != len(set(ids)):
        dup = next(i for i in ids if ids.count(i) > 1)
        raise ConfigurationError(f"moderation policy {path.name}: rule id {dup!r} repeats")
    patterns: list[PatternRule] = []
    semantic: list[Exemplars] = []
    for rule in parsed.rules:
        if isinstance(rule, SemanticRule):
            phrases = tuple(normalize(p) for p in rule.exemplars)
            semantic.append(Exemplars(rule.id, rule.verdict, rule.reason, phrases, rule.threshold))
            continue
        if isinstance(rule, KeywordRule):
            words = [w for w in (normalize(k) for k in rule.keywords) if w]
            compiled = re.compile(_keywords_pattern(words))
            in_runs = re.compile("|".join(re.escape(w.replace(" ", "")) for w in words) or "(?!)")
            patterns.append(PatternRule(rule.id, rule.verdict, rule.reason, compiled, in_runs))
            continue
        try:
            compiled = re.compile(rule.pattern)
        except re.error as exc:
            raise ConfigurationError(
                f"moderation policy {path.name}: rule {rule.id!r}: bad pattern: {exc}"
            ) from exc
        patterns.append(PatternRule(rule.id, rule.verdict, rule.reason, compiled))
    return Policy(parsed.version, tuple(patterns), tuple(semantic))


def _keywords_pattern(words: list[str]) -> str:
    """One alternation; a keyword starting or ending in a word character needs a boundary."""
    parts = []
    for word in words:
        # CJK scripts have no spaces between words, so a boundary there would never match.
        left = r"(?<!\w)" if _latin_like(word[0]) else ""
        right = r"(?!\w)" if _latin_like(word[-1]) else ""
        parts.append(left + re.escape(word) + right)
    return "|".join(parts) or r"(?!)"


def _latin_like(ch: str) -> bool:
    """A word character of a script that separates words with spaces."""
    return (ch.isalnum() or ch == "_") and not _is_cjk(ch)


def _is_cjk(ch: str) -> bool:
    code = ord(ch)
    return (
        0x3040 <= code <= 0x30FF  # kana
        or 0x3400 <= code <= 0x9FFF  # CJK unified ideographs (and extension A)
        or 0xAC00 <= code <= 0xD7AF  # hangul syllables
        or 0xF900 <= code <= 0xFAFF  # compatibility ideographs
        or 0x20000 <= code <= 0x3FFFF  # extensions B and later
    )
