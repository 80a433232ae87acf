"""Commands that talk to a running hub over its HTTP API: the options every such command
takes (``--url``, ``--api-key``) and one call whose error answer becomes one CLI line with
the documented exit code (the problem's detail and field errors, never a traceback)."""

from __future__ import annotations

import json
from typing import Annotated, Any

import httpx
import typer

from aigc_hub.cli.common import ExitCode, console, fail

DEFAULT_API_URL = "http://127.0.0.1:8000"
ApiUrl = Annotated[
    str, typer.Option("--url", envvar="AIGC_HUB_API_URL", help="Base URL of the hub's HTTP API.")
]
ApiKey = Annotated[
    str,
    typer.Option(
        "--api-key",
        envvar="AIGC_HUB_API_KEY",
        show_default=False,
        help="A tenant's API key (an admin key for admin commands).",
    ),
]
_EXIT = {
    401: ExitCode.USAGE,
    403: ExitCode.USAGE,
    404: ExitCode.NOT_FOUND,
    409: ExitCode.CONFLICT,
    413: ExitCode.USAGE,
    415: ExitCode.USAGE,
    422: ExitCode.USAGE,
    429: ExitCode.UNAVAILABLE,
    503: ExitCode.UNAVAILABLE,
}


def call_api(
    method: str, url: str, path: str, key: str | None = None, **options: Any
) -> dict[str, Any]:
    """One call of ``/v1{path}`` at the hub ``url`` (``options`` go to httpx); its JSON
    answer, ``{}`` for an empty one. An error answer or an unreachable hub stops the command
    with one line and its exit code."""
    headers = dict(options.pop("headers", {}))
    if key:
        headers["Authorization"] = f"Bearer {key}"
    try:
        answer = httpx.request(method, url.rstrip("/") + "/v1" + path, headers=headers, **options)
    except httpx.HTTPError as exc:
        fail(f"cannot reach the hub at {url} ({exc}); is it running?", ExitCode.UNAVAILABLE)
    if answer.status_code >= 400:
        try:
            problem = answer.json()
            detail = problem.get("detail") or problem.get("title")
            fields = "; ".join(f"{e['field']}: {e['message']}" for e in problem.get("errors", []))
        except ValueError:
            detail, fields = answer.text[:200], ""
        fail(
            f"{answer.status_code}: {detail}{' (' + fields + ')' if fields else ''}",
            _EXIT.get(answer.status_code, ExitCode.FAILURE),
        )
    if not answer.content:  # 204: done, nothing to show
        return {}
    result: dict[str, Any] = answer.json()
    return result


def show_json(value: object) -> None:
    """Print ``value`` as highlighted JSON."""
    console().print_json(json.dumps(value))
