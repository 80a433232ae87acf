"""The hosted analyzer: an OpenAI-compatible chat model reviews the document against the
same versioned policy as the local one.

The model gets the policy's clauses and the document's chunks (numbered, up to
``max_chars``) and must answer a JSON object of findings, each naming a clause, a chunk and
a verbatim quote from it. A finding whose clause or chunk does not exist, or whose quote is
not in that chunk, is dropped: evidence is extractive or it is not evidence. Verdict and
score follow the same rule as the local analyzer's. 429/503 raise ``AnalyzerOverloaded``
(with the vendor's ``Retry-After``), other failures ``AnalyzerUnavailable``, a refused
request ``AnalysisRefused``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import httpx
import pydantic

from .analyzer import (
    AnalysisRefused,
    AnalyzerOverloaded,
    AnalyzerUnavailable,
    ChunkText,
    Finding,
    Report,
    report_of,
)
from .local_analyzer import Policy


class _Found(pydantic.BaseModel):
    clause_id: str
    chunk_index: int
    quote: str
    confidence: float = pydantic.Field(1.0, ge=0, le=1)


class _Answer(pydantic.BaseModel):
    findings: list[_Found] = pydantic.Field(default_factory=list)


class OpenAIChatAnalyzer:
    """Reviews documents with a chat model at an OpenAI-compatible API."""

    def __init__(
        self,
        *,
        base_url: str,
        api_key: str,
        model: str,
        policy: Policy,
        timeout_s: float = 60.0,
        max_chars: int = 24_000,
    ) -> None:
        self.model = model
        self.policy = policy
        self.max_chars = max_chars
        self._client = httpx.AsyncClient(
            base_url=base_url.rstrip("/"),
            headers={"Authorization": f"Bearer {api_key}"},
            timeout=timeout_s,
            trust_env=False,
        )

    @property
    def name(self) -> str:
        return f"openai:{self.model}"

    @property
    def policy_version(self) -> str:
        return self.policy.version

    async def analyze(self, document_id: str, chunks: Sequence[ChunkText]) -> Report:
        shown = self._excerpt(chunks)
        body = {
            "model": self.model,
            "temperature": 0,
            "response_format": {"type": "json_object"},
            "messages": [
                {"role": "system", "content": self._instructions()},
                {"role": "user", "content": "\n\n".join(f"[{c.index}] {c.text}" for c in shown)},
            ],
        }
        content = await self._complete(body)
        try:
            answer = _Answer.model_validate(json.loads(content))
        except (ValueError, pydantic.ValidationError) as exc:
            raise AnalyzerUnavailable(
                f"the model's answer is not the findings JSON: {exc}"
            ) from exc
        findings = self._checked(answer.findings, {c.index: c for c in shown})
        return report_of(findings, self.name, self.policy_version)

    async def close(self) -> None:
        await self._client.aclose()

    def _instructions(self) -> str:
        clauses = "\n".join(
            f"- {c.id} ({c.severity}): {c.title}. For example: {c.exemplars[0]}"
            for c in self.policy.clauses
        )
        return (
            f"You review documents for compliance with policy {self.policy.version}:\n"
            f"{clauses}\n"
            "The user sends the document as numbered chunks. Answer only a JSON object "
            '{"findings": [{"clause_id": ..., "chunk_index": ..., "quote": ..., '
            '"confidence": 0..1}]} listing each clause the document breaks, with a quote '
            "copied verbatim from that chunk. No finding: an empty list."
        )

    def _excerpt(self, chunks: Sequence[ChunkText]) -> list[ChunkText]:
        """The chunks that fit in ``max_chars``, in order (a long document is cut)."""
        shown: list[ChunkText] = []
        used = 0
        for chunk in chunks:
            used += len(chunk.text)
            if used > self.max_chars and shown:
                break
            shown.append(chunk)
        return shown

    async def _complete(self, body: dict[str, object]) -> str:
        try:
            answer = await self._client.post("/chat/completions", json=body)
        except httpx.TimeoutException as exc:
            raise AnalyzerUnavailable(f"the analyzer did not answer in time: {exc!r}") from exc
        except httpx.HTTPError as exc:
            raise AnalyzerUnavailable(f"the analyzer cannot be reached: {exc!r}") from exc
        if answer.status_code in (429, 503):
            raise AnalyzerOverloaded(
                f"the analyzer is overloaded ({answer.status_code})",
                _retry_after(answer.headers.get("retry-after")),
            )
        if answer.status_code >= 500:
            raise AnalyzerUnavailable(f"the analyzer failed: {answer.status_code}")
        if answer.status_code >= 400:
            raise AnalysisRefused(f"the analyzer refused the document: {_message(answer)}")
        try:
            return str(answer.json()["choices"][0]["message"]["content"])
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise AnalyzerUnavailable(f"not a chat completion: {answer.text[:200]}") from exc

    def _checked(self, found: list[_Found], chunks: dict[int, ChunkText]) -> list[Finding]:
        """The findings that quote their chunk; one per clause, the most confident."""
        clauses = {c.id: c for c in self.policy.clauses}
        best: dict[str, Finding] = {}
        for f in found:
            clause, chunk = clauses.get(f.clause_id), chunks.get(f.chunk_index)
            quote = f.quote.strip()
            at = chunk.text.find(quote) if chunk is not None and quote else -1
            if clause is None or chunk is None or at < 0:
                continue
            finding = Finding(
                clause_id=clause.id,
                title=clause.title,
                severity=clause.severity,
                score=f.confidence,
                evidence=quote,
                chunk_index=chunk.index,
                start=chunk.start + at,
                end=chunk.start + at + len(quote),
            )
            if clause.id not in best or best[clause.id].score < finding.score:
                best[clause.id] = finding
        return list(best.values())


def _retry_after(value: str | None) -> float | None:
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def _message(answer: httpx.Response) -> str:
    try:
        return str(answer.json()["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return answer.text[:200]
