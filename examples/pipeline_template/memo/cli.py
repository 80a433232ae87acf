"""``aigc-hub memo``: the pipeline's own commands."""

from __future__ import annotations

import typer

from .settings import MemoSettings

app = typer.Typer(help="The memo pipeline: notes stamped by a consumer, archived by a scanner.")


@app.command("settings")
def show_settings() -> None:
    """Print the settings in force, one AIGC_HUB_MEMO_* variable a line."""
    for name, value in MemoSettings().model_dump().items():
        typer.echo(f"AIGC_HUB_MEMO_{name.upper()}={value}")
