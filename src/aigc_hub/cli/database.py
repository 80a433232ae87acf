"""The hub's database for a command: open it, or say in one line what is wrong and the fix.

Every command that uses the database goes through this module. Before anything runs (and
before anything is created on disk), :func:`ready_url` checks that the URL can work, that the
server answers and that the schema is at the code's head revision; each failure becomes a
:class:`~aigc_hub.cli.common.CommandError` naming the fix:

* a URL that cannot be parsed or names another database: ``CONFIGURATION`` (78);
* a missing SQLite file, or a schema not at head: ``CONFIGURATION`` (78),
  "run `aigc-hub db upgrade`";
* a server that does not answer (or a locked SQLite file): ``UNAVAILABLE`` (5).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Awaitable, Callable, Iterator
from typing import Annotated, NoReturn, TypeVar

import sqlalchemy as sa
import typer
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine

from aigc_hub.cli import common
from aigc_hub.settings import Settings
from aigc_hub.store import engine as store_engine
from aigc_hub.store import migrate

T = TypeVar("T")

#: The one command that brings a database to the code's schema.
UPGRADE_FIX = "run `aigc-hub db upgrade`"
#: Where the URL comes from, for messages that ask for another one.
URL_FIX = (
    "use sqlite:///path/to/file.db or postgresql://user@host/db "
    "(--database-url or AIGC_HUB_DATABASE_URL)"
)

#: The backends of the URLs the hub accepts (``postgres`` is an alias of ``postgresql``).
SUPPORTED_BACKENDS = ("sqlite", "postgresql", "postgres")

DatabaseUrl = Annotated[
    str | None,
    typer.Option(
        "--database-url",
        envvar="AIGC_HUB_DATABASE_URL",
        show_default="sqlite:///<data dir>/hub.db",
        help="sqlite:///path/to/file.db or postgresql://user@host/db",
    ),
]


def resolve(database_url: str | None = None) -> str:
    """``database_url`` when given, else the settings' (default: ``<data_dir>/hub.db``);
    a URL that cannot be parsed or names an unsupported database is a CommandError."""
    url = database_url or Settings().resolved_database_url()
    try:
        backend = make_url(url).get_backend_name()
    except (sa.exc.ArgumentError, ValueError) as exc:  # ValueError: e.g. a non-numeric port
        _fail(f"bad database URL {_shown(url)!r} ({common.describe(exc)}): {URL_FIX}")
    if backend not in SUPPORTED_BACKENDS:
        _fail(f"unsupported database URL {_shown(url)!r}: {URL_FIX}")
    return url


def ready_url(database_url: str | None = None) -> str:
    """The resolved URL of a reachable database migrated to head; else a CommandError.

    Creates nothing: a missing SQLite file (or its folder) is reported, not made.
    """
    url = resolve(database_url)
    with translated(url):
        revision = migrate.current_revision(url)
        head = migrate.head_revision()
    if revision is None:
        _fail(f"database not initialised ({_shown(url)}): {UPGRADE_FIX}")
    if revision != head:
        if migrate.is_known_revision(revision):
            _fail(f"database at revision {revision}, this aigc-hub needs {head}: {UPGRADE_FIX}")
        _fail(
            f"database at revision {revision}, which this aigc-hub does not know (head {head}): "
            "install the aigc-hub version that migrated it"
        )
    return url


def upgrade(database_url: str | None = None) -> tuple[str, str | None]:
    """Apply pending migrations (creating a SQLite file); returns the URL and revision reached."""
    url = resolve(database_url)
    try:
        with translated(url):
            migrate.upgrade(url)
            return url, migrate.current_revision(url)
    except OSError as exc:  # the SQLite file's folder cannot be made
        _fail(f"cannot create the SQLite database {_shown(url)}: {common.describe(exc)}; {URL_FIX}")


def current(database_url: str | None = None) -> tuple[str | None, str]:
    """The database's revision (None: not migrated, or missing) and the head; creates nothing."""
    url = resolve(database_url)
    with translated(url):
        return migrate.current_revision(url), migrate.head_revision()


def run(database_url: str | None, work: Callable[[AsyncEngine], Awaitable[T]]) -> T:
    """Run ``work`` on an engine of the ready database (see :func:`ready_url`), then dispose it."""
    url = ready_url(database_url)

    async def go() -> T:
        engine = store_engine.create_engine(url)
        try:
            return await work(engine)
        finally:
            await engine.dispose()

    # Once the schema is known good, only a lost connection is the user's to fix; any other
    # database error inside the work is a bug and keeps its traceback.
    with translated(url, (sa.exc.OperationalError, sa.exc.InterfaceError)):
        return common.run_async(go())


@contextlib.contextmanager
def translated(
    url: str, kinds: tuple[type[sa.exc.DBAPIError], ...] = (sa.exc.DBAPIError,)
) -> Iterator[None]:
    """Turn a database error of ``kinds`` raised inside (server down, file unopenable) into
    one line naming the fix."""
    try:
        yield
    except kinds as exc:
        _fail_unreachable(url, exc)


def _fail_unreachable(url: str, exc: sa.exc.DBAPIError) -> NoReturn:
    reason = common.describe(exc.orig if exc.orig is not None else exc)
    if not store_engine.is_sqlite(url):
        common.fail(
            f"cannot reach the database at {_shown(url)}: {reason}; start PostgreSQL or fix "
            "--database-url / AIGC_HUB_DATABASE_URL",
            common.ExitCode.UNAVAILABLE,
        )
    if "locked" in reason or "busy" in reason:
        common.fail(
            f"SQLite database {_shown(url)} is busy ({reason}): try again",
            common.ExitCode.UNAVAILABLE,
        )
    _fail(f"cannot open the SQLite database {_shown(url)}: {reason}; {URL_FIX}")


def _fail(message: str) -> NoReturn:
    common.fail(message, common.ExitCode.CONFIGURATION)


def _shown(url: str) -> str:
    """``url`` for a message: the password hidden, even in a URL that does not parse."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except (sa.exc.ArgumentError, ValueError):
        return re.sub(r"(://[^:/@]*:)[^@/]*@", r"\1***@", url)
