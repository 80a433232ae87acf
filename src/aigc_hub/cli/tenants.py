"""``aigc-hub tenants``: create tenants and admin keys, list tenants.

Keys are printed once, when made; only their hash is stored.
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from aigc_hub import tenancy
from aigc_hub.cli import common, database

app = common.new_app(
    "tenants",
    "Tenants and API keys: create, list, admin keys. The database must be migrated first "
    "(aigc-hub db upgrade).",
)

_SHOWN_ONCE = "Store this key now: it is shown once and cannot be recovered."


@app.command()
def create(
    name: Annotated[str, typer.Argument(help="The tenant's unique name.")],
    database_url: database.DatabaseUrl = None,
) -> None:
    """Create a tenant and its first API key; prints the tenant id and the key (once)."""
    try:
        tenant, key = database.run(database_url, lambda e: tenancy.create_tenant(e, name))
    except tenancy.TenantExists as exc:
        common.fail(exc.message, common.ExitCode.CONFLICT)
    typer.echo(f"tenant id: {tenant.id}")
    typer.echo(f"api key:   {key}")
    typer.echo(_SHOWN_ONCE)


@app.command("list")
def list_(database_url: database.DatabaseUrl = None) -> None:
    """List the tenants, oldest first."""
    found = database.run(database_url, tenancy.list_tenants)
    table = Table("id", "name", "created_at (ms)")
    for tenant in found:
        table.add_row(tenant.id, tenant.name, str(tenant.created_at))
    common.console().print(table)


@app.command("admin-key")
def admin_key(database_url: database.DatabaseUrl = None) -> None:
    """Create an admin API key; prints it (once)."""
    key = database.run(database_url, tenancy.create_admin_key)
    typer.echo(f"admin api key: {key}")
    typer.echo(_SHOWN_ONCE)
