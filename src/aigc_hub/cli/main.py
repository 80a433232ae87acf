"""``aigc-hub``, the console script: the root Typer app and the command groups it mounts."""

from __future__ import annotations

from importlib import metadata
from typing import Annotated

import typer

from aigc_hub.cli import api, common, db, dlq, pipelines, provider, run, schemas, tenants, topics

# Paragraphs are single lines: the help renderer keeps line breaks as they are.
HELP = "\n\n".join(
    (
        "AIGC Hub: an event backbone for long, costly, unreliable AI-content jobs.",
        "Requests start work through a transactional outbox; consumers give every event an "
        "exactly-once effect (inbox marks, guarded state updates); failures retry with backoff "
        "or go to the dead-letter queue. Pipelines (generation today) plug in as blueprints: "
        "every installed one runs (entry points 'aigc_hub.pipelines') and adds its own command "
        "group below (generation: gen); AIGC_HUB_PIPELINES selects which run (names or "
        "module:attribute, comma separated; empty for none).",
        "Exit codes: 0 ok, 1 failure, 2 usage, 3 not found, 4 conflict, 5 unavailable, "
        "6 incompatible, 70 internal error, 78 configuration.",
        "Commands that use the database check it first and create nothing: a bad URL, a "
        "missing or unmigrated database exit 78 (run `aigc-hub db upgrade`; `up` migrates by "
        "itself), an unreachable one 5.",
    )
)

app = common.new_app("aigc-hub", HELP)


def _print_version(value: bool) -> None:
    if value:
        try:
            version = metadata.version("aigc-hub")
        except metadata.PackageNotFoundError:
            version = "unknown (not installed)"
        typer.echo(f"aigc-hub {version}")
        raise typer.Exit()


@app.callback()
def main(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """Options that apply to every command."""


# ---------------------------------------------------------------------------------------------
# Command groups and commands: one line each. Add new ones here, e.g.
#     app.add_typer(db.app, name="db")
#     app.add_typer(dlq.app, name="dlq")
#     app.command("up")(up.up)
# (build sub-apps with common.new_app(...) so their errors are reported like everyone else's)
# ---------------------------------------------------------------------------------------------
app.add_typer(schemas.app, name="schemas")
app.add_typer(topics.app, name="topics")
app.add_typer(db.app, name="db")
app.add_typer(dlq.app, name="dlq")
app.command("up")(run.up)
app.command("relay")(run.relay)
app.command("worker")(run.worker)
app.command("scan")(run.scan)
app.add_typer(tenants.app, name="tenants")
app.command("api")(api.api)
app.add_typer(provider.app, name="provider")
# Each pipeline's own group (`aigc-hub gen` for generation), declared in its folder.
pipelines.mount(app)
