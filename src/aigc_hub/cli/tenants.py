"""``aigc-hub tenants``: create tenants and admin keys, list tenants.

Keys are printed once, when made; only their hash is stored.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, TypeVar

import typer
from rich.table import Table
from sqlalchemy.ext.asyncio import AsyncEngine

from aigc_hub import tenancy
from aigc_hub.cli import common
from aigc_hub.settings import Settings
from aigc_hub.store import engine as store_engine

T = TypeVar("T")

app = common.new_app("tenants", "Tenants and API keys: create, list, admin keys.")

DatabaseUrl = Annotated[
    str | None,
    typer.Option(
        "--database-url",
        envvar="AIGC_HUB_DATABASE_URL",
        show_default="sqlite:///var/hub.db",
        help="sqlite:///path/to/file.db or postgresql://user@host/db",
    ),
]

_SHOWN_ONCE = "Store this key now: it is shown once and cannot be recovered."


def _with_engine(database_url: str | None, work: Callable[[AsyncEngine], Awaitable[T]]) -> T:
    url = database_url or Settings().resolved_database_url()

    async def run() -> T:
        engine = store_engine.create_engine(url)
        try:
            return await work(engine)
        finally:
            await engine.dispose()

    return common.run_async(run())


@app.command()
def create(
    name: Annotated[str, typer.Argument(help="The tenant's unique name.")],
    database_url: DatabaseUrl = None,
) -> None:
    """Create a tenant and its first API key; prints the tenant id and the key (once)."""
    try:
        tenant, key = _with_engine(database_url, lambda e: tenancy.create_tenant(e, name))
    except tenancy.TenantExists as exc:
        common.fail(exc.message, common.ExitCode.CONFLICT)
    typer.echo(f"tenant id: {tenant.id}")
    typer.echo(f"api key:   {key}")
    typer.echo(_SHOWN_ONCE)


@app.command("list")
def list_(database_url: DatabaseUrl = None) -> None:
    """List the tenants, oldest first."""
    found = _with_engine(database_url, tenancy.list_tenants)
    table = Table("id", "name", "created_at (ms)")
    for tenant in found:
        table.add_row(tenant.id, tenant.name, str(tenant.created_at))
    common.console().print(table)


@app.command("admin-key")
def admin_key(database_url: DatabaseUrl = None) -> None:
    """Create an admin API key; prints it (once)."""
    key = _with_engine(database_url, tenancy.create_admin_key)
    typer.echo(f"admin api key: {key}")
    typer.echo(_SHOWN_ONCE)
