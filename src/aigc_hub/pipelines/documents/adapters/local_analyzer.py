"""The local analyzer: a versioned compliance policy's clauses matched semantically against a
document's chunks, with the embedding model the chunks were stored with.

Each clause has exemplar sentences (what breaking it sounds like). The exemplars are
embedded once; a chunk's stored vector is compared with them by cosine similarity (the
vectors are normalised: a dot product). A clause whose best chunk reaches the policy's
threshold is a finding; its evidence is the sentence of that chunk nearest the clause
(those few sentences are embedded at review time), quoted with its offsets in the document,
so every finding points at words the document really contains. The verdict follows the
worst severity found: high fails, medium or low asks for a human review, none passes.
"""

from __future__ import annotations

import importlib.resources
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pydantic

from aigc_hub.core.errors import ConfigurationError

from .analyzer import ChunkText, Finding, Report, Severity, Verdict
from .embedder import Embedder

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

#: What a finding of each severity weighs in the document's risk score.
WEIGHT: dict[Severity, float] = {"high": 1.0, "medium": 0.7, "low": 0.4}
_SENTENCE = re.compile(r"[^.!?。！？;\n]+[.!?。！？;]?")


class Clause(pydantic.BaseModel):
    """One rule of the policy and sentences that break it."""

    id: str = pydantic.Field(pattern=r"^[a-z0-9-]{1,60}$")
    title: str
    severity: Severity
    exemplars: list[str] = pydantic.Field(min_length=1)


class Policy(pydantic.BaseModel):
    """A versioned compliance policy."""

    version: str = pydantic.Field(pattern=r"^[A-Za-z0-9._-]{1,60}$")
    title: str = ""
    #: Cosine similarity from which a chunk counts as breaking a clause.
    threshold: float = pydantic.Field(ge=0, le=1)
    clauses: list[Clause] = pydantic.Field(min_length=1)


def load_policy(path: str = "") -> Policy:
    """The policy in ``path`` (JSON), or the one the hub ships; ConfigurationError when the
    file cannot be read or is not a policy."""
    try:
        if path:
            text = Path(path).read_text(encoding="utf-8")
        else:
            shipped = importlib.resources.files("aigc_hub.pipelines.documents") / "policies"
            text = (shipped / "compliance-v1.json").read_text(encoding="utf-8")
        return Policy.model_validate_json(text)
    except (OSError, pydantic.ValidationError) as exc:
        where = path or "the shipped policy"
        raise ConfigurationError(f"cannot load the compliance policy {where}: {exc}") from exc


@dataclass
class _Exemplars:
    matrix: npt.NDArray[np.float32]
    owner: list[int]  # row -> clause index


class LocalAnalyzer:
    """Reviews documents against ``policy`` with ``embedder`` (see the module docstring)."""

    def __init__(self, embedder: Embedder, policy: Policy) -> None:
        self.embedder = embedder
        self.policy = policy
        self._exemplars: _Exemplars | None = None

    @property
    def name(self) -> str:
        return f"local:{self.embedder.name}"

    @property
    def policy_version(self) -> str:
        return self.policy.version

    async def analyze(self, document_id: str, chunks: Sequence[ChunkText]) -> Report:
        import numpy as np

        exemplars = await self._exemplar_vectors()
        if not chunks:
            return Report("pass", 0.0, self.name, self.policy_version)
        missing = [c.text for c in chunks if c.vector is None]
        embedded = iter(await self.embedder.embed(missing)) if missing else iter(())
        vectors = np.stack([c.vector if c.vector is not None else next(embedded) for c in chunks])
        similarity = vectors @ exemplars.matrix.T  # chunks x exemplars
        owners = np.asarray(exemplars.owner)
        findings: list[Finding] = []
        for k, clause in enumerate(self.policy.clauses):
            per_chunk = similarity[:, owners == k].max(axis=1)
            best = int(per_chunk.argmax())
            score = float(per_chunk[best])
            if score < self.policy.threshold:
                continue
            rows = exemplars.matrix[owners == k]
            findings.append(await self._finding(clause, chunks[best], rows, score))
        return Report(
            verdict_of(findings),
            round(max((WEIGHT[f.severity] * f.score for f in findings), default=0.0), 4),
            self.name,
            self.policy_version,
            tuple(findings),
        )

    async def close(self) -> None:
        """Nothing of its own to release (the embedder is the pipeline's)."""

    async def _exemplar_vectors(self) -> _Exemplars:
        if self._exemplars is None:
            texts = [(k, e) for k, c in enumerate(self.policy.clauses) for e in c.exemplars]
            matrix = await self.embedder.embed([e for _, e in texts])
            self._exemplars = _Exemplars(matrix, [k for k, _ in texts])
        return self._exemplars

    async def _finding(
        self, clause: Clause, chunk: ChunkText, rows: npt.NDArray[np.float32], score: float
    ) -> Finding:
        """The finding of ``clause`` in ``chunk``, quoting its sentence nearest the clause."""
        spans = [(m.start(), m.end()) for m in _SENTENCE.finditer(chunk.text)]
        spans = [(a, b) for a, b in spans if chunk.text[a:b].strip()] or [(0, len(chunk.text))]
        sentences = [chunk.text[a:b] for a, b in spans]
        nearest = (await self.embedder.embed(sentences)) @ rows.T
        a, b = spans[int(nearest.max(axis=1).argmax())]
        text = chunk.text[a:b]
        a += len(text) - len(text.lstrip())
        b -= len(text) - len(text.rstrip())
        return Finding(
            clause_id=clause.id,
            title=clause.title,
            severity=clause.severity,
            score=round(score, 4),
            evidence=chunk.text[a:b],
            chunk_index=chunk.index,
            start=chunk.start + a,
            end=chunk.start + b,
        )


def verdict_of(findings: Sequence[Finding]) -> Verdict:
    """High fails, medium or low asks for a human review, nothing passes."""
    severities = {f.severity for f in findings}
    if "high" in severities:
        return "fail"
    return "review" if severities else "pass"
