"""The CLI kit: the only part of ``aigc_hub.cli`` (and of the client) a pipeline may import.

A pipeline's ``cli.py`` (named by its ``Pipeline(cli="module:app")``, loaded only by the
CLI) needs a few things to behave like every other ``aigc-hub`` command: an app wired the
same way, one-line failures with the documented exit codes, the shared console, the
``--database-url`` option with a ready engine, and the Python client for commands that go
through the HTTP API. It takes them from here, so the rest of ``cli/`` can change without
touching any pipeline; ``tests/unit/test_layering.py`` enforces it. Add a name here only
when a pipeline's CLI truly needs it, and keep each name's home module the owner.
"""

from __future__ import annotations

from aigc_hub.cli.api_calls import DEFAULT_API_URL, ApiKey, ApiUrl, call_api, show_json
from aigc_hub.cli.common import CommandError, ExitCode, console, fail, new_app
from aigc_hub.cli.database import DatabaseUrl
from aigc_hub.cli.database import run as run_on_database
from aigc_hub.client import HubAPIError, HubClient, WaitTimeout
from aigc_hub.client._models import GenerationTask

__all__ = [
    "DEFAULT_API_URL",
    "ApiKey",
    "ApiUrl",
    "CommandError",
    "DatabaseUrl",
    "ExitCode",
    "GenerationTask",
    "HubAPIError",
    "HubClient",
    "WaitTimeout",
    "call_api",
    "console",
    "fail",
    "new_app",
    "run_on_database",
    "show_json",
]
