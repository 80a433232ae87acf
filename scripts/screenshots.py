"""Regenerate the console screenshots in ``docs/images/`` (``make screenshots``).

Starts a hub and the HTTP app on a loopback port (the browser tests' harness), fills it with
dead letters (Chinese prompts included), lag on three consumer groups, one group working
its backlog down, and one task's history, then photographs each page in the system's
headless Chromium (``/usr/bin/chromium``; nothing is downloaded). Chinese text needs a CJK
font (Debian ``fonts-wqy-microhei`` or ``fonts-noto-cjk``).

    python scripts/screenshots.py [--out docs/images]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "src")]

from playwright.sync_api import sync_playwright  # noqa: E402
from tests.browser.harness import ConsoleServer, launch, log_in  # noqa: E402

from aigc_hub.bootstrap import Hub  # noqa: E402
from aigc_hub.core.envelope import Envelope  # noqa: E402
from aigc_hub.core.errors import PermanentError  # noqa: E402
from aigc_hub.messaging import headers as h  # noqa: E402
from aigc_hub.messaging.catalog import TopicSpec  # noqa: E402
from aigc_hub.pipeline import Pipeline, TimelineEntry  # noqa: E402
from aigc_hub.reliability.dlq import DeadLetterDraft  # noqa: E402
from aigc_hub.runtime.context import HandlerContext  # noqa: E402
from aigc_hub.store import migrate  # noqa: E402

SUBMITTED = "generation.task.submitted"
MEDIA = "generation.media.ready"
REVIEW = "topic.avcc.apply.created"
TASK = "01938f6e-7c1a-7b2e-9d4f-5a6b7c8d9e0f"
PROMPT = "生成一段视频：一只熊猫在竹林里弹吉他，黄昏，电影感镜头"
DAY = 7 * 86_400_000


def demo_pipeline() -> Pipeline:
    """Three consumer groups (only the media workers run) and a task timeline source."""
    p = Pipeline("generation")
    for topic in (SUBMITTED, MEDIA):
        p.topic(TopicSpec(topic, 6, DAY, pipeline="generation"))

    @p.handler("generation-submitters", [SUBMITTED])
    async def submit(env: Envelope, ctx: HandlerContext) -> list[Envelope]:
        raise PermanentError("not running in this demo")

    @p.handler("media-workers", [MEDIA], concurrency=8)
    async def make_proxy(env: Envelope, ctx: HandlerContext) -> list[Envelope]:
        await asyncio.sleep(0.1)  # stands in for ffprobe + proxy encoding
        return []

    @p.handler("avcc-reviewers", [REVIEW])
    async def review(env: Envelope, ctx: HandlerContext) -> list[Envelope]:
        raise PermanentError("not running in this demo")

    @p.timeline
    async def task_history(hub: Hub, subject_id: str) -> list[TimelineEntry] | None:
        if subject_id != TASK:
            return None
        t0 = hub.clock.now_ms() - 120_000
        # The shape of the generation pipeline's own timeline (its task_events rows).
        steps = [
            (0, "∅ → QUEUED", {"cause": "api.create", "estimated_cost": 10, "model": "local-v1"}),
            (1_600, "QUEUED → DISPATCHING", {"cause": "scheduler.dispatch", "provider": "local"}),
            (11_700, "DISPATCHING → SUBMIT_UNKNOWN", {"cause": "submit.timeout"}),
            (27_000, "SUBMIT_UNKNOWN → RUNNING", {"cause": "observed.poll", "progress": 0.25}),
            (58_000, "RUNNING → OUTPUT_FETCHING", {"cause": "observed.callback"}),
            (59_200, "OUTPUT_FETCHING → POST_PROCESSING", {"cause": "output.fetched"}),
            (59_210, "POST_PROCESSING → SUCCEEDED", {"cause": "output.ready", "settled": 10}),
        ]
        return [TimelineEntry(t0 + dt, "transition", title, detail) for dt, title, detail in steps]

    return p


def envelope(event_type: str, key: str, payload: dict[str, object]) -> Envelope:
    return Envelope.new(event_type, payload, key=key, source="api", tenant_id="tenant-acme")


LETTERS = [
    (
        SUBMITTED,
        "generation-submitters",
        "PermanentError",
        "content rejected by moderation: prompt names a real person",
        "generation.task.submitted",
        {"prompt": "生成一段视频：某明星在发布会上讲话", "model": "video-v2", "duration_s": 8},
    ),
    (
        SUBMITTED,
        "generation-submitters",
        "PermanentError",
        "unsupported capability: 4K output is not offered by provider-b",
        "generation.task.submitted",
        {"prompt": "a timelapse of Shanghai at night", "resolution": "3840x2160"},
    ),
    (
        MEDIA,
        "media-workers",
        "RetryableError",
        "ffprobe: moov atom not found (7 redeliveries over 8 h)",
        "generation.media.ready",
        {"asset_id": "as_71e0", "object_key": "tenant-acme/assets/as_71e0/source.mp4"},
    ),
    (
        REVIEW,
        "avcc-reviewers",
        "SchemaError",
        "payload does not match avcc.apply.created v2: 'work_hash' is required",
        "avcc.apply.created",
        {"work_title": "《竹林》短片", "applicant": "上海某某影视有限公司"},
    ),
    (
        SUBMITTED,
        "generation-submitters",
        "PermanentError",
        "content rejected by moderation: violence (score 0.97)",
        "generation.task.submitted",
        {"prompt": PROMPT, "model": "video-v2", "duration_s": 5, "task_id": TASK},
    ),
]


async def seed(hub: Hub) -> int:
    """Dead letters, lag and the task's events; returns the id of the Chinese dead letter."""
    now = hub.clock.now_ms()
    last = 0
    for i, (topic, consumer, error, message, event_type, payload) in enumerate(LETTERS):
        key = TASK if payload.get("task_id") == TASK else f"task-{i:04d}"
        env = envelope(event_type, key, payload)
        draft = DeadLetterDraft(
            topic=topic,
            partition=i % 6,
            offset=1200 + 37 * i,
            key=key,
            consumer=consumer,
            pipeline="avcc" if topic == REVIEW else "generation",
            value=env.to_bytes(),
            headers={h.EVENT_ID: env.event_id, h.EVENT_TYPE: env.event_type},
            error_class=error,
            error_message=message,
            attempts=1 if error != "RetryableError" else 11,
            first_failure_at=now - 600_000 + 60_000 * i,
            last_failure_at=now - 300_000 + 60_000 * i,
            envelope=env,
            history=[
                {"attempt": 1, "at": now - 600_000 + 60_000 * i, "error": f"{error}: {message}"}
            ],
        )
        async with hub.transaction() as conn:
            last = await hub.dlq.add(conn, draft)
    async with hub.transaction() as conn:
        await hub.outbox.add(
            conn,
            [envelope("generation.task.submitted", TASK, {"prompt": PROMPT, "task_id": TASK})]
            + [envelope("generation.task.submitted", f"t{i}", {"n": i}) for i in range(180)]
            + [envelope("avcc.apply.created", f"a{i}", {"n": i}) for i in range(1240)],
        )
    for batch in range(4):
        async with hub.transaction() as conn:
            await hub.outbox.add(
                conn,
                [envelope("generation.media.ready", f"m{batch}-{i}", {"n": i}) for i in range(600)],
            )
    return last


def routes(pipeline: Pipeline) -> Pipeline:
    """Route the demo event types to their topics (the outbox needs a topic per type)."""
    from pydantic import BaseModel, ConfigDict

    class AnyPayload(BaseModel):
        model_config = ConfigDict(extra="allow")

    for name, topic in (
        ("generation.task.submitted", SUBMITTED),
        ("generation.media.ready", MEDIA),
        ("avcc.apply.created", REVIEW),
    ):
        pipeline.event(name, 1, topic=topic)(AnyPayload)
    return pipeline


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "images")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if (
        shutil.which("fc-list")
        and not subprocess.run(
            ["fc-list", ":lang=zh"], capture_output=True, text=True, check=False
        ).stdout.strip()
    ):
        print("warning: no CJK font installed; Chinese text will show as boxes", file=sys.stderr)
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{tmp}/hub.db"
        migrate.upgrade(url)
        pipeline = routes(demo_pipeline())
        with ConsoleServer(url, [pipeline], groups=["media-workers"]) as server:
            letter_id = server.call(seed)
            with sync_playwright() as playwright:
                browser = launch(playwright)
                context = browser.new_context(
                    viewport={"width": 1440, "height": 900}, device_scale_factor=1
                )
                page = context.new_page()
                log_in(page, server)
                shots = [
                    ("console-dlq.png", "/console/dlq", 0.0),
                    ("console-dlq-detail.png", f"/console/dlq/{letter_id}", 0.0),
                    ("console-dashboard.png", "/console/dashboard", 14.0),
                    ("console-tasks.png", f"/console/tasks?id={TASK}", 0.0),
                ]
                for name, path, settle_s in shots:
                    page.goto(server.url + path)
                    if name == "console-tasks.png":
                        page.locator("ol.timeline details").first.evaluate("d => d.open = true")
                    time.sleep(settle_s)  # the dashboard draws its charts from live polls
                    page.screenshot(path=str(args.out / name), full_page=True)
                    print(args.out / name)
                browser.close()


if __name__ == "__main__":
    main()
