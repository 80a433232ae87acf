"""Platform nodes: the sites that play coded works and report their playback (seed 000 §9.2.4
``platform_node``), each with a key of its own.

A node's key is 32 random bytes (``avn_`` + URL-safe base64) shown once when the node is
added; the hub keeps its SHA-256, enough for a random key (no password stretching needed).
A node reports only its own events: the gateway refuses an event whose ``platform_node`` is
not the key's node. A looked-up key is remembered for :data:`CACHE_S` seconds, so a revoked
key may still be accepted that long by a process that saw it just before.
"""

from __future__ import annotations

import hashlib
import re
import secrets
import time
from dataclasses import dataclass

import sqlalchemy as sa
from cachetools import TTLCache
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from aigc_hub.core.errors import InvalidInput
from aigc_hub.store.engine import reader

from .settlement_tables import avcc_platform_nodes as nodes

KEY_PREFIX = "avn_"
#: How long a process trusts a key it looked up (also how long a revocation may take).
CACHE_S = 5.0
CODE = re.compile(r"[0-9]{2,8}")


@dataclass(frozen=True)
class PlatformNode:
    """A platform node as the API shows it (never its key)."""

    code: str
    name: str
    created_at: int
    revoked_at: int | None


class NodeExists(InvalidInput):
    """A node with this code is already registered."""


def hash_key(presented: str) -> str:
    """The stored form of a node key."""
    return hashlib.sha256(presented.encode()).hexdigest()


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


async def add_node(engine: AsyncEngine, code: str, name: str) -> tuple[PlatformNode, str]:
    """Register node ``code``; returns it and its key (the only time the key is shown)."""
    if not CODE.fullmatch(code):
        raise InvalidInput("code", "a node code is 2 to 8 digits, e.g. 8361")
    if not name.strip() or len(name) > 200:
        raise InvalidInput("name", "a node needs a name of 1 to 200 characters")
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    now = _now_ms()
    try:
        async with engine.begin() as conn:
            await conn.execute(
                nodes.insert().values(
                    code=code, name=name.strip(), key_hash=hash_key(key), created_at=now
                )
            )
    except IntegrityError:
        raise NodeExists("code", f"node {code} is already registered") from None
    return PlatformNode(code, name.strip(), now, None), key


async def list_nodes(engine: AsyncEngine) -> list[PlatformNode]:
    """Every node, by code."""
    async with reader(engine) as conn:
        rows = (await conn.execute(sa.select(nodes).order_by(nodes.c.code))).all()
    return [PlatformNode(r.code, r.name, r.created_at, r.revoked_at) for r in rows]


async def revoke_node(engine: AsyncEngine, code: str) -> bool:
    """Revoke the node's key (its reports are refused from then on); False if unknown."""
    async with engine.begin() as conn:
        result = await conn.execute(
            nodes.update()
            .where(nodes.c.code == code, nodes.c.revoked_at.is_(None))
            .values(revoked_at=_now_ms())
        )
        if result.rowcount:
            return True
        known = await conn.scalar(sa.select(nodes.c.code).where(nodes.c.code == code))
    return known is not None


class NodeKeys:
    """Looks node keys up, remembering live ones for :data:`CACHE_S` seconds."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self._live: TTLCache[str, str] = TTLCache(maxsize=10_000, ttl=CACHE_S)

    async def node_of(self, presented: str) -> str | None:
        """The code of the live node holding ``presented``, or None."""
        key_hash = hash_key(presented)
        code = self._live.get(key_hash)
        if code is not None:
            return code
        async with reader(self.engine) as conn:
            code = await conn.scalar(
                sa.select(nodes.c.code).where(
                    nodes.c.key_hash == key_hash, nodes.c.revoked_at.is_(None)
                )
            )
        if code is not None:
            self._live[key_hash] = code
        return code
