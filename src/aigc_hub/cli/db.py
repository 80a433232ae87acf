"""``aigc-hub db``: migrate the database and show its schema revision."""

from __future__ import annotations

import typer

from aigc_hub.cli import common, database

app = common.new_app(
    "db",
    "Database schema: apply the migrations, show the revision. A bad URL exits 78, an "
    "unreachable database 5.",
)


@app.command()
def upgrade(database_url: database.DatabaseUrl = None) -> None:
    """Apply every pending migration (creating a SQLite file); prints the revision reached."""
    _url, revision = database.upgrade(database_url)
    typer.echo(f"database at revision {revision} (head)")


@app.command()
def current(database_url: database.DatabaseUrl = None) -> None:
    """Print the database's current revision and the head revision of the code; creates nothing."""
    revision, head = database.current(database_url)
    typer.echo(f"current: {revision or 'none (not migrated)'}")
    typer.echo(f"head:    {head}")
