"""Tenants and API keys on SQLite and PostgreSQL: service functions and ``aigc-hub tenants``."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine
from typer.testing import CliRunner

from aigc_hub import tenancy
from aigc_hub.cli import tenants as tenants_cli
from aigc_hub.store import engine as store_engine


async def test_a_tenant_key_authenticates_as_its_tenant(db: AsyncEngine) -> None:
    tenant, key = await tenancy.create_tenant(db, "acme")
    assert key.startswith("ak_") and len(key) == 3 + tenancy.KEY_CHARS
    who = await tenancy.authenticate(db, key)
    assert who is not None
    assert (who.tenant_id, who.role) == (tenant.id, "tenant")
    assert [t.name for t in await tenancy.list_tenants(db)] == ["acme"]


async def test_keys_are_stored_hashed_only(db: AsyncEngine) -> None:
    _, key = await tenancy.create_tenant(db, "acme")
    async with db.connect() as conn:
        rows = (await conn.exec_driver_sql("SELECT key_hash, prefix FROM api_keys")).all()
    assert rows == [(tenancy.hash_key(key), key[:8])]


async def test_unknown_wrong_and_revoked_keys_do_not_authenticate(db: AsyncEngine) -> None:
    _, key = await tenancy.create_tenant(db, "acme")
    assert await tenancy.authenticate(db, "ak_" + "x" * 32) is None
    assert await tenancy.authenticate(db, "not-a-key") is None
    who = await tenancy.authenticate(db, key)
    assert who is not None
    assert await tenancy.revoke(db, who.key_id) is True
    assert await tenancy.revoke(db, who.key_id) is False
    assert await tenancy.authenticate(db, key) is None


async def test_admin_keys_have_no_tenant(db: AsyncEngine) -> None:
    key = await tenancy.create_admin_key(db)
    who = await tenancy.authenticate(db, key)
    assert who is not None
    assert (who.tenant_id, who.role) == (None, "admin")


async def test_a_duplicate_name_is_refused_and_writes_nothing(db: AsyncEngine) -> None:
    await tenancy.create_tenant(db, "acme")
    with pytest.raises(tenancy.TenantExists):
        await tenancy.create_tenant(db, "acme")
    async with db.connect() as conn:
        count = (await conn.exec_driver_sql("SELECT count(*) FROM api_keys")).scalar_one()
    assert count == 1


def test_cli_create_prints_a_key_that_authenticates(db_url: str) -> None:
    runner = CliRunner()
    result = runner.invoke(tenants_cli.app, ["create", "acme", "--database-url", db_url])
    assert result.exit_code == 0, result.output
    assert "shown once" in result.output
    key = next(
        line.split()[-1] for line in result.output.splitlines() if line.startswith("api key:")
    )
    tenant_id = next(
        line.split()[-1] for line in result.output.splitlines() if line.startswith("tenant id:")
    )

    async def check() -> tenancy.Principal | None:
        engine = store_engine.create_engine(db_url)
        try:
            return await tenancy.authenticate(engine, key)
        finally:
            await engine.dispose()

    who = asyncio.run(check())
    assert who is not None and who.tenant_id == tenant_id

    listed = runner.invoke(tenants_cli.app, ["list", "--database-url", db_url])
    assert listed.exit_code == 0 and "acme" in listed.output

    again = runner.invoke(tenants_cli.app, ["create", "acme", "--database-url", db_url])
    assert again.exit_code == 4
    assert again.stderr.count("error:") == 1 and "acme" in again.stderr

    admin = runner.invoke(tenants_cli.app, ["admin-key", "--database-url", db_url])
    assert admin.exit_code == 0 and "admin api key: ak_" in admin.output
