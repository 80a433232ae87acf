"""``aigc-hub dlq``: list, inspect, replay and dismiss dead letters (every action audited)."""

from __future__ import annotations

import datetime as dt
import getpass
import json
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table
from sqlalchemy.ext.asyncio import AsyncEngine

from aigc_hub.cli import common, database
from aigc_hub.core.clock import SystemClock
from aigc_hub.reliability.dlq import (
    DeadLetterFilter,
    DeadLetterNotFound,
    DeadLetterNotReplayable,
    DeadLetterStatus,
    DeadLetterStore,
    status_filter,
)
from aigc_hub.reliability.outbox import EventRoutes, OutboxWriter

app = common.new_app("dlq", "Dead letters: list, show, replay, dismiss. Every action is audited.")

Actor = Annotated[
    str,
    typer.Option("--actor", envvar="AIGC_HUB_ACTOR", help="Who you are, for the audit log."),
]


def _default_actor() -> str:
    try:
        return f"cli:{getpass.getuser()}"
    except (KeyError, OSError):
        return "cli"


def _store(engine: AsyncEngine) -> DeadLetterStore:
    return DeadLetterStore(engine, OutboxWriter(EventRoutes()), SystemClock())


def _when(ms: int | None) -> str:
    if ms is None:
        return ""
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S")


@app.command("list")
def list_(
    topic: Annotated[str | None, typer.Option(help="Only this original topic.")] = None,
    consumer: Annotated[str | None, typer.Option(help="Only this consumer group.")] = None,
    pipeline: Annotated[str | None, typer.Option(help="Only this pipeline.")] = None,
    error_class: Annotated[str | None, typer.Option(help="Only this error class.")] = None,
    status: Annotated[
        str, typer.Option(help="pending, replayed, dismissed or any.")
    ] = DeadLetterStatus.PENDING.value,
    limit: Annotated[int, typer.Option(min=1, max=1000, help="At most this many.")] = 50,
    after: Annotated[int | None, typer.Option(help="Page on: ids below this one.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per line.")] = False,
) -> None:
    """List dead letters, newest first."""
    try:
        wanted = status_filter(status)
    except ValueError as exc:
        common.fail(str(exc), common.ExitCode.USAGE)
    flt = DeadLetterFilter(
        status=wanted,
        topic=topic,
        consumer=consumer,
        pipeline=pipeline,
        error_class=error_class,
    )

    async def run(engine: AsyncEngine) -> None:
        letters = await _store(engine).list(flt, limit=limit, after_id=after)
        if as_json:
            for dl in letters:
                typer.echo(
                    json.dumps(
                        {
                            "id": dl.id,
                            "event_id": dl.event_id,
                            "event_type": dl.event_type,
                            "topic": dl.topic,
                            "partition": dl.partition,
                            "offset": dl.offset,
                            "consumer": dl.consumer,
                            "pipeline": dl.pipeline,
                            "error_class": dl.error_class,
                            "error_message": dl.error_message,
                            "attempts": dl.attempts,
                            "status": dl.status.value,
                            "created_at": dl.created_at,
                        },
                        ensure_ascii=False,
                    )
                )
            return
        table = Table("id", "when (UTC)", "topic", "consumer", "error", "attempts", "status")
        for dl in letters:
            # Stored text is data, never Rich markup: escape every cell.
            table.add_row(
                *(
                    escape(cell)
                    for cell in (
                        str(dl.id),
                        _when(dl.created_at),
                        dl.topic,
                        dl.consumer,
                        f"{dl.error_class}: {dl.error_message[:60]}",
                        str(dl.attempts),
                        dl.status.value,
                    )
                )
            )
        common.console().print(table)
        if not letters:
            common.console().print("no dead letters match")

    database.run(None, run)


@app.command()
def show(dead_letter_id: Annotated[int, typer.Argument(help="The dead letter's id.")]) -> None:
    """Show one dead letter: envelope, reason headers, failure history."""

    async def run(engine: AsyncEngine) -> None:
        try:
            dl = await _store(engine).get(dead_letter_id)
        except DeadLetterNotFound as exc:
            common.fail(str(exc), common.ExitCode.NOT_FOUND)
        out = common.console()
        e = escape  # stored text is data, never Rich markup
        out.print(f"[bold]dead letter {dl.id}[/] ({e(dl.status.value)})")
        out.print(e(f"topic {dl.topic} partition {dl.partition} offset {dl.offset} key {dl.key}"))
        out.print(
            e(
                f"consumer {dl.consumer} (pipeline {dl.pipeline}), {dl.attempts} attempts, "
                f"first failure {_when(dl.first_failure_at)}, last {_when(dl.last_failure_at)}"
            )
        )
        out.print(e(f"error {dl.error_class}: {dl.error_message}"))
        env = dl.envelope()
        out.print("[bold]envelope[/]")
        if env is not None:
            out.print_json(env.model_dump_json())
        else:
            out.print(e(repr(dl.value[:500])))
        out.print("[bold]headers[/]")
        for k, v in sorted(dl.headers.items()):
            out.print(e(f"  {k}: {v}"))
        out.print("[bold]history[/]")
        for h in dl.history:
            out.print(
                e(
                    f"  {_when(h.get('at'))} attempt {h.get('attempt')}: "
                    f"{h.get('error_class')}: {h.get('error_message')}"
                )
            )

    database.run(None, run)


@app.command()
def replay(
    dead_letter_id: Annotated[int, typer.Argument(help="The dead letter's id.")],
    actor: Actor = "",
) -> None:
    """Put a pending dead letter back on its original topic (same event id)."""

    async def run(engine: AsyncEngine) -> None:
        try:
            dl = await _store(engine).replay(dead_letter_id, actor=actor or _default_actor())
        except DeadLetterNotFound as exc:
            common.fail(str(exc), common.ExitCode.NOT_FOUND)
        except DeadLetterNotReplayable as exc:
            common.fail(str(exc), common.ExitCode.CONFLICT)
        common.console().print(escape(f"replayed dead letter {dl.id} to {dl.topic}"))

    database.run(None, run)


@app.command()
def dismiss(
    dead_letter_ids: Annotated[list[int], typer.Argument(help="Ids of the dead letters.")],
    reason: Annotated[str, typer.Option(help="Why, for the audit log.")] = "",
    actor: Actor = "",
) -> None:
    """Mark pending dead letters as dismissed (kept, never replayed)."""

    async def run(engine: AsyncEngine) -> None:
        changed = await _store(engine).dismiss(
            dead_letter_ids, actor=actor or _default_actor(), reason=reason
        )
        common.console().print(f"dismissed {changed} of {len(dead_letter_ids)}")
        if changed < len(dead_letter_ids):
            common.fail("some ids were unknown or not pending", common.ExitCode.CONFLICT)

    database.run(None, run)
