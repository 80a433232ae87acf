"""Tenants and API keys: create, list, authenticate, revoke.

A key is ``ak_`` plus 32 URL-safe random characters from :mod:`secrets`. It is shown once,
when made; the database keeps only its SHA-256, so a lookup by hash is the comparison and
its timing says nothing about how much of a guess was right. A key whose ``tenant_id`` is
NULL is an admin key.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from dataclasses import dataclass
from typing import Literal

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from aigc_hub.core import errors, ids
from aigc_hub.reliability import audit
from aigc_hub.store import tables
from aigc_hub.store.engine import reader

Role = Literal["tenant", "admin"]
#: Every key starts with this, so leaked keys are easy to scan for.
KEY_PREFIX = "ak_"
#: Random characters after the prefix.
KEY_CHARS = 32
#: Characters kept in clear (``prefix`` column) to tell keys apart in listings.
DISPLAY_CHARS = 8


class TenantExists(errors.Conflict):
    """A tenant with this name already exists."""


@dataclass(frozen=True)
class Tenant:
    """A tenant: the owner of jobs, events and API keys."""

    id: str
    name: str
    created_at: int


@dataclass(frozen=True)
class Principal:
    """Who a valid key speaks for: a tenant (``tenant_id`` set) or an admin (None)."""

    tenant_id: str | None
    role: Role
    key_id: str


def admin_actor(who: Principal) -> str:
    """The audit log's actor for an admin key's action: ``admin:<key id>`` (every admin
    surface writes it alike, so one person's actions read as one actor)."""
    return f"admin:{who.key_id}"


def hash_key(presented: str) -> str:
    """The stored form of a key: SHA-256, hex."""
    return hashlib.sha256(presented.encode()).hexdigest()


def _new_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(KEY_CHARS)[:KEY_CHARS]


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


async def _insert_key(conn: AsyncConnection, tenant_id: str | None, role: Role) -> str:
    plaintext = _new_key()
    await conn.execute(
        tables.api_keys.insert().values(
            id=ids.new_id_str(),
            tenant_id=tenant_id,
            key_hash=hash_key(plaintext),
            prefix=plaintext[:DISPLAY_CHARS],
            role=role,
            created_at=_now_ms(),
            revoked_at=None,
        )
    )
    return plaintext


async def create_tenant(engine: AsyncEngine, name: str) -> tuple[Tenant, str]:
    """Create a tenant and its first key; returns the key in clear (shown once).

    Raises :class:`TenantExists` when the name is taken (nothing is written).
    """
    name = name.strip()
    if not name:
        raise ValueError("a tenant needs a non-empty name")
    tenant = Tenant(id=ids.new_id_str(), name=name, created_at=_now_ms())
    try:
        async with engine.begin() as conn:
            await conn.execute(
                tables.tenants.insert().values(
                    id=tenant.id, name=tenant.name, created_at=tenant.created_at
                )
            )
            plaintext = await _insert_key(conn, tenant.id, "tenant")
    except IntegrityError:
        raise TenantExists(f"a tenant named {name!r} already exists") from None
    return tenant, plaintext


async def create_tenant_key(engine: AsyncEngine, tenant_id: str) -> str:
    """Another key for an existing tenant; returns it in clear (shown once)."""
    async with engine.begin() as conn:
        return await _insert_key(conn, tenant_id, "tenant")


async def create_admin_key(engine: AsyncEngine) -> str:
    """A new admin key (no tenant); returns it in clear (shown once)."""
    async with engine.begin() as conn:
        return await _insert_key(conn, None, "admin")


async def list_tenants(engine: AsyncEngine) -> list[Tenant]:
    """Every tenant, oldest first."""
    t = tables.tenants
    async with engine.connect() as conn:
        rows = (await conn.execute(sa.select(t).order_by(t.c.created_at, t.c.id))).all()
    return [Tenant(id=r.id, name=r.name, created_at=r.created_at) for r in rows]


#: A live key by its hash (built once: every API request asks).
_LIVE_KEY = sa.select(
    tables.api_keys.c.id, tables.api_keys.c.tenant_id, tables.api_keys.c.role
).where(tables.api_keys.c.key_hash == sa.bindparam("hash"), tables.api_keys.c.revoked_at.is_(None))


async def authenticate(engine: AsyncEngine, presented: str) -> Principal | None:
    """The principal of a live key, or None for an unknown or revoked one."""
    if not presented.startswith(KEY_PREFIX):
        return None
    # A read beside the writer (on SQLite the writer's pool is one connection).
    async with reader(engine) as conn:
        row = (await conn.execute(_LIVE_KEY, {"hash": hash_key(presented)})).first()
    if row is None:
        return None
    role: Role = "admin" if row.role == "admin" else "tenant"
    return Principal(tenant_id=row.tenant_id, role=role, key_id=row.id)


async def live_principal(engine: AsyncEngine, key_id: str) -> Principal | None:
    """The principal of key ``key_id`` while it is live (not revoked); None otherwise.

    For sessions that outlive the request that presented the key (the web console): a key
    revoked after login stops working at the next request.
    """
    k = tables.api_keys
    query = sa.select(k.c.id, k.c.tenant_id, k.c.role).where(
        k.c.id == key_id, k.c.revoked_at.is_(None)
    )
    async with engine.connect() as conn:
        row = (await conn.execute(query)).first()
    if row is None:
        return None
    role: Role = "admin" if row.role == "admin" else "tenant"
    return Principal(tenant_id=row.tenant_id, role=role, key_id=row.id)


async def revoke(engine: AsyncEngine, key_id: str, *, actor: str | None = None) -> bool:
    """Revoke a key from now on; True when a live key was revoked. With ``actor``, the
    revocation is audited (action ``api_key.revoke``) in the same transaction.

    An API process remembers live keys for a few seconds
    (:mod:`aigc_hub.interfaces.http.key_cache`): one that did not revoke the key itself may
    accept it that long."""
    k = tables.api_keys
    now = _now_ms()
    async with engine.begin() as conn:
        result = await conn.execute(
            k.update().where(k.c.id == key_id, k.c.revoked_at.is_(None)).values(revoked_at=now)
        )
        revoked = bool(result.rowcount)
        if actor is not None:
            await audit.record(
                conn,
                at=now,
                actor=actor,
                action="api_key.revoke",
                target=f"api_key:{key_id}",
                result="revoked" if revoked else "not_live",
            )
    return revoked
