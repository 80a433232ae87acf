"""``aigc-hub gen project``: editing projects from the command line, through the HTTP API.

The twins of ``/v1/projects``: ``create`` (with a first timeline from a JSON file),
``save`` (a new revision over the one the edit started from), ``get`` (the newest revision
or one by number), ``list``, ``export`` (render a revision with a profile) and ``wait``
(follow an export to its end). The timeline file is the same document the API and the
console take (``TimelineV1`` in the OpenAPI document).
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn

from aigc_hub.cli import kit
from aigc_hub.cli.kit import ApiKey, ApiUrl

app = kit.new_app(
    "project", "Editing projects: create, save a revision, get, list, export, wait for an export."
)
#: Export states that are final.
ENDED = ("succeeded", "failed", "cancelled")

TimelineFile = Annotated[
    Path,
    typer.Option(
        "--timeline",
        exists=True,
        dir_okay=False,
        help="A timeline document (JSON, schema TimelineV1 of the API).",
    ),
]


def _timeline(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        kit.fail(f"{path.name} is not a JSON timeline ({exc}); fix the file", kit.ExitCode.USAGE)
    if not isinstance(value, dict):
        kit.fail(f"{path.name} holds no JSON object: a timeline is one", kit.ExitCode.USAGE)
    return value


@app.command()
def create(
    name: Annotated[str, typer.Argument(help="The project's name (1-200 characters).")],
    timeline: Annotated[
        Path | None,
        typer.Option(
            exists=True, dir_okay=False, help="A first timeline (JSON), saved as revision 1."
        ),
    ] = None,
    url: ApiUrl = kit.DEFAULT_API_URL,
    api_key: ApiKey = "",
) -> None:
    """Create a project; prints it (its id, its head revision)."""
    body: dict[str, Any] = {"name": name}
    if timeline is not None:
        body["timeline"] = _timeline(timeline)
    kit.show_json(kit.call_api("POST", url, "/projects", api_key, json=body))


@app.command()
def save(
    project_id: Annotated[str, typer.Argument(help="The project.")],
    timeline: TimelineFile,
    base: Annotated[
        int, typer.Option(help="The revision the edit started from (0 for the first save).")
    ],
    url: ApiUrl = kit.DEFAULT_API_URL,
    api_key: ApiKey = "",
) -> None:
    """Save a timeline as the revision after BASE; exits 4 when the project moved on (read it
    with `get`, merge, save again)."""
    body = {"base_revision": base, "timeline": _timeline(timeline)}
    path = f"/projects/{project_id}/revisions"
    kit.show_json(kit.call_api("POST", url, path, api_key, json=body))


@app.command()
def get(
    project_id: Annotated[str, typer.Argument(help="The project.")],
    revision: Annotated[
        int | None, typer.Option(min=1, help="A revision's number (default: the newest).")
    ] = None,
    url: ApiUrl = kit.DEFAULT_API_URL,
    api_key: ApiKey = "",
) -> None:
    """Print a project with its newest revision, or one revision."""
    path = f"/projects/{project_id}"
    if revision is not None:
        path += f"/revisions/{revision}"
    kit.show_json(kit.call_api("GET", url, path, api_key))


@app.command("list")
def list_(
    limit: Annotated[int, typer.Option(min=1, max=200, help="Projects per page.")] = 50,
    before: Annotated[str | None, typer.Option(help="Page on: the answer's next_before.")] = None,
    url: ApiUrl = kit.DEFAULT_API_URL,
    api_key: ApiKey = "",
) -> None:
    """List your projects, newest first."""
    params: dict[str, Any] = {"limit": limit} | ({"before": before} if before else {})
    kit.show_json(kit.call_api("GET", url, "/projects", api_key, params=params))


@app.command()
def export(
    project_id: Annotated[str, typer.Argument(help="The project.")],
    profile: Annotated[
        str, typer.Option(help="Render profile: draft, hd, fullhd or source.")
    ] = "hd",
    revision: Annotated[
        int | None, typer.Option(min=1, help="The revision to render (default: the newest).")
    ] = None,
    idempotency_key: Annotated[
        str | None,
        typer.Option(help="Reuse to make a repeated request return the same export."),
    ] = None,
    wait: Annotated[bool, typer.Option("--wait", help="Follow it until it ends.")] = False,
    timeout: Annotated[float, typer.Option(min=0.1, help="Seconds --wait waits.")] = 3600,
    url: ApiUrl = kit.DEFAULT_API_URL,
    api_key: ApiKey = "",
) -> None:
    """Render a revision of the project with a profile; prints the export (its id). With
    --wait, follows it like `wait`."""
    body: dict[str, Any] = {"profile": profile}
    if revision is not None:
        body["revision"] = revision
    key = idempotency_key or str(uuid.uuid4())
    path = f"/projects/{project_id}/exports"
    made = kit.call_api("POST", url, path, api_key, json=body, headers={"Idempotency-Key": key})
    if not wait:
        kit.show_json(made)
        return
    _follow(url, api_key, project_id, made["export_id"], timeout)


@app.command("wait")
def wait_for(
    project_id: Annotated[str, typer.Argument(help="The project.")],
    export_id: Annotated[str, typer.Argument(help="The export (from `export`).")],
    timeout: Annotated[float, typer.Option(min=0.1, help="Seconds to wait at most.")] = 3600,
    url: ApiUrl = kit.DEFAULT_API_URL,
    api_key: ApiKey = "",
) -> None:
    """Show an export's progress until it ends; exit 0 when it succeeded (its asset_id is
    the file), 1 when it failed (naming the node) or was cancelled."""
    _follow(url, api_key, project_id, export_id, timeout)


def _follow(url: str, api_key: str, project_id: str, export_id: str, timeout: float) -> None:
    """A progress bar of the export until it ends or ``timeout`` passes; then its view."""
    deadline = time.monotonic() + timeout
    path = f"/projects/{project_id}/exports/{export_id}"
    columns = (TextColumn("{task.description}"), BarColumn(), TaskProgressColumn())
    with Progress(*columns, TimeElapsedColumn(), console=kit.console(), transient=True) as bar:
        line = bar.add_task(export_id, total=1.0)
        while True:
            found = kit.call_api("GET", url, path, api_key)
            stage = found["current_node"] or found["status"]
            bar.update(line, completed=found["progress"], description=stage)
            if found["status"] in ENDED:
                break
            if time.monotonic() > deadline:
                kit.fail(
                    f"export {export_id} still {found['status']} ({stage}) after {timeout:g} s; "
                    f"wait again with `aigc-hub gen project wait {project_id} {export_id}`",
                    kit.ExitCode.UNAVAILABLE,
                )
            time.sleep(0.5)
    kit.show_json(found)
    if found["status"] == "failed":
        node = f" at node {found['failed_node']}" if found["failed_node"] else ""
        kit.fail(f"export {export_id} failed{node}: {found['status_reason']}")
    if found["status"] == "cancelled":
        kit.fail(f"export {export_id} was cancelled")
