"""``aigc-hub gen project``: editing projects from the command line, through the HTTP API.

The twins of ``/v1/projects``: ``create`` (with a first timeline from a JSON file),
``save`` (a new revision over the one the edit started from), ``get`` (the newest revision
or one by number) and ``list``. The timeline file is the same document the API and the
console take (``TimelineV1`` in the OpenAPI document).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from aigc_hub.cli import kit
from aigc_hub.cli.kit import ApiKey, ApiUrl

app = kit.new_app("project", "Editing projects: create, save a revision, get, list.")

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
