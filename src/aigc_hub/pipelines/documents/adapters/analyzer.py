"""The ``Analyzer`` protocol: a compliance review of one stored document (seed 003 §7's
``analyzeDocument``), and what it answers.

An analyzer reads the document's chunks (their text and, for the local one, their stored
vectors) and answers a :class:`Report`: a verdict, a risk score in [0, 1] and findings, each
naming the policy clause it breaks and quoting the document (extractive evidence: text that
is in the document, with where it is). Overload (429/503) raises :class:`AnalyzerOverloaded`,
which turns the pipeline's backpressure on; other outages raise :class:`AnalyzerUnavailable`
(retried); a refusal of the input raises :class:`AnalysisRefused` (dead-lettered).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, Protocol

from aigc_hub.core.errors import PermanentError, RetryableError

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

Verdict = Literal["pass", "review", "fail"]
Severity = Literal["low", "medium", "high"]


@dataclass(frozen=True)
class ChunkText:
    """One chunk of the document under review; ``vector`` when the store has it."""

    index: int
    start: int
    end: int
    text: str
    vector: npt.NDArray[np.float32] | None = None


@dataclass(frozen=True)
class Finding:
    """A clause the document seems to break, and the words of the document that show it."""

    clause_id: str
    title: str
    severity: Severity
    score: float
    evidence: str
    chunk_index: int
    start: int
    end: int


@dataclass(frozen=True)
class Report:
    """An analysis: verdict, risk score in [0, 1], findings, and who made it."""

    verdict: Verdict
    score: float
    analyzer: str
    policy_version: str
    findings: Sequence[Finding] = field(default_factory=tuple)


#: What a finding of each severity weighs in the document's risk score.
WEIGHT: dict[Severity, float] = {"high": 1.0, "medium": 0.7, "low": 0.4}


def report_of(findings: Sequence[Finding], analyzer: str, policy_version: str) -> Report:
    """The report of ``findings``: high severity fails, medium or low asks for a human
    review, none passes; the risk score is the heaviest finding's weight times its score."""
    severities = {f.severity for f in findings}
    verdict: Verdict = "fail" if "high" in severities else "review" if severities else "pass"
    score = max((WEIGHT[f.severity] * f.score for f in findings), default=0.0)
    return Report(verdict, round(score, 4), analyzer, policy_version, tuple(findings))


class AnalyzerOverloaded(RetryableError):
    """The analyzer answered 429/503: back off (``retry_after_s`` when it said how long)."""

    def __init__(self, message: str, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class AnalyzerUnavailable(RetryableError):
    """The analyzer could not be reached or failed; try again later."""


class AnalysisRefused(PermanentError):
    """The analyzer refuses this document (the input itself): retrying will not help."""


class Analyzer(Protocol):
    """Reviews one document against a compliance policy."""

    @property
    def name(self) -> str:
        """Which analyzer and model, e.g. ``local:all-MiniLM-L6-v2@…``."""
        ...

    @property
    def policy_version(self) -> str:
        """The policy version the reports are made against."""
        ...

    async def analyze(self, document_id: str, chunks: Sequence[ChunkText]) -> Report:
        """The report on the document made of ``chunks`` (in order)."""
        ...

    async def close(self) -> None:
        """Release connections."""
        ...
