"""``aigc-hub avcc nodes`` (admin: register, list, revoke platform nodes) and
``aigc-hub avcc playback send`` (report a file of playback events as a node)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer

from aigc_hub.cli import kit

from .cli import DEFAULT_URL, ApiKey, ApiUrl, call_api, show

nodes_app = kit.new_app(
    "nodes", "Platform nodes that report playback (admin key): add, list, revoke."
)
playback_app = kit.new_app(
    "playback", "Playback: send events as a platform node; stats and anomalies (admin key)."
)

NodeKey = Annotated[
    str,
    typer.Option(
        "--node-key",
        envvar="AIGC_HUB_NODE_KEY",
        show_default=False,
        help="The platform node's key (avn_…, from `aigc-hub avcc nodes add`).",
    ),
]


@nodes_app.command("add")
def add(
    code: Annotated[str, typer.Argument(help="The node's code, 2 to 8 digits (e.g. 8361).")],
    name: Annotated[str, typer.Option(help="What the node is (a site's name).")],
    url: ApiUrl = DEFAULT_URL,
    api_key: ApiKey = "",
) -> None:
    """Register a node; prints its key once (the hub keeps only a hash)."""
    show(call_api("POST", url, "/avcc/admin/nodes", api_key, json={"code": code, "name": name}))


@nodes_app.command("list")
def list_nodes(url: ApiUrl = DEFAULT_URL, api_key: ApiKey = "") -> None:
    """Every registered node."""
    show(call_api("GET", url, "/avcc/admin/nodes", api_key))


@nodes_app.command("revoke")
def revoke(
    code: Annotated[str, typer.Argument(help="The node's code.")],
    url: ApiUrl = DEFAULT_URL,
    api_key: ApiKey = "",
) -> None:
    """Revoke a node's key: its reports are refused from then on."""
    call_api("DELETE", url, f"/avcc/admin/nodes/{code}", api_key)
    typer.echo(f"node {code} revoked")


def _events(path: Path) -> Iterator[tuple[int, Any]]:
    """The events of a JSON Lines file, with their line numbers (blank lines skipped)."""
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            if line.strip():
                try:
                    yield number, json.loads(line)
                except ValueError as exc:
                    kit.fail(f"{path}:{number}: not JSON ({exc}); one event per line")


@playback_app.command("send")
def send(
    file: Annotated[
        Path,
        typer.Argument(
            exists=True,
            dir_okay=False,
            help='JSON Lines: one event per line, {"event_id", "timestamp", "payload"}.',
        ),
    ],
    batch: Annotated[int, typer.Option(min=1, max=50_000, help="Events per request.")] = 2000,
    url: ApiUrl = DEFAULT_URL,
    node_key: NodeKey = "",
) -> None:
    """Report FILE's events as the node whose key is given, BATCH at a time.

    A refused batch stops the command with the first bad event's line and reason; the
    batches before it were taken.
    """
    sent = purchases = 0
    pending: list[tuple[int, Any]] = []

    def flush() -> None:
        nonlocal sent, purchases
        body = {"events": [event for _, event in pending]}
        first = pending[0][0]
        try:
            answer = call_api("POST", url, "/avcc/playback", node_key, json=body, timeout=60)
        except kit.CommandError as exc:
            where = f"the batch from line {first} was not taken; the {sent} event(s) before it were"
            kit.fail(f"{exc} [{where}]", exc.code)
        sent += int(answer["accepted"])
        purchases += int(answer["purchases"])
        pending.clear()

    for number, event in _events(file):
        pending.append((number, event))
        if len(pending) >= batch:
            flush()
    if pending:
        flush()
    show({"accepted": sent, "purchases": purchases})


@playback_app.command("stats")
def stats(
    window_s: Annotated[int, typer.Option(min=10, max=86_400, help="Seconds looked back.")] = 900,
    url: ApiUrl = DEFAULT_URL,
    api_key: ApiKey = "",
) -> None:
    """The sink's lag and insert rate, stored totals, top codes, latest anomalies (admin)."""
    show(call_api("GET", url, f"/avcc/admin/playback?window_s={window_s}", api_key))


@playback_app.command("anomalies")
def anomalies(
    kind: Annotated[str | None, typer.Option(help="spike, ratio, flood or revenue.")] = None,
    limit: Annotated[int, typer.Option(min=1, max=500)] = 50,
    url: ApiUrl = DEFAULT_URL,
    api_key: ApiKey = "",
) -> None:
    """Anomalies the detector found, newest first (admin)."""
    query = f"?limit={limit}" + (f"&kind={kind}" if kind else "")
    show(call_api("GET", url, f"/avcc/admin/playback/anomalies{query}", api_key))
