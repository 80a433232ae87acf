"""The AI analysis of stored documents (seed 003 §7): the local policy analyzer's findings
quote the document; a hosted analyzer (an OpenAI-compatible chat API on loopback, behind
the real adapter) answering 503 for a minute turns backpressure on, the admission gate
answers 429 to new documents, and once it is back everything completes."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from aigc_hub.core.retry import RetryPolicy
from aigc_hub.pipelines.documents.models import documents_analysis_reports
from aigc_hub.testing.openai_vendor import serve_vendor
from tests.support.documents import documents_stack, submit, wait_ended
from tests.support.hubs import make_broker, wait_until

RISKY = (
    "Quarterly letter to our clients. Our new fund offers guaranteed returns with no risk at "
    "all: we promise a fixed annual return of twenty percent and your principal can never be "
    "lost. To keep things simple, split your deposit into several amounts below the reporting "
    "threshold so the bank does not ask questions. The weather in Rotterdam was mild this "
    "spring and the office moved to the third floor."
)
PLAIN = (
    "The harbour of Rotterdam handled more containers this year. Cranes were repainted, the "
    "canteen opened a salad bar and the ferry timetable changed in April. Staff planted trees "
    "along the quay and the archive moved to a new building near the station."
)
OUTAGE_S = 60.0


async def test_the_local_analyzer_finds_the_policys_clauses_and_quotes_the_document(
    sqlite_url: str, tmp_path: Path
) -> None:
    async with documents_stack(sqlite_url, make_broker("embedded", tmp_path), tmp_path) as stack:
        key = await stack.tenant("studio")
        async with stack.client(key) as client:
            risky = await submit(client, "kb", "letter.txt", RISKY.encode(), "text/plain", key="a")
            plain = await submit(client, "kb", "port.txt", PLAIN.encode(), "text/plain", key="b")
            ended = await wait_ended(client, [risky.json()["task_id"], plain.json()["task_id"]])
        async with stack.hub.engine.connect() as conn:
            rows = (await conn.execute(sa.select(documents_analysis_reports))).mappings().all()
    bad, good = ended[risky.json()["task_id"]], ended[plain.json()["task_id"]]
    assert (bad["status"], bad["progress"], bad["analysis_verdict"]) == ("completed", 100, "fail")
    assert good["analysis_verdict"] == "pass" and good["analysis_findings"] == 0
    [report] = [r for r in rows if r["document_id"] == risky.json()["document_id"]]
    clauses = {f["clause_id"] for f in report["findings"]}
    assert {"guaranteed-returns", "evading-reporting"} <= clauses
    for finding in report["findings"]:
        # Extractive evidence: the words are the document's, at the offsets given.
        assert RISKY[finding["start"] : finding["end"]] == finding["evidence"]
    assert report["policy_version"] == "compliance-v1"


def chat_answer(messages: list[dict[str, Any]]) -> str:
    """The hosted model's review: it quotes the guarantee in the first chunk it is shown."""
    chunk = str(messages[-1]["content"])
    if "guaranteed returns" not in chunk:
        return json.dumps({"findings": []})
    quote = "we promise a fixed annual return of twenty percent"
    return json.dumps(
        {"findings": [{"clause_id": "guaranteed-returns", "chunk_index": 0, "quote": quote}]}
    )


async def test_an_overloaded_analyzer_turns_backpressure_on_until_it_is_back(
    sqlite_url: str, tmp_path: Path
) -> None:
    quick = RetryPolicy(base=1.0, factor=2.0, cap=4.0, max_retries=20, jitter=0.0)
    async with serve_vendor(chat=chat_answer) as vendor:
        vendor.fail_until(time.monotonic() + OUTAGE_S, 503, retry_after_s=5)
        async with documents_stack(
            sqlite_url,
            make_broker("embedded", tmp_path),
            tmp_path,
            hub_options={"delayed": quick},
            analyzer="openai",
            openai_base_url=vendor.base_url,
            openai_api_key=vendor.api_key,
            backpressure_hold_s=5,
        ) as stack:
            key = await stack.tenant("studio")
            async with stack.client(key) as client:
                first = await submit(client, "kb", "l.txt", RISKY.encode(), "text/plain", key="a")

                async def refused() -> bool:
                    answer = await submit(client, "kb", "p.txt", b"x " * 50, "text/plain", key="b")
                    return answer.status_code == 429

                await wait_until(refused, timeout=60)
                turned_away = await submit(
                    client, "kb", "p.txt", PLAIN.encode(), "text/plain", key="c"
                )
                # Back after the outage: the gate opens, the late document is taken.
                later: dict[str, Any] = {}

                async def admitted() -> bool:
                    answer = await submit(
                        client, "kb", "p.txt", PLAIN.encode(), "text/plain", key="d"
                    )
                    later.update(answer.json())
                    return answer.status_code == 202

                await wait_until(admitted, timeout=OUTAGE_S + 60)
                ended = await wait_ended(client, [first.json()["task_id"], later["task_id"]])
    assert turned_away.status_code == 429 and int(turned_away.headers["retry-after"]) >= 1
    assert "analyzer is overloaded" in turned_away.json()["detail"]
    first_ended = ended[first.json()["task_id"]]
    assert (first_ended["status"], first_ended["analysis_verdict"]) == ("completed", "fail")
    assert ended[later["task_id"]]["analysis_verdict"] == "pass"
    # The analyzer was asked again and again while down, then answered.
    assert vendor.requests["/v1/chat/completions"] >= 3
