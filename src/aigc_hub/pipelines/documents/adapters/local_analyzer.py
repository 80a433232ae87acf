"""The local analyzer: a versioned compliance policy's clauses matched semantically against a
document's chunks, with the embedding model the chunks were stored with.

Each clause has exemplar sentences (what breaking it sounds like). The exemplars are
embedded once. The chunks' stored vectors are compared with them by cosine similarity (the
vectors are normalised: a dot product); a chunk mixes several topics, so this only picks
each clause's candidate chunks (the nearest few past the policy's ``prefilter``). Their
sentences are embedded at review time (a few per document, not the whole document again)
and compared in turn: a clause whose nearest sentence reaches the policy's ``threshold`` is
a finding, quoting that sentence with its offsets in the document, so every finding points
at words the document really contains. The verdict follows the
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

from .analyzer import ChunkText, Finding, Report, Severity, report_of
from .embedder import Embedder

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

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
    #: Cosine similarity from which a sentence counts as breaking a clause.
    threshold: float = pydantic.Field(ge=0, le=1)
    #: Cosine similarity from which a chunk's sentences are compared with a clause.
    prefilter: float = pydantic.Field(0.25, ge=0, le=1)
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
            return report_of([], self.name, self.policy_version)
        missing = [c.text for c in chunks if c.vector is None]
        embedded = iter(await self.embedder.embed(missing)) if missing else iter(())
        vectors = np.stack([c.vector if c.vector is not None else next(embedded) for c in chunks])
        owners = np.asarray(exemplars.owner)
        # A chunk holds many sentences, so its vector says a clause *may* be broken in it:
        # the nearest chunks of each clause are candidates, and their sentences decide.
        by_chunk = vectors @ exemplars.matrix.T  # chunks x exemplars
        candidates: dict[int, list[int]] = {}
        for k in range(len(self.policy.clauses)):
            per_chunk = by_chunk[:, owners == k].max(axis=1)
            near = [int(i) for i in np.argsort(-per_chunk)[:CANDIDATES]]
            candidates[k] = [i for i in near if per_chunk[i] >= self.policy.prefilter]
        sentences = _sentences({i for near in candidates.values() for i in near}, chunks)
        findings: list[Finding] = []
        if sentences:
            sentence_vectors = await self.embedder.embed([text for *_, text in sentences])
            by_sentence = sentence_vectors @ exemplars.matrix.T  # sentences x exemplars
            for k, clause in enumerate(self.policy.clauses):
                rows = [n for n, (i, *_rest) in enumerate(sentences) if i in candidates[k]]
                if not rows:
                    continue
                scores = by_sentence[rows][:, owners == k].max(axis=1)
                best = int(scores.argmax())
                score = float(scores[best])
                if score >= self.policy.threshold:
                    findings.append(_finding(clause, chunks, sentences[rows[best]], score))
        return report_of(findings, self.name, self.policy_version)

    async def close(self) -> None:
        """Nothing of its own to release (the embedder is the pipeline's)."""

    async def _exemplar_vectors(self) -> _Exemplars:
        if self._exemplars is None:
            texts = [(k, e) for k, c in enumerate(self.policy.clauses) for e in c.exemplars]
            matrix = await self.embedder.embed([e for _, e in texts])
            self._exemplars = _Exemplars(matrix, [k for k, _ in texts])
        return self._exemplars


#: Chunks per clause whose sentences are compared with it.
CANDIDATES = 3

#: A sentence: its chunk's position in the document's list, its offsets in the chunk, text.
_Sentence = tuple[int, int, int, str]


def _sentences(positions: set[int], chunks: Sequence[ChunkText]) -> list[_Sentence]:
    """The sentences of the chunks at ``positions`` (trimmed, offsets in their chunk)."""
    out: list[_Sentence] = []
    for i in sorted(positions):
        text = chunks[i].text
        for m in _SENTENCE.finditer(text):
            a, b = m.start(), m.end()
            raw = text[a:b]
            a += len(raw) - len(raw.lstrip())
            b -= len(raw) - len(raw.rstrip())
            if b > a:
                out.append((i, a, b, text[a:b]))
    return out


def _finding(
    clause: Clause, chunks: Sequence[ChunkText], sentence: _Sentence, score: float
) -> Finding:
    """The finding of ``clause``, quoting ``sentence`` with its offsets in the document."""
    i, a, b, text = sentence
    chunk = chunks[i]
    return Finding(
        clause_id=clause.id,
        title=clause.title,
        severity=clause.severity,
        score=round(score, 4),
        evidence=text,
        chunk_index=chunk.index,
        start=chunk.start + a,
        end=chunk.start + b,
    )
