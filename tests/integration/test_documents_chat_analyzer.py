"""The hosted analyzer's adapter against a loopback OpenAI-compatible chat API: findings
must quote their chunk (an invented quote, an unknown clause or chunk is dropped), the
verdict follows the worst severity, and each failure of the vendor is the right error."""

from __future__ import annotations

import json
from typing import Any

import pytest

from aigc_hub.pipelines.documents.adapters.analyzer import (
    AnalysisRefused,
    AnalyzerOverloaded,
    AnalyzerUnavailable,
    ChunkText,
    Finding,
    report_of,
)
from aigc_hub.pipelines.documents.adapters.local_analyzer import load_policy
from aigc_hub.pipelines.documents.adapters.openai_chat import OpenAIChatAnalyzer
from aigc_hub.testing.openai_vendor import serve_vendor

TEXT = "Our fund pays guaranteed returns of twenty percent. The office moved in April."
CHUNKS = [ChunkText(0, 100, 100 + len(TEXT), TEXT)]


def answering(findings: list[dict[str, Any]]) -> str:
    return json.dumps({"findings": findings})


async def review(answer: Any) -> Any:
    async with serve_vendor(chat=answer) as vendor:
        analyzer = OpenAIChatAnalyzer(
            base_url=vendor.base_url, api_key=vendor.api_key, model="m", policy=load_policy()
        )
        try:
            return await analyzer.analyze("doc_1", CHUNKS)
        finally:
            await analyzer.close()


async def test_a_quoted_finding_is_kept_with_its_offsets_in_the_document() -> None:
    quote = "guaranteed returns of twenty percent"
    report = await review(
        answering([{"clause_id": "guaranteed-returns", "chunk_index": 0, "quote": quote}])
    )
    [finding] = report.findings
    assert (report.verdict, finding.severity, finding.evidence) == ("fail", "high", quote)
    assert TEXT[finding.start - 100 : finding.end - 100] == quote


@pytest.mark.parametrize(
    "found",
    [
        {"clause_id": "guaranteed-returns", "chunk_index": 0, "quote": "risk-free profits"},
        {"clause_id": "no-such-clause", "chunk_index": 0, "quote": "guaranteed returns"},
        {"clause_id": "guaranteed-returns", "chunk_index": 7, "quote": "guaranteed returns"},
    ],
    ids=["invented-quote", "unknown-clause", "unknown-chunk"],
)
async def test_a_finding_that_does_not_quote_its_chunk_is_dropped(found: dict[str, Any]) -> None:
    report = await review(answering([found]))
    assert (report.verdict, report.findings) == ("pass", ())


async def test_an_answer_that_is_not_the_findings_json_is_retried() -> None:
    with pytest.raises(AnalyzerUnavailable):
        await review({"verdict": "fine", "findings": "none"})


async def test_vendor_failures_are_overload_outage_or_refusal() -> None:
    async with serve_vendor() as vendor:
        analyzer = OpenAIChatAnalyzer(
            base_url=vendor.base_url, api_key=vendor.api_key, model="m", policy=load_policy()
        )
        try:
            vendor.fail_next(1, 503, retry_after_s=7)
            with pytest.raises(AnalyzerOverloaded) as overloaded:
                await analyzer.analyze("doc_1", CHUNKS)
            vendor.fail_next(1, 500)
            with pytest.raises(AnalyzerUnavailable):
                await analyzer.analyze("doc_1", CHUNKS)
            vendor.fail_next(1, 400)
            with pytest.raises(AnalysisRefused):
                await analyzer.analyze("doc_1", CHUNKS)
        finally:
            await analyzer.close()
    assert overloaded.value.retry_after_s == 7


def test_the_verdict_follows_the_worst_severity() -> None:
    def found(severity: str, score: float) -> Finding:
        return Finding("c", "t", severity, score, "e", 0, 0, 1)  # type: ignore[arg-type]

    assert report_of([], "a", "p").verdict == "pass"
    assert report_of([found("low", 0.9)], "a", "p").verdict == "review"
    medium = report_of([found("low", 0.9), found("medium", 0.6)], "a", "p")
    assert (medium.verdict, medium.score) == ("review", 0.42)
    assert report_of([found("medium", 0.9), found("high", 0.5)], "a", "p").verdict == "fail"
