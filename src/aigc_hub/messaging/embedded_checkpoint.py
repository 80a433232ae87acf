"""WAL checkpoints of the embedded log, run in a worker thread instead of inside appends.

SQLite checkpoints automatically inside the COMMIT that takes the WAL past
``wal_autocheckpoint`` pages: that writer copies the WAL into the database file and fsyncs
both, and since our statements run on the event loop's thread (``store/sqlite_inline.py``)
the whole loop waits, ~20 ms every few telemetry batches. So the broker's writer connection
only checkpoints as a backstop (:data:`BACKSTOP_PAGES`, when this task falls behind), and
:class:`Checkpointer` runs a PASSIVE checkpoint on a connection of its own, in a thread,
after every ``every_bytes`` appended. PASSIVE waits for no reader or writer; what it cannot
copy yet it copies next time.

Durability does not change: a commit returns once its frames are written to the WAL, which
with ``synchronous=NORMAL`` survives a crash of the process (not of the machine: a power
loss may drop the last commits, as before); a checkpoint only moves committed pages.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from typing import Any

from aigc_hub.messaging import embedded_schema as schema

log = logging.getLogger(__name__)

#: The writer's own automatic checkpoint (pages of the WAL), a bound if the task lags.
BACKSTOP_PAGES = 10_000
#: Appended bytes between two checkpoints: about SQLite's default of 1,000 4-KiB pages.
CHECKPOINT_BYTES = 4 * 1024 * 1024


def limit_writer_checkpoints(dbapi_conn: Any, _record: Any) -> None:
    """A ``connect`` listener for the writer engine: checkpoint inline only as a backstop."""
    cursor = dbapi_conn.cursor()
    cursor.execute(f"PRAGMA wal_autocheckpoint={BACKSTOP_PAGES}")
    cursor.close()


class Checkpointer:
    """Checkpoints one log file after every ``every_bytes`` appended; one task, one thread."""

    def __init__(self, path: str, every_bytes: int = CHECKPOINT_BYTES) -> None:
        self.path = path
        self.every_bytes = every_bytes
        #: Checkpoint passes that ran to the end (failed ones are logged and not counted).
        self.passes = 0
        #: SQLite's answer to the last pass: (busy, frames in the WAL, frames checkpointed).
        self.last: tuple[int, int, int] | None = None
        self._pending = 0
        self._due = asyncio.Event()
        self._conn: sqlite3.Connection | None = None

    def appended(self, nbytes: int) -> None:
        """Count an append; wakes :meth:`run` once ``every_bytes`` have gathered."""
        self._pending += nbytes
        if self._pending >= self.every_bytes:
            self._due.set()

    async def run(self, stop: asyncio.Event) -> None:
        """Checkpoint whenever due, until ``stop``; a failed pass is logged and retried later."""
        while True:
            await schema.wait_either(self._due, stop)
            if stop.is_set():
                break
            self._due.clear()
            self._pending = 0
            try:
                self.last = await asyncio.to_thread(self._checkpoint)
                self.passes += 1
            except Exception:
                log.exception("checkpoint of %s failed; the next append retries", self.path)
        if self._conn is not None:
            await asyncio.to_thread(self._conn.close)

    def _checkpoint(self) -> tuple[int, int, int]:
        """One PASSIVE checkpoint (blocking: runs in a worker thread)."""
        if self._conn is None:
            # timeout=0: PASSIVE calls no busy handler anyway; nothing here waits on a lock.
            self._conn = sqlite3.connect(
                self.path, timeout=0, isolation_level=None, check_same_thread=False
            )
        busy, frames, done = self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        return int(busy), int(frames), int(done)
