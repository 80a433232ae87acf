"""avcc's transparency log on the hub's database (SQLite or PostgreSQL): append entries,
seal them under a signed tree head, and hand out receipts and consistency proofs.

Writers (:meth:`TransparencyLog.append`, :meth:`TransparencyLog.seal`) are serialized across
processes, so leaf indices are dense and one tree size never gets two heads: each takes the
row lock of the head of size 0 (the signed empty tree, written by the first writer) with
``SELECT ... FOR UPDATE``. On PostgreSQL that row lock queues writers until commit; SQLite
ignores ``FOR UPDATE`` and needs nothing more, as the hub begins every write transaction with
``BEGIN IMMEDIATE`` (``store/engine.py``), one writer at a time. No dialect branch either way.

Readers (:meth:`~TransparencyLog.prove`, :meth:`~TransparencyLog.consistency`,
:meth:`~TransparencyLog.head`) use the store's reader connections and never wait on writers.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from aigc_hub.core.clock import Clock, SystemClock
from aigc_hub.core.errors import (
    ConfigurationError,
    Conflict,
    InvalidInput,
    NotFound,
    PermanentError,
)
from aigc_hub.pipelines.avcc import merkle, tree_heads
from aigc_hub.pipelines.avcc.receipts import Receipt
from aigc_hub.pipelines.avcc.translog_tables import avcc_log_heads, avcc_log_leaves
from aigc_hub.pipelines.avcc.tree_heads import SignedTreeHead
from aigc_hub.store.dialects import dialect_of
from aigc_hub.store.engine import reader

MAX_KEY_LENGTH = 255
#: Entry keys looked up per query, far below SQLite's and PostgreSQL's parameter limits.
KEY_CHUNK = 500
#: Leaf hashes read per query while the in-process tree catches up with the table.
LOAD_PAGE = 10_000


@dataclass(frozen=True)
class LeafRef:
    """Where an entry is in the log: its leaf's index and hash."""

    entry_key: str
    leaf_index: int
    leaf_hash: bytes


class NotYetSealed(NotFound):
    """The entry is in the log, but no signed tree head covers it yet: seal() first."""


class TransparencyLog:
    """The log signed by ``private_key``, stored in ``engine``'s database (one log per database).

    Safe to share between tasks, and to run in several processes on one database. Each
    object keeps the leaf hashes it has read in memory (about 150 bytes a leaf).
    """

    def __init__(
        self, engine: AsyncEngine, private_key: Ed25519PrivateKey, clock: Clock | None = None
    ) -> None:
        self._engine = engine
        self._key = private_key
        self._clock = clock or SystemClock()
        self.log_id = tree_heads.log_id_of(private_key.public_key())
        # The log is append-only, so leaf hashes once read never change: the tree only grows,
        # each process reads a leaf once, and a proof costs O(log² n) hashes in memory
        # instead of reading all n leaves (100k leaves: milliseconds, not seconds).
        self._tree = merkle.MerkleTree()
        self._loading = asyncio.Lock()

    @property
    def public_key(self) -> Ed25519PublicKey:
        """The key that verifies this log's heads (export with ``tree_heads.public_key_pem``)."""
        return self._key.public_key()

    async def append(self, entries: Sequence[tuple[str, bytes]]) -> list[LeafRef]:
        """Append ``(entry_key, data)`` pairs; one :class:`LeafRef` per pair, in order.

        Idempotent per key: a key already in the log (or repeated in ``entries``) gets its
        existing leaf and is never appended twice, even by writers racing in other processes.
        The same key with other data raises :class:`Conflict` (already in the log) or
        :class:`InvalidInput` (twice in ``entries``); then nothing of the call is appended.
        """
        batch = _leaf_hashes_by_key(entries)
        if not batch:
            return []
        async with self._engine.begin() as conn:
            await self._lock_writers(conn)
            refs = await _existing(conn, list(batch))
            for key, ref in refs.items():
                if ref.leaf_hash != batch[key]:
                    raise Conflict(
                        f"entry {key!r} is already leaf {ref.leaf_index} with other data"
                    )
            index = await _leaf_count(conn)
            now = self._clock.now_ms()
            data = dict(entries)
            rows: list[dict[str, Any]] = []
            for key, leaf_hash in batch.items():
                if key in refs:
                    continue
                refs[key] = LeafRef(key, index, leaf_hash)
                rows.append(
                    {
                        "leaf_index": index,
                        "entry_key": key,
                        "leaf_hash": leaf_hash,
                        "data": data[key],
                        "appended_at": now,
                    }
                )
                index += 1
            if rows:
                await conn.execute(sa.insert(avcc_log_leaves), rows)
        return [refs[key] for key, _ in entries]

    async def seal(self) -> SignedTreeHead:
        """Sign a head covering every leaf appended so far and store it; when no leaf came
        since the last head, return that head (one tree size never gets two heads)."""
        async with self._engine.begin() as conn:
            await self._lock_writers(conn)
            latest = await _latest_head(conn)
            assert latest is not None  # the writers' lock row is a head
            size = await _leaf_count(conn)
            if latest.tree_size == size:
                return latest
            await self._catch_up(conn, size)
            # A later head never carries an earlier time, even when the clock steps back.
            timestamp_ms = max(self._clock.now_ms(), latest.timestamp_ms)
            head = tree_heads.sign_head(self._key, size, self._tree.root(size), timestamp_ms)
            await conn.execute(sa.insert(avcc_log_heads).values(_head_row(head)))
        return head

    async def prove(self, entry_key: str, head: SignedTreeHead | None = None) -> Receipt:
        """The receipt of ``entry_key`` against ``head`` (default: the latest head).

        Raises :class:`NotFound` for a key not in the log, :class:`NotYetSealed` when no head
        covers it yet, and :class:`InvalidInput` for a ``head`` this log did not sign or one
        that does not cover the entry.
        """
        async with reader(self._engine) as conn:
            row = (
                await conn.execute(
                    sa.select(avcc_log_leaves.c.leaf_index, avcc_log_leaves.c.leaf_hash).where(
                        avcc_log_leaves.c.entry_key == entry_key
                    )
                )
            ).first()
            if row is None:
                raise NotFound(f"no entry {entry_key!r} in the log")
            index, leaf_hash = int(row.leaf_index), bytes(row.leaf_hash)
            if head is None:
                head = await _latest_head(conn)
                if head is None or head.tree_size <= index:
                    raise NotYetSealed(f"entry {entry_key!r} (leaf {index}) is not sealed yet")
            else:
                await self._check_own(conn, head)
                if head.tree_size <= index:
                    raise InvalidInput(
                        "head", f"the head of size {head.tree_size} does not cover leaf {index}"
                    )
            await self._catch_up(conn, head.tree_size)
        self._check_root(head)
        path = self._tree.inclusion_path(index, head.tree_size)
        return Receipt(
            leaf_index=index, leaf_hash=leaf_hash, inclusion_path=tuple(path), tree_head=head
        )

    async def consistency(self, size1: int, size2: int) -> list[bytes]:
        """The RFC 9162 consistency proof that the tree of ``size2`` leaves extends the tree
        of ``size1``; :class:`InvalidInput` unless 0 <= size1 <= size2 <= the latest head's."""
        async with reader(self._engine) as conn:
            latest = await _latest_head(conn)
            sealed = 0 if latest is None else latest.tree_size
            if not 0 <= size1 <= size2 <= sealed:
                raise InvalidInput(
                    "size2", f"need 0 <= size1 ({size1}) <= size2 ({size2}) <= {sealed}, sealed"
                )
            await self._catch_up(conn, size2)
            query = sa.select(avcc_log_heads).where(avcc_log_heads.c.tree_size.in_([size1, size2]))
            stored = [_head_of(row) for row in await conn.execute(query)]
        for head in stored:
            self._check_root(head)
        return self._tree.consistency_proof(size1, size2)

    async def head(self, size: int | None = None) -> SignedTreeHead | None:
        """The latest signed head, or the one of ``size`` leaves; None when there is none."""
        async with reader(self._engine) as conn:
            if size is None:
                return await _latest_head(conn)
            query = sa.select(avcc_log_heads).where(avcc_log_heads.c.tree_size == size)
            row = (await conn.execute(query)).first()
            return None if row is None else _head_of(row)

    async def _lock_writers(self, conn: AsyncConnection) -> None:
        """Hold the writers' lock (the head of size 0) until ``conn``'s transaction ends,
        writing that head first when the log is new; refuse a database of another log."""
        lock = sa.select(avcc_log_heads.c.log_id).where(avcc_log_heads.c.tree_size == 0)
        row = (await conn.execute(lock.with_for_update())).first()
        if row is None:
            genesis = tree_heads.sign_head(self._key, 0, merkle.EMPTY_ROOT, self._clock.now_ms())
            # Two first writers: the second waits for the first's row, then inserts nothing.
            insert = dialect_of(conn).insert(avcc_log_heads).values(_head_row(genesis))
            await conn.execute(insert.on_conflict_do_nothing(index_elements=["tree_size"]))
            row = (await conn.execute(lock.with_for_update())).one()
        if row.log_id != self.log_id:
            raise ConfigurationError(
                f"this database holds the transparency log {row.log_id}; "
                f"the key given signs log {self.log_id}"
            )

    async def _catch_up(self, conn: AsyncConnection, size: int) -> None:
        """Read the leaf hashes the in-process tree lacks, up to ``size``, in index order."""
        async with self._loading:
            while self._tree.size < size:
                query = (
                    sa.select(avcc_log_leaves.c.leaf_index, avcc_log_leaves.c.leaf_hash)
                    .where(avcc_log_leaves.c.leaf_index >= self._tree.size)
                    .where(avcc_log_leaves.c.leaf_index < size)
                    .order_by(avcc_log_leaves.c.leaf_index)
                    .limit(LOAD_PAGE)
                )
                rows = (await conn.execute(query)).all()
                if not rows:
                    raise PermanentError(f"the log's leaves stop at {self._tree.size}, not {size}")
                for row in rows:
                    if row.leaf_index != self._tree.size:
                        raise PermanentError(
                            f"the log's leaves skip from {self._tree.size} to {row.leaf_index}"
                        )
                    self._tree.append(bytes(row.leaf_hash))

    def _check_root(self, head: SignedTreeHead) -> None:
        # Cheap (the tree keeps its subtree roots) and catches rows altered after signing.
        if self._tree.root(head.tree_size) != head.root_hash:
            raise PermanentError(
                f"the stored leaves do not give the root of the head of size {head.tree_size}"
            )

    async def _check_own(self, conn: AsyncConnection, head: SignedTreeHead) -> None:
        query = sa.select(avcc_log_heads).where(avcc_log_heads.c.tree_size == head.tree_size)
        row = (await conn.execute(query)).first()
        if head.log_id != self.log_id or row is None or _head_of(row) != head:
            raise InvalidInput(
                "head", f"this log ({self.log_id}) signed no such head of size {head.tree_size}"
            )


def _leaf_hashes_by_key(entries: Sequence[tuple[str, bytes]]) -> dict[str, bytes]:
    """Each distinct entry key of ``entries`` with its leaf hash, in first-seen order."""
    hashes: dict[str, bytes] = {}
    for key, data in entries:
        if not 0 < len(key) <= MAX_KEY_LENGTH:
            raise InvalidInput("entry_key", f"an entry key has 1 to {MAX_KEY_LENGTH} characters")
        leaf_hash = merkle.leaf_hash(data)
        if hashes.setdefault(key, leaf_hash) != leaf_hash:
            raise InvalidInput("entries", f"entry {key!r} appears twice with different data")
    return hashes


async def _existing(conn: AsyncConnection, keys: list[str]) -> dict[str, LeafRef]:
    found: dict[str, LeafRef] = {}
    columns = avcc_log_leaves.c
    for start in range(0, len(keys), KEY_CHUNK):
        query = sa.select(columns.entry_key, columns.leaf_index, columns.leaf_hash).where(
            columns.entry_key.in_(keys[start : start + KEY_CHUNK])
        )
        for row in await conn.execute(query):
            found[row.entry_key] = LeafRef(row.entry_key, row.leaf_index, bytes(row.leaf_hash))
    return found


async def _leaf_count(conn: AsyncConnection) -> int:
    # Indices are dense from 0, so the count is max + 1: one step down the primary key.
    highest = await conn.scalar(sa.select(sa.func.max(avcc_log_leaves.c.leaf_index)))
    return 0 if highest is None else int(highest) + 1


async def _latest_head(conn: AsyncConnection) -> SignedTreeHead | None:
    query = sa.select(avcc_log_heads).order_by(avcc_log_heads.c.tree_size.desc()).limit(1)
    row = (await conn.execute(query)).first()
    return None if row is None else _head_of(row)


def _head_of(row: sa.Row[Any]) -> SignedTreeHead:
    return SignedTreeHead(
        log_id=row.log_id,
        tree_size=int(row.tree_size),
        root_hash=bytes(row.root_hash),
        timestamp_ms=int(row.timestamp_ms),
        signature=bytes(row.signature),
    )


def _head_row(head: SignedTreeHead) -> dict[str, Any]:
    return {
        "tree_size": head.tree_size,
        "log_id": head.log_id,
        "root_hash": head.root_hash,
        "timestamp_ms": head.timestamp_ms,
        "signature": head.signature,
    }
