"""``aigc-hub dlq`` against a real database: list, show, replay and dismiss, every action audited.

The CLI runs its own event loop (``asyncio.run``), so these tests are synchronous and prepare
or inspect the database with ``asyncio.run`` too.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from aigc_hub.cli import common
from aigc_hub.cli.main import app
from aigc_hub.core.clock import SystemClock
from aigc_hub.core.envelope import Envelope
from aigc_hub.messaging import headers as h
from aigc_hub.messaging.catalog import DLQ_TOPIC
from aigc_hub.reliability.dlq import DeadLetterDraft, DeadLetterStore
from aigc_hub.reliability.outbox import EventRoutes, OutboxWriter
from aigc_hub.store import engine as store_engine
from aigc_hub.store import tables

AVCC_TOPIC = "topic.avcc.apply.created"
DOCS_TOPIC = "documents-uploaded"
TITLE = "生成一张猫的图片"
REFUSAL = "内容审核拒绝: 图片包含敏感内容"
FIRST_FAILURE = 1_767_225_600_000
LAST_FAILURE = FIRST_FAILURE + 65_000

# --- database helpers -------------------------------------------------------------------------


async def _add_letters(url: str, drafts: Sequence[DeadLetterDraft]) -> list[int]:
    engine = store_engine.create_engine(url)
    try:
        store = DeadLetterStore(engine, OutboxWriter(EventRoutes()), SystemClock())
        async with engine.begin() as conn:
            return [await store.add(conn, draft) for draft in drafts]
    finally:
        await engine.dispose()


async def _select(url: str, stmt: sa.Select[Any]) -> list[dict[str, Any]]:
    engine = store_engine.create_engine(url)
    try:
        async with engine.connect() as conn:
            return [dict(row._mapping) for row in (await conn.execute(stmt)).all()]
    finally:
        await engine.dispose()


def select(url: str, stmt: sa.Select[Any]) -> list[dict[str, Any]]:
    return asyncio.run(_select(url, stmt))


def letter_row(url: str, dead_letter_id: int) -> dict[str, Any]:
    [row] = select(
        url, sa.select(tables.dead_letters).where(tables.dead_letters.c.id == dead_letter_id)
    )
    return row


def audit_rows(url: str, action: str) -> list[dict[str, Any]]:
    a = tables.audit_log
    return select(url, sa.select(a).where(a.c.action == action).order_by(a.c.id))


def outbox_rows(url: str, topic: str) -> list[dict[str, Any]]:
    o = tables.outbox
    return select(url, sa.select(o).where(o.c.topic == topic).order_by(o.c.id))


# --- the dead letters the tests work on -------------------------------------------------------


def _draft(
    *,
    topic: str,
    consumer: str,
    pipeline: str,
    error_class: str,
    error_message: str,
    envelope: Envelope | None,
    value: bytes | None = None,
    extra_headers: dict[str, str] | None = None,
) -> DeadLetterDraft:
    headers = (
        h.for_envelope(
            envelope.event_id,
            envelope.event_type,
            envelope.schema_version,
            envelope.trace_id,
            envelope.tenant_id,
        )
        if envelope
        else {}
    )
    headers.update(extra_headers or {})
    return DeadLetterDraft(
        topic=topic,
        partition=2,
        offset=40,
        key=envelope.key if envelope else "raw-key",
        consumer=consumer,
        pipeline=pipeline,
        value=envelope.to_bytes() if value is None and envelope else (value or b""),
        headers=headers,
        error_class=error_class,
        error_message=error_message,
        attempts=3,
        first_failure_at=FIRST_FAILURE,
        last_failure_at=LAST_FAILURE,
        envelope=envelope,
        history=[
            {"at": FIRST_FAILURE, "attempt": 1, "error_class": error_class, "error_message": "1st"},
            {"at": LAST_FAILURE, "attempt": 3, "error_class": error_class, "error_message": "3rd"},
        ],
    )


@dataclass(frozen=True)
class Seeded:
    """Three dead letters: an avcc one (Chinese text), a documents one, and raw bytes."""

    url: str
    avcc_id: int
    docs_id: int
    raw_id: int
    avcc_env: Envelope
    docs_env: Envelope
    before_ms: int
    after_ms: int


def seed(url: str, monkeypatch: pytest.MonkeyPatch) -> Seeded:
    """Point the CLI at ``url`` and store the three dead letters through DeadLetterStore.add."""
    monkeypatch.setenv("AIGC_HUB_DATABASE_URL", url)
    monkeypatch.delenv("AIGC_HUB_ACTOR", raising=False)
    monkeypatch.delenv(common.PIPELINES_ENV, raising=False)
    avcc_env = Envelope.new(
        "avcc.apply.created",
        {"title": TITLE, "width": 1024},
        key="apply-42",
        source="avcc-api",
        tenant_id="tenant-7",
        trace_id="4bf92f3577b34da6a3ce929d0e0e4736",
    ).with_attempt(2)
    docs_env = Envelope.new("documents.uploaded", {"doc": "d-1"}, key="doc-1", source="docs")
    before = time.time_ns() // 1_000_000
    avcc_id, docs_id, raw_id = asyncio.run(
        _add_letters(
            url,
            [
                _draft(
                    topic=AVCC_TOPIC,
                    consumer="avcc-review",
                    pipeline="avcc",
                    error_class="PermanentError",
                    error_message=REFUSAL,
                    envelope=avcc_env,
                    extra_headers={"x-origin": "上海"},
                ),
                _draft(
                    topic=DOCS_TOPIC,
                    consumer="documents-chunker",
                    pipeline="documents",
                    error_class="TimeoutError",
                    error_message="provider timed out after 30s",
                    envelope=docs_env,
                ),
                _draft(
                    topic=DOCS_TOPIC,
                    consumer="documents-chunker",
                    pipeline="documents",
                    error_class="EnvelopeError",
                    error_message="envelope field '$': not valid JSON",
                    envelope=None,
                    value=b"\x00garbage, not an envelope",
                ),
            ],
        )
    )
    after = time.time_ns() // 1_000_000
    return Seeded(url, avcc_id, docs_id, raw_id, avcc_env, docs_env, before, after)


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


@pytest.fixture
def seeded(sqlite_url: str, monkeypatch: pytest.MonkeyPatch) -> Seeded:
    """The three dead letters in a fresh SQLite file."""
    return seed(sqlite_url, monkeypatch)


@pytest.fixture
def seeded_anywhere(db_url: str, monkeypatch: pytest.MonkeyPatch) -> Seeded:
    """The three dead letters on SQLite and on PostgreSQL."""
    return seed(db_url, monkeypatch)


def json_lines(output: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in output.splitlines() if line.strip()]


def listed_ids(runner: CliRunner, *args: str) -> list[int]:
    result = runner.invoke(app, ["dlq", "list", "--json", *args])
    assert result.exit_code == 0, result.output
    return [item["id"] for item in json_lines(result.stdout)]


# --- list -------------------------------------------------------------------------------------


def test_list_shows_every_pending_dead_letter_newest_first(
    runner: CliRunner, seeded: Seeded
) -> None:
    result = runner.invoke(app, ["dlq", "list"])

    assert result.exit_code == 0, result.output
    out = result.stdout
    rows = [line for line in out.splitlines() if AVCC_TOPIC in line or DOCS_TOPIC in line]
    assert len(rows) == 3
    assert rows[0].split("│")[1].strip() == str(seeded.raw_id)
    assert rows[1].split("│")[1].strip() == str(seeded.docs_id)
    assert rows[2].split("│")[1].strip() == str(seeded.avcc_id)
    assert "avcc-review" in rows[2] and "PermanentError: " + REFUSAL in rows[2]
    assert "TimeoutError: provider timed out after 30s" in rows[1]
    assert all("pending" in row for row in rows)
    assert "no dead letters match" not in out


def test_list_json_prints_one_object_per_line_with_the_fields(
    runner: CliRunner, seeded: Seeded
) -> None:
    result = runner.invoke(app, ["dlq", "list", "--json"])

    assert result.exit_code == 0, result.output
    assert result.stderr == ""
    lines = result.stdout.splitlines()
    assert len(lines) == 3
    items = [json.loads(line) for line in lines]
    assert [i["id"] for i in items] == [seeded.raw_id, seeded.docs_id, seeded.avcc_id]
    avcc = items[2]
    created_at = avcc.pop("created_at")
    assert seeded.before_ms <= created_at <= seeded.after_ms
    assert avcc == {
        "id": seeded.avcc_id,
        "event_id": seeded.avcc_env.event_id,
        "event_type": "avcc.apply.created",
        "topic": AVCC_TOPIC,
        "partition": 2,
        "offset": 40,
        "consumer": "avcc-review",
        "pipeline": "avcc",
        "error_class": "PermanentError",
        "error_message": REFUSAL,
        "attempts": 3,
        "status": "pending",
    }
    assert REFUSAL in lines[2]  # real UTF-8 text, not \u escapes
    raw = items[0]
    assert (raw["event_id"], raw["event_type"]) == (None, None)
    assert raw["error_class"] == "EnvelopeError"


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--topic", DOCS_TOPIC], {"docs", "raw"}),
        (["--topic", AVCC_TOPIC], {"avcc"}),
        (["--consumer", "avcc-review"], {"avcc"}),
        (["--consumer", "documents-chunker"], {"docs", "raw"}),
        (["--error-class", "TimeoutError"], {"docs"}),
        (["--pipeline", "avcc"], {"avcc"}),
        (["--topic", DOCS_TOPIC, "--error-class", "EnvelopeError"], {"raw"}),
        (["--topic", AVCC_TOPIC, "--error-class", "TimeoutError"], set()),
        (["--consumer", "nobody"], set()),
    ],
)
def test_list_filters_narrow_the_list(
    runner: CliRunner, seeded: Seeded, args: list[str], expected: set[str]
) -> None:
    names = {seeded.avcc_id: "avcc", seeded.docs_id: "docs", seeded.raw_id: "raw"}

    ids = listed_ids(runner, *args)

    assert {names[i] for i in ids} == expected
    assert len(ids) == len(expected)


def test_list_says_when_nothing_matches(runner: CliRunner, seeded: Seeded) -> None:
    result = runner.invoke(app, ["dlq", "list", "--topic", "no.such.topic"])

    assert result.exit_code == 0, result.output
    assert "no dead letters match" in result.stdout


def test_list_status_selects_pending_by_default_and_any_on_request(
    runner: CliRunner, seeded: Seeded
) -> None:
    dismissed = runner.invoke(app, ["dlq", "dismiss", str(seeded.docs_id), "--reason", "dup"])
    assert dismissed.exit_code == 0, dismissed.output

    assert listed_ids(runner) == [seeded.raw_id, seeded.avcc_id]
    assert listed_ids(runner, "--status", "pending") == [seeded.raw_id, seeded.avcc_id]
    assert listed_ids(runner, "--status", "dismissed") == [seeded.docs_id]
    assert listed_ids(runner, "--status", "replayed") == []
    assert listed_ids(runner, "--status", "any") == [seeded.raw_id, seeded.docs_id, seeded.avcc_id]


def test_list_rejects_an_unknown_status(runner: CliRunner, seeded: Seeded) -> None:
    result = runner.invoke(app, ["dlq", "list", "--status", "lost"])

    assert result.exit_code == common.ExitCode.USAGE
    assert result.stderr.splitlines() == [
        "error: unknown status 'lost': use pending, replayed, dismissed or any"
    ]


def test_list_pages_with_limit_and_after(runner: CliRunner, seeded: Seeded) -> None:
    assert listed_ids(runner, "--limit", "2") == [seeded.raw_id, seeded.docs_id]
    assert listed_ids(runner, "--limit", "2", "--after", str(seeded.docs_id)) == [seeded.avcc_id]


# --- show -------------------------------------------------------------------------------------


def test_show_prints_envelope_headers_and_history_in_utf8(
    runner: CliRunner, seeded_anywhere: Seeded
) -> None:
    s = seeded_anywhere

    result = runner.invoke(app, ["dlq", "show", str(s.avcc_id)])

    assert result.exit_code == 0, result.output
    out = result.stdout
    assert f"dead letter {s.avcc_id} (pending)" in out
    assert f"topic {AVCC_TOPIC} partition 2 offset 40 key apply-42" in out
    assert "consumer avcc-review (pipeline avcc), 3 attempts" in out
    assert "first failure 2026-01-01 00:00:00, last 2026-01-01 00:01:05" in out
    assert f"error PermanentError: {REFUSAL}" in out
    # the envelope, pretty-printed JSON with the Chinese title as text
    assert f'"event_id": "{s.avcc_env.event_id}"' in out
    assert f'"title": "{TITLE}"' in out
    assert '"tenant_id": "tenant-7"' in out
    assert '"attempt": 2' in out
    assert TITLE.encode("utf-8") in result.stdout_bytes
    # the headers, sorted
    header_lines = out.split("headers")[1].split("history")[0].splitlines()
    assert f"  event-id: {s.avcc_env.event_id}" in header_lines
    assert "  event-type: avcc.apply.created" in header_lines
    assert "  tenant-id: tenant-7" in header_lines
    assert "  x-origin: 上海" in header_lines
    keys = [line.split(":")[0].strip() for line in header_lines if line.startswith("  ")]
    assert keys == sorted(keys)
    # the failure history
    assert "2026-01-01 00:00:00 attempt 1: PermanentError: 1st" in out
    assert "2026-01-01 00:01:05 attempt 3: PermanentError: 3rd" in out


def test_show_of_bytes_that_are_no_envelope_prints_the_bytes(
    runner: CliRunner, seeded: Seeded
) -> None:
    result = runner.invoke(app, ["dlq", "show", str(seeded.raw_id)])

    assert result.exit_code == 0, result.output
    assert "b'\\x00garbage, not an envelope'" in result.stdout
    assert "error EnvelopeError: envelope field '$': not valid JSON" in result.stdout


def test_show_of_an_unknown_id_exits_3_with_one_error_line(
    runner: CliRunner, seeded: Seeded
) -> None:
    result = runner.invoke(app, ["dlq", "show", "999999"])

    assert result.exit_code == 3  # ExitCode.NOT_FOUND
    assert result.stderr.splitlines() == ["error: no dead letter with id 999999"]
    assert result.stdout == ""


# Rich reads text passed to print() and to table cells as markup; error messages and keys are
# data, and an HTTP path such as "[/v1/generate]" is a closing tag to Rich. Printed verbatim.
MARKUP_MESSAGES = [
    pytest.param("POST [/v1/generate] returned 503", id="closing-tag-crashes"),
    pytest.param("prompt has a [red] flag", id="style-tag-is-swallowed"),
]


@pytest.mark.parametrize("message", MARKUP_MESSAGES)
def test_show_prints_error_messages_verbatim(
    runner: CliRunner, sqlite_url: str, monkeypatch: pytest.MonkeyPatch, message: str
) -> None:
    monkeypatch.setenv("AIGC_HUB_DATABASE_URL", sqlite_url)
    env = Envelope.new("avcc.apply.created", {}, key="k", source="s")
    [dl_id] = asyncio.run(
        _add_letters(
            sqlite_url,
            [
                _draft(
                    topic=AVCC_TOPIC,
                    consumer="c",
                    pipeline="avcc",
                    error_class="HTTPError",
                    error_message=message,
                    envelope=env,
                )
            ],
        )
    )

    result = runner.invoke(app, ["dlq", "show", str(dl_id)])

    assert result.exit_code == 0, result.output
    assert f"error HTTPError: {message}" in result.stdout


@pytest.mark.parametrize("message", MARKUP_MESSAGES)
def test_list_prints_error_messages_verbatim(
    runner: CliRunner, sqlite_url: str, monkeypatch: pytest.MonkeyPatch, message: str
) -> None:
    monkeypatch.setenv("AIGC_HUB_DATABASE_URL", sqlite_url)
    env = Envelope.new("avcc.apply.created", {}, key="k", source="s")
    asyncio.run(
        _add_letters(
            sqlite_url,
            [
                _draft(
                    topic=AVCC_TOPIC,
                    consumer="c",
                    pipeline="avcc",
                    error_class="HTTPError",
                    error_message=message,
                    envelope=env,
                )
            ],
        )
    )

    result = runner.invoke(app, ["dlq", "list"])

    assert result.exit_code == 0, result.output
    assert f"HTTPError: {message}" in result.stdout


# --- replay -----------------------------------------------------------------------------------


def test_replay_requeues_the_original_event_once_and_audits_it(
    runner: CliRunner, seeded_anywhere: Seeded
) -> None:
    s = seeded_anywhere
    assert outbox_rows(s.url, AVCC_TOPIC) == []
    announced = outbox_rows(s.url, DLQ_TOPIC)
    assert len(announced) == 3  # add() announced every dead letter on the DLQ topic

    result = runner.invoke(app, ["dlq", "replay", str(s.avcc_id), "--actor", "alice"])

    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == f"replayed dead letter {s.avcc_id} to {AVCC_TOPIC}"
    letter = letter_row(s.url, s.avcc_id)
    assert letter["status"] == "replayed"
    assert letter["resolved_at"] is not None
    assert letter_row(s.url, s.docs_id)["status"] == "pending"
    [row] = outbox_rows(s.url, AVCC_TOPIC)
    assert row["event_id"] == s.avcc_env.event_id
    assert row["key"] == "apply-42"
    assert row["published_at"] is None
    assert row["headers"][h.REPLAYED_FROM_DLQ] == str(s.avcc_id)
    assert row["headers"][h.EVENT_ID] == s.avcc_env.event_id
    assert Envelope.from_bytes(row["value"]) == s.avcc_env.with_attempt(0)
    [entry] = audit_rows(s.url, "dlq.replay")
    assert entry["actor"] == "alice"
    assert entry["target"] == str(s.avcc_id)
    assert entry["result"] == "ok"
    assert entry["detail"] == {"topic": AVCC_TOPIC, "event_id": s.avcc_env.event_id}

    again = runner.invoke(app, ["dlq", "replay", str(s.avcc_id), "--actor", "alice"])

    assert again.exit_code == 4  # ExitCode.CONFLICT: the state moved on
    assert again.exit_code != common.ExitCode.INTERNAL
    assert again.stderr.splitlines() == [
        f"error: dead letter {s.avcc_id}: it is replayed, only pending dead letters can be replayed"
    ]
    assert len(outbox_rows(s.url, AVCC_TOPIC)) == 1  # still only one copy on its way
    assert [e["result"] for e in audit_rows(s.url, "dlq.replay")] == ["ok", "refused"]


def test_replay_takes_the_actor_from_the_environment(
    runner: CliRunner, seeded: Seeded, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIGC_HUB_ACTOR", "bob")

    result = runner.invoke(app, ["dlq", "replay", str(seeded.docs_id)])

    assert result.exit_code == 0, result.output
    [entry] = audit_rows(seeded.url, "dlq.replay")
    assert entry["actor"] == "bob"
    [row] = outbox_rows(seeded.url, DOCS_TOPIC)
    assert row["event_id"] == seeded.docs_env.event_id


def test_replay_of_bytes_that_are_no_envelope_is_refused_and_audited(
    runner: CliRunner, seeded: Seeded
) -> None:
    result = runner.invoke(app, ["dlq", "replay", str(seeded.raw_id), "--actor", "alice"])

    assert result.exit_code != 0
    assert result.exit_code != common.ExitCode.INTERNAL
    [line] = result.stderr.splitlines()
    assert line.startswith(f"error: dead letter {seeded.raw_id}: ")
    assert "not a valid envelope" in line
    assert letter_row(seeded.url, seeded.raw_id)["status"] == "pending"
    assert outbox_rows(seeded.url, DOCS_TOPIC) == []
    [entry] = audit_rows(seeded.url, "dlq.replay")
    assert (entry["actor"], entry["target"], entry["result"]) == (
        "alice",
        str(seeded.raw_id),
        "refused",
    )
    assert "not a valid envelope" in entry["detail"]["reason"]


def test_replay_of_an_unknown_id_exits_3(runner: CliRunner, seeded: Seeded) -> None:
    result = runner.invoke(app, ["dlq", "replay", "999999", "--actor", "alice"])

    assert result.exit_code == common.ExitCode.NOT_FOUND
    assert result.stderr.splitlines() == ["error: no dead letter with id 999999"]
    assert audit_rows(seeded.url, "dlq.replay") == []


def test_a_dismissed_dead_letter_cannot_be_replayed(runner: CliRunner, seeded: Seeded) -> None:
    assert runner.invoke(app, ["dlq", "dismiss", str(seeded.avcc_id)]).exit_code == 0

    result = runner.invoke(app, ["dlq", "replay", str(seeded.avcc_id), "--actor", "alice"])

    assert result.exit_code != 0
    assert "it is dismissed" in result.stderr
    assert outbox_rows(seeded.url, AVCC_TOPIC) == []


# --- dismiss ----------------------------------------------------------------------------------


def test_dismiss_marks_several_dead_letters_and_audits_each(
    runner: CliRunner, seeded: Seeded
) -> None:
    result = runner.invoke(
        app,
        [
            "dlq",
            "dismiss",
            str(seeded.avcc_id),
            str(seeded.docs_id),
            "--reason",
            "duplicate upload",
            "--actor",
            "carol",
        ],
    )

    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "dismissed 2 of 2"
    assert letter_row(seeded.url, seeded.avcc_id)["status"] == "dismissed"
    assert letter_row(seeded.url, seeded.docs_id)["status"] == "dismissed"
    assert letter_row(seeded.url, seeded.raw_id)["status"] == "pending"
    assert letter_row(seeded.url, seeded.avcc_id)["resolved_at"] is not None
    entries = audit_rows(seeded.url, "dlq.dismiss")
    assert [(e["actor"], e["target"], e["result"]) for e in entries] == [
        ("carol", str(seeded.avcc_id), "ok"),
        ("carol", str(seeded.docs_id), "ok"),
    ]
    assert all(e["detail"] == {"reason": "duplicate upload"} for e in entries)
    assert outbox_rows(seeded.url, AVCC_TOPIC) == []  # dismissing never republishes


def test_dismissing_an_unknown_id_exits_4_but_dismisses_the_known_ones(
    runner: CliRunner, seeded: Seeded
) -> None:
    result = runner.invoke(
        app, ["dlq", "dismiss", str(seeded.raw_id), "999999", "--reason", "x", "--actor", "dan"]
    )

    assert result.exit_code == 4  # ExitCode.CONFLICT
    assert result.stdout.strip() == "dismissed 1 of 2"
    assert result.stderr.splitlines() == ["error: some ids were unknown or not pending"]
    assert letter_row(seeded.url, seeded.raw_id)["status"] == "dismissed"
    results = [(e["target"], e["result"]) for e in audit_rows(seeded.url, "dlq.dismiss")]
    assert results == [(str(seeded.raw_id), "ok"), ("999999", "not-pending")]


def test_dismissing_twice_exits_4(runner: CliRunner, seeded: Seeded) -> None:
    assert runner.invoke(app, ["dlq", "dismiss", str(seeded.docs_id)]).exit_code == 0

    again = runner.invoke(app, ["dlq", "dismiss", str(seeded.docs_id)])

    assert again.exit_code == common.ExitCode.CONFLICT
    assert again.stdout.strip() == "dismissed 0 of 1"
