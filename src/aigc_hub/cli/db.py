"""``aigc-hub db``: migrate the database and show its schema revision."""

from __future__ import annotations

from typing import Annotated, NoReturn

import pydantic
import sqlalchemy as sa
import typer
from alembic.util import CommandError

from aigc_hub.cli import common
from aigc_hub.core import errors
from aigc_hub.settings import Settings
from aigc_hub.store import migrate

#: Exit code of a mistake the user can fix: bad or unsupported URL, unreachable database.
EXIT_USER_ERROR = int(common.ExitCode.UNAVAILABLE)

app = common.new_app("db", "Database schema: apply the migrations, show the revision.")

DatabaseUrl = Annotated[
    str | None,
    typer.Option(
        "--database-url",
        envvar="AIGC_HUB_DATABASE_URL",
        show_default="sqlite:///var/hub.db",
        help="sqlite:///path/to/file.db or postgresql://user@host/db",
    ),
]

#: What a user can cause and fix; anything else is a bug and keeps its traceback.
_USER_ERRORS = (
    errors.HubError,
    sa.exc.ArgumentError,
    sa.exc.DBAPIError,
    CommandError,
    OSError,
    pydantic.ValidationError,
)


@app.command()
def upgrade(database_url: DatabaseUrl = None) -> None:
    """Apply every pending migration; prints the revision reached."""
    try:
        url = database_url or Settings().resolved_database_url()
        migrate.upgrade(url)
        revision = migrate.current_revision(url)
    except _USER_ERRORS as exc:
        _fail(exc)
    typer.echo(f"database at revision {revision} (head)")


@app.command()
def current(database_url: DatabaseUrl = None) -> None:
    """Print the database's current revision and the head revision of the code."""
    try:
        url = database_url or Settings().resolved_database_url()
        revision = migrate.current_revision(url)
        head = migrate.head_revision()
    except _USER_ERRORS as exc:
        _fail(exc)
    typer.echo(f"current: {revision or 'none (not migrated)'}")
    typer.echo(f"head:    {head}")


def _fail(exc: BaseException) -> NoReturn:
    """One ``error:`` line on stderr, exit code 5, no traceback."""
    if isinstance(exc, sa.exc.DBAPIError) and exc.orig is not None:
        exc = exc.orig  # the driver's message, without SQLAlchemy's statement and link
    common.report_error(common.describe(exc))
    raise typer.Exit(EXIT_USER_ERROR)
