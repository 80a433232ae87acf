"""The hub's logging onto a buffer, for tests that read what was logged."""

from __future__ import annotations

import contextlib
import io
import logging
from collections.abc import Iterator

import structlog

from aigc_hub.observability import logging as hub_logging


@contextlib.contextmanager
def captured_logs() -> Iterator[io.StringIO]:
    """configure_logging() (JSON, DEBUG) onto a buffer; logging, the log context and
    structlog are restored afterwards."""
    root = logging.getLogger()
    level = root.level
    out = io.StringIO()
    hub_logging.configure_logging("DEBUG", json=True, stream=out)
    try:
        yield out
    finally:
        for handler in [h for h in root.handlers if isinstance(h, hub_logging._OurHandler)]:
            root.removeHandler(handler)
        root.setLevel(level)
        hub_logging.clear()
        structlog.reset_defaults()
