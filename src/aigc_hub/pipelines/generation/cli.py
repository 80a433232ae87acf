"""``aigc-hub gen``: generation tasks from the command line, through the HTTP API.

The twins of ``/v1/generation-tasks``: ``submit``, ``get``, ``list``, ``cancel``, ``wait``
(a progress bar fed by the task's notifications), ``credits``; and ``grant`` for operators
(writes the ledger directly, like ``tenants create``). ``gen project …`` edits projects
(``projects_cli.py``).
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING, Annotated

import httpx
import typer
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from sqlalchemy.ext.asyncio import AsyncEngine

from aigc_hub.cli import kit
from aigc_hub.cli.kit import GenerationTask, HubAPIError, HubClient, WaitTimeout
from aigc_hub.pipelines.generation.projects_cli import app as projects_app

if TYPE_CHECKING:
    from aigc_hub.pipelines.generation.ledger import Balance

app = kit.new_app(
    "gen", "Generation tasks: submit, get, list, cancel, wait; credits; editing projects."
)
app.add_typer(projects_app, name="project")

ApiUrl = Annotated[
    str,
    typer.Option("--url", envvar="AIGC_HUB_API_URL", help="Base URL of the hub's HTTP API."),
]
ApiKey = Annotated[
    str,
    typer.Option(
        "--api-key",
        envvar="AIGC_HUB_API_KEY",
        show_default=False,
        help="The tenant's API key (from `aigc-hub tenants create`).",
    ),
]
Json = Annotated[bool, typer.Option("--json", help="Print the task as JSON.")]
DEFAULT_URL = "http://127.0.0.1:8000"
_STATUS_EXIT = {
    400: kit.ExitCode.USAGE,
    401: kit.ExitCode.USAGE,
    402: kit.ExitCode.FAILURE,
    403: kit.ExitCode.USAGE,
    404: kit.ExitCode.NOT_FOUND,
    409: kit.ExitCode.CONFLICT,
    422: kit.ExitCode.USAGE,
    429: kit.ExitCode.UNAVAILABLE,
    503: kit.ExitCode.UNAVAILABLE,
}


@contextlib.contextmanager
def _client(url: str, key: str) -> Iterator[HubClient]:
    """A client whose API errors become one-line CLI errors with meaningful exit codes."""
    try:
        with HubClient(url, api_key=key) as client:
            yield client
    except HubAPIError as exc:
        fields = exc.extra.get("errors") or []
        named = "; ".join(f"{e.get('field')}: {e.get('message')}" for e in fields)
        kit.fail(
            f"{exc.detail or exc.title}" + (f" ({named})" if named else ""),
            _STATUS_EXIT.get(exc.status, kit.ExitCode.FAILURE),
        )
    except httpx.TransportError as exc:
        kit.fail(f"cannot reach the API at {url}: {exc}", kit.ExitCode.UNAVAILABLE)


def _show(task: GenerationTask, as_json: bool) -> None:
    if as_json:
        typer.echo(json.dumps(task.model_dump(), ensure_ascii=False))
        return
    table = Table(show_header=False)
    for name, value in task.model_dump().items():
        table.add_row(name, "" if value is None else str(value))
    kit.console().print(table)


@app.command()
def submit(
    model: Annotated[str, typer.Option("--model", help="Model, e.g. local-v1.")],
    prompt: Annotated[str, typer.Option("--prompt", help="What to generate.")],
    duration: Annotated[int, typer.Option("--duration", min=1, help="Seconds of video.")] = 2,
    resolution: Annotated[str, typer.Option("--resolution", help="WIDTHxHEIGHT.")] = "320x180",
    priority: Annotated[int, typer.Option("--priority", min=0, max=100)] = 50,
    idempotency_key: Annotated[
        str | None,
        typer.Option(
            "--idempotency-key", help="Reuse to make a repeated submit return the same task."
        ),
    ] = None,
    wait: Annotated[bool, typer.Option("--wait", help="Then wait with a progress bar.")] = False,
    url: ApiUrl = DEFAULT_URL,
    api_key: ApiKey = "",
    as_json: Json = False,
) -> None:
    """Create a generation task; prints it (status QUEUED)."""
    with _client(url, api_key) as client:
        task = client.create_task(
            model=model,
            prompt=prompt,
            duration_s=duration,
            resolution=resolution,
            priority=priority,
            idempotency_key=idempotency_key or str(uuid.uuid4()),
        )
        if wait:
            task = _wait(client, task.task_id, 600.0)
    _show(task, as_json)
    _exit_for(task)


@app.command()
def get(
    task_id: Annotated[str, typer.Argument(help="The task id.")],
    url: ApiUrl = DEFAULT_URL,
    api_key: ApiKey = "",
    as_json: Json = False,
) -> None:
    """Show a task's snapshot."""
    with _client(url, api_key) as client:
        _show(client.get_task(task_id), as_json)


@app.command("list")
def list_(
    status: Annotated[str | None, typer.Option("--status", help="Only this status.")] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=200)] = 20,
    url: ApiUrl = DEFAULT_URL,
    api_key: ApiKey = "",
) -> None:
    """List tasks, newest first."""
    with _client(url, api_key) as client:
        page = client.list_tasks(status=status, limit=limit)
    table = Table("task id", "status", "stage", "progress", "model", "created (ms)")
    for t in page.items:
        progress = "" if t.progress is None else f"{t.progress:.0%}"
        table.add_row(t.task_id, t.status, t.stage, progress, t.model, str(t.created_at_ms))
    kit.console().print(table)
    if page.next_cursor:
        kit.console().print(f"more: next cursor {page.next_cursor}")


@app.command()
def cancel(
    task_id: Annotated[str, typer.Argument(help="The task id.")],
    url: ApiUrl = DEFAULT_URL,
    api_key: ApiKey = "",
    as_json: Json = False,
) -> None:
    """Cancel a task (QUEUED: at once; at a provider: CANCEL_REQUESTED until it answers)."""
    with _client(url, api_key) as client:
        _show(client.cancel_task(task_id), as_json)


@app.command("wait")
def wait_(
    task_id: Annotated[str, typer.Argument(help="The task id.")],
    timeout: Annotated[float, typer.Option("--timeout", min=0.1, help="Seconds.")] = 600.0,
    url: ApiUrl = DEFAULT_URL,
    api_key: ApiKey = "",
    as_json: Json = False,
) -> None:
    """Wait until the task ends, with a progress bar; exit 0 only if it SUCCEEDED."""
    with _client(url, api_key) as client:
        task = _wait(client, task_id, timeout)
    _show(task, as_json)
    _exit_for(task)


@app.command()
def credits(url: ApiUrl = DEFAULT_URL, api_key: ApiKey = "") -> None:
    """The tenant's available and reserved credits."""
    with _client(url, api_key) as client:
        found = client.credits()
    typer.echo(f"available: {found.available}")
    typer.echo(f"reserved:  {found.reserved}")


@app.command()
def grant(
    tenant_id: Annotated[str, typer.Argument(help="The tenant id (aigc-hub tenants list).")],
    amount: Annotated[int, typer.Argument(min=1, help="Credits to add.")],
    grant_id: Annotated[
        str | None,
        typer.Option(
            "--grant-id",
            help="Business key: the same id for the same tenant grants once; an id already "
            "used for another tenant is refused (exit 4).",
        ),
    ] = None,
    database_url: kit.DatabaseUrl = None,
) -> None:
    """Add credits to a tenant (an appended GRANT ledger row); prints the new balance.

    An unknown tenant exits 3; a repeated --grant-id for the same tenant adds nothing and
    says so.
    """
    from aigc_hub.bootstrap import Hub
    from aigc_hub.hub_config import HubConfig
    from aigc_hub.messaging.memory import MemoryBroker
    from aigc_hub.pipelines.generation import services

    key = grant_id or str(uuid.uuid4())

    async def run(engine: AsyncEngine) -> tuple[Balance, bool]:
        hub = Hub(HubConfig(engine=engine, broker=MemoryBroker()))
        try:
            return await services.grant_to_tenant(
                hub, tenant_id=tenant_id, amount=amount, grant_id=key
            )
        except services.UnknownTenant:
            kit.fail(
                f"no tenant {tenant_id!r}: pick an id from `aigc-hub tenants list`",
                kit.ExitCode.NOT_FOUND,
            )
        except services.GrantIdTaken as exc:
            kit.fail(
                f"grant id {key!r} was already used for tenant {exc.other_tenant_id}: "
                "choose another --grant-id",
                kit.ExitCode.CONFLICT,
            )
        finally:
            await hub.close()

    balance, added = kit.run_on_database(database_url, run)
    if not added:
        typer.echo(f"grant {key} was already applied to this tenant: nothing added")
    typer.echo(f"available: {balance.available}")


def _wait(client: HubClient, task_id: str, timeout: float) -> GenerationTask:
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.percentage:>3.0f}%"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=kit.console(), transient=True) as bar:
        line = bar.add_task("QUEUED", total=1.0)

        def snapshot() -> GenerationTask:
            task = client.get_task(task_id)
            bar.update(line, completed=task.progress or 0.0, description=task.status)
            return task

        try:
            found: GenerationTask = client.wait_for(
                task_id, snapshot, lambda t: t.done, timeout, 1.0
            )
        except WaitTimeout:
            kit.fail(
                f"task {task_id} did not finish within {timeout:g} s", kit.ExitCode.UNAVAILABLE
            )
    return found


def _exit_for(task: GenerationTask) -> None:
    if task.done and task.status != "SUCCEEDED":
        raise typer.Exit(kit.ExitCode.FAILURE)
