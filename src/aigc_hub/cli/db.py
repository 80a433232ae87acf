"""``aigc-hub db``: migrate the database and show its schema revision."""

from __future__ import annotations

from typing import Annotated, NoReturn

import sqlalchemy as sa
import typer
from alembic.util import CommandError

from aigc_hub.core import errors
from aigc_hub.store import migrate

#: Exit code for a mistake the user can fix (bad URL, unreachable database, bad revision).
EXIT_USER_ERROR = 5
DEFAULT_DATABASE_URL = "sqlite:///var/hub.db"

app = typer.Typer(help="Database schema: migrate, show the revision.", no_args_is_help=True)

DatabaseUrl = Annotated[
    str,
    typer.Option(
        "--database-url",
        envvar="AIGC_HUB_DATABASE_URL",
        help="sqlite:///path/to/file.db or postgresql://user@host/db",
    ),
]

#: What a user can cause and fix; anything else is a bug and keeps its traceback.
_USER_ERRORS = (errors.HubError, sa.exc.ArgumentError, sa.exc.DBAPIError, CommandError, OSError)


@app.command()
def upgrade(database_url: DatabaseUrl = DEFAULT_DATABASE_URL) -> None:
    """Apply every pending migration; prints the revision reached."""
    try:
        migrate.upgrade(database_url)
        revision = migrate.current_revision(database_url)
    except _USER_ERRORS as exc:
        _fail(exc)
    typer.echo(f"database at revision {revision} (head)")


@app.command()
def current(database_url: DatabaseUrl = DEFAULT_DATABASE_URL) -> None:
    """Print the database's current revision and the head revision of the code."""
    try:
        revision = migrate.current_revision(database_url)
        head = migrate.head_revision()
    except _USER_ERRORS as exc:
        _fail(exc)
    typer.echo(f"current: {revision or 'none (not migrated)'}")
    typer.echo(f"head:    {head}")


def _fail(exc: BaseException) -> NoReturn:
    """One line on stderr, exit code 5, no traceback."""
    if isinstance(exc, sa.exc.DBAPIError) and exc.orig is not None:
        detail = str(exc.orig)
    elif isinstance(exc, OSError) and exc.strerror and exc.filename is not None:
        detail = f"{exc.strerror}: {exc.filename}"
    else:
        detail = str(exc)
    lines = [" ".join(line.split()) for line in detail.splitlines() if line.strip()]
    typer.echo(f"error: {lines[0] if lines else type(exc).__name__}", err=True)
    raise typer.Exit(EXIT_USER_ERROR)
