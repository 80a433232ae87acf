"""Alembic environment of the one migration chain (backbone and pipelines).

Run through ``aigc_hub.store.migrate``, which hands over a sync connection in
``config.attributes["connection"]``. Logging is left alone on purpose: the host process
(CLI, server, pytest) owns it.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import context

from aigc_hub.store import migrate


def _configure(connection: sa.Connection | None, url: str | None) -> None:
    backend = (
        connection.dialect.name
        if connection is not None
        else sa.make_url(url or "").get_backend_name()
    )
    context.configure(
        connection=connection,
        url=url,
        target_metadata=migrate.target_metadata(),
        # SQLite cannot ALTER most things: autogenerate emits batch (copy-and-move) ops.
        render_as_batch=backend == "sqlite",
        # Each revision commits on its own, so a failure stops at the last good revision.
        transaction_per_migration=True,
        compare_type=True,
        literal_binds=connection is None,
    )


def _run() -> None:
    if context.is_offline_mode():
        _configure(None, context.config.get_main_option("sqlalchemy.url"))
    else:
        connection = context.config.attributes.get("connection")
        if not isinstance(connection, sa.Connection):
            raise RuntimeError("run migrations through aigc_hub.store.migrate")
        _configure(connection, None)
    with context.begin_transaction():
        context.run_migrations()


_run()
