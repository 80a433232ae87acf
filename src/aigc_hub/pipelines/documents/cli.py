"""``aigc-hub docs``: the documents pipeline from the command line, through the HTTP API.

The twins of ``/v1/knowledge-bases`` and ``/v1/documents``: ``submit`` (upload a file;
``--wait`` follows it), ``wait`` (a progress bar until the task ends), ``status``, ``list``,
``search``, ``delete`` and ``reprocess`` (re-embed a knowledge base's history).
"""

from __future__ import annotations

import mimetypes
import time
import uuid
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn

from aigc_hub.cli import kit
from aigc_hub.cli.kit import ApiKey, ApiUrl

app = kit.new_app(
    "docs", "Documents: submit to a knowledge base, wait, status, list, search, delete."
)

#: The ends of a task.
ENDED = ("completed", "failed", "deleted")

Kb = Annotated[str, typer.Option("--kb", help="The knowledge base (1-64 of A-Z a-z 0-9 . _ -).")]


@app.command()
def submit(
    file: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="The document.")],
    kb: Kb,
    priority: Annotated[str, typer.Option(help="normal, high or critical.")] = "normal",
    analysis: Annotated[bool, typer.Option(help="Run the AI analysis too.")] = True,
    wait: Annotated[bool, typer.Option(help="Follow the task until it ends.")] = False,
    timeout: Annotated[float, typer.Option(help="Seconds --wait waits at most.")] = 600,
    url: ApiUrl = kit.DEFAULT_API_URL,
    api_key: ApiKey = "",
) -> None:
    """Upload FILE to a knowledge base; prints its task (queued)."""
    if priority not in ("normal", "high", "critical"):
        kit.fail(f"--priority {priority!r}: use normal, high or critical")
    mime = mimetypes.guess_type(file.name)[0] or "application/octet-stream"
    task = kit.call_api(
        "POST",
        url,
        f"/knowledge-bases/{kb}/documents",
        api_key,
        files={"file": (file.name, file.read_bytes(), mime)},
        data={"priority": priority, "analysis": str(analysis).lower()},
        # A retry of this very command must not queue the document twice.
        headers={"Idempotency-Key": str(uuid.uuid4())},
        timeout=120,
    )
    if not wait:
        kit.show_json(task)
        return
    _follow(url, api_key, task["task_id"], timeout)


@app.command("wait")
def wait_for(
    task_id: Annotated[str, typer.Argument(help="The task (task_…).")],
    timeout: Annotated[float, typer.Option(help="Seconds to wait at most.")] = 600,
    url: ApiUrl = kit.DEFAULT_API_URL,
    api_key: ApiKey = "",
) -> None:
    """Show a task's progress until it ends; exit 0 when completed, 1 when failed."""
    _follow(url, api_key, task_id, timeout)


def _follow(url: str, api_key: str, task_id: str, timeout: float) -> None:
    """A progress bar of the task until it ends or ``timeout`` passes; then its snapshot."""
    deadline = time.monotonic() + timeout
    task: dict[str, Any] = {}
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        TaskProgressColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=kit.console(), transient=True) as bar:
        line = bar.add_task(task_id, total=100)
        while True:
            task = kit.call_api("GET", url, f"/documents/tasks/{task_id}", api_key)
            bar.update(line, completed=task["progress"], description=task["stage"])
            if task["status"] in ENDED:
                break
            if time.monotonic() > deadline:
                kit.fail(
                    f"task {task_id} still {task['status']} ({task['progress']}%, "
                    f"{task['stage']}) after {timeout:g} s; wait again with "
                    f"`aigc-hub docs wait {task_id}`",
                    kit.ExitCode.UNAVAILABLE,
                )
            time.sleep(0.5)
    kit.show_json(task)
    if task["status"] == "failed":
        kit.fail(f"task {task_id} failed: {task['error_reason']}: {task['error_message']}")


@app.command()
def status(
    task_id: Annotated[str, typer.Argument(help="The task (task_…).")],
    url: ApiUrl = kit.DEFAULT_API_URL,
    api_key: ApiKey = "",
) -> None:
    """A task's status, progress and counts."""
    kit.show_json(kit.call_api("GET", url, f"/documents/tasks/{task_id}", api_key))


@app.command("list")
def list_documents(
    kb: Kb,
    limit: Annotated[int, typer.Option(min=1, max=200)] = 50,
    url: ApiUrl = kit.DEFAULT_API_URL,
    api_key: ApiKey = "",
) -> None:
    """The knowledge base's documents, newest first."""
    page = kit.call_api(
        "GET", url, f"/knowledge-bases/{kb}/documents", api_key, params={"limit": limit}
    )
    kit.show_json(page)


@app.command()
def search(
    query: Annotated[str, typer.Argument(help="What to look for.")],
    kb: Kb,
    k: Annotated[int, typer.Option("-k", min=1, max=100, help="How many chunks.")] = 5,
    model: Annotated[
        str | None, typer.Option(help="The embedding model version (default: the first).")
    ] = None,
    url: ApiUrl = kit.DEFAULT_API_URL,
    api_key: ApiKey = "",
) -> None:
    """The chunks of the knowledge base nearest QUERY, best first."""
    params: dict[str, str | int] = {"q": query, "k": k}
    if model:
        params["model"] = model
    kit.show_json(kit.call_api("GET", url, f"/knowledge-bases/{kb}/search", api_key, params=params))


@app.command()
def delete(
    document_id: Annotated[str, typer.Argument(help="The document (doc_…).")],
    url: ApiUrl = kit.DEFAULT_API_URL,
    api_key: ApiKey = "",
) -> None:
    """Delete a document with its chunks, vectors and file."""
    kit.show_json(kit.call_api("DELETE", url, f"/documents/{document_id}", api_key))


@app.command()
def reprocess(
    kb: Kb,
    since: Annotated[
        str | None,
        typer.Option(help="Only documents uploaded since this time (ISO 8601, e.g. 2026-12-01)."),
    ] = None,
    model: Annotated[
        str | None,
        typer.Option(help="The model version to re-embed with (default: every one the hub has)."),
    ] = None,
    url: ApiUrl = kit.DEFAULT_API_URL,
    api_key: ApiKey = "",
) -> None:
    """Re-embed the knowledge base's completed documents; prints the run (its chunk count)."""
    body: dict[str, str] = {}
    if since is not None:
        try:
            body["since"] = datetime.fromisoformat(since).isoformat()
        except ValueError:
            kit.fail(
                f"--since {since!r}: use an ISO 8601 time, e.g. 2026-12-01 or 2026-12-01T08:00Z"
            )
    if model:
        body["model"] = model
    run = kit.call_api(
        "POST",
        url,
        f"/knowledge-bases/{kb}/reprocess",
        api_key,
        json=body,
        # A retry of this very command is the same run.
        headers={"Idempotency-Key": str(uuid.uuid4())},
    )
    kit.show_json(run)
