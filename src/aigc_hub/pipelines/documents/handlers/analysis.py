"""``ai-analysis-workers`` (seed 003 §7): ``ai-analysis-requests`` → the analyzer →
the report, the task completed, ``ai-analysis-completed``.

The document's chunks come back from the vector store with their vectors (the local
analyzer compares them with its policy; nothing is embedded twice). Backpressure first: while
it is on, each analysis waits the seed's delay before calling the analyzer. An analyzer
answering 429/503 turns backpressure on for every process of the hub and fails this try
(retried with back-off, then redelivered later: the request waits in the log, the user
sees nothing but a slower analysis). One commit then stores the report (unique per document
and policy version), moves the task to ``completed`` with the summary, and emits
``ai-analysis-completed``; a redelivery finds the analysis done and does nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses

from sqlalchemy.ext.asyncio import AsyncConnection

from aigc_hub.core.envelope import Envelope
from aigc_hub.core.errors import StaleTransition
from aigc_hub.reliability.outbox import Routed
from aigc_hub.runtime.context import HandlerContext
from aigc_hub.store.dialects import dialect_of

from .. import events, records
from ..adapters.analyzer import AnalyzerOverloaded, ChunkText, Report
from ..models import documents_analysis_reports
from ..state import Documents
from ..states import TaskStatus


async def on_request(docs: Documents, env: Envelope, ctx: HandlerContext) -> list[Envelope]:
    """Analyse one stored document (see the module docstring)."""
    request = ctx.payload_as(events.AnalysisRequested)
    async with ctx.read() as conn:
        task = await records.load(conn, request.taskId)
    if task is None or task.status is not TaskStatus.PROCESSING:
        return []
    if task.row["analysis_status"] != "pending":
        return []
    await docs.backpressure.pace()
    store = await docs.vectors()
    items = await store.items_of(request.embeddingModel, task.tenant_id, request.documentId)
    chunks = [ChunkText(i.ordinal, i.start, i.end, i.text, i.vector) for i in items]
    analyzer = docs.analyzer
    try:
        async with asyncio.timeout(docs.settings.analyzer_timeout_s):
            report = await analyzer.analyze(request.documentId, chunks)
    except AnalyzerOverloaded as exc:
        await docs.backpressure.overloaded(exc.retry_after_s)
        raise
    now = ctx.clock.now_ms()
    done = _completed(request, task.tenant_id, report, now, env)

    async def write(conn: AsyncConnection) -> list[Envelope | Routed]:
        current = await records.load(conn, request.taskId)
        if current is None or current.status is not TaskStatus.PROCESSING:
            return []
        await conn.execute(
            dialect_of(conn)
            .insert(documents_analysis_reports)
            .values(
                task_id=request.taskId,
                document_id=request.documentId,
                tenant_id=task.tenant_id,
                analyzer=report.analyzer,
                policy_version=report.policy_version,
                verdict=report.verdict,
                score=report.score,
                findings=[dataclasses.asdict(f) for f in report.findings],
                created_at=now,
            )
            .on_conflict_do_nothing()
        )
        with contextlib.suppress(StaleTransition):  # deleted meanwhile: nothing to finish
            await records.move_task(
                conn,
                current,
                TaskStatus.COMPLETED,
                cause="analysed",
                at=now,
                outbox=docs.hub.outbox,
                values={
                    "progress": 100,
                    "stage": f"completed: {report.verdict}",
                    "analysis_status": "completed",
                    "analysis_verdict": report.verdict,
                    "analysis_score": report.score,
                    "analysis_findings": len(report.findings),
                    "completed_at": now,
                },
            )
            return [done]
        return []

    ctx.write(write)
    return []


def _completed(
    request: events.AnalysisRequested, tenant_id: str, report: Report, now: int, env: Envelope
) -> Envelope:
    return Envelope.new(
        events.ANALYSIS_COMPLETED,
        events.AnalysisCompleted(
            taskId=request.taskId,
            documentId=request.documentId,
            knowledgeBaseId=request.knowledgeBaseId,
            verdict=report.verdict,
            score=report.score,
            findings=len(report.findings),
            analyzer=report.analyzer,
            policyVersion=report.policy_version,
            eventTimestamp=now,
            traceId=request.traceId,
        ).model_dump(),
        key=request.documentId,
        source=events.ANALYSIS_SVC,
        tenant_id=tenant_id,
        correlation_id=request.taskId,
        causation_id=env.event_id,
    )
