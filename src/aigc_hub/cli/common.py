"""What every command shares: exit codes, user-error reporting, async running, pipelines.

Every Typer app of the CLI is made by :func:`new_app`, whose group class runs each command
under :func:`user_errors`: a user mistake prints one red ``error:`` line on stderr and exits
with its :class:`ExitCode`, never a traceback. A bug prints its traceback and exits with
``ExitCode.INTERNAL``.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import os
import sys
from collections.abc import Coroutine, Iterator
from typing import Any, NoReturn, TypeVar

import pydantic
import typer
from rich.console import Console
from rich.markup import escape
from typer.core import TyperGroup

from aigc_hub import plugins
from aigc_hub.core import errors
from aigc_hub.pipeline import PipelineBase

T = TypeVar("T")

#: Selects the pipelines to run (installed names or ``module:attribute``; see aigc_hub.plugins).
PIPELINES_ENV = plugins.SETTING


class ExitCode(enum.IntEnum):
    """The exit codes of ``aigc-hub``; scripts may rely on them."""

    OK = 0
    FAILURE = 1  # a failure with no more specific code
    USAGE = 2  # bad arguments or input; also Typer's own usage errors
    NOT_FOUND = 3  # the thing named does not exist
    CONFLICT = 4  # the state moved on, or the thing already exists
    UNAVAILABLE = 5  # a service is down or busy: trying again later may work
    INCOMPATIBLE = 6  # schemas or payloads do not match
    INTERNAL = 70  # a bug; the traceback is printed (sysexits EX_SOFTWARE)
    CONFIGURATION = 78  # settings or wiring that cannot work (sysexits EX_CONFIG)


class CommandError(Exception):
    """A command's own failure: print ``message`` as one error line, exit with ``code``."""

    def __init__(self, message: str, code: ExitCode = ExitCode.FAILURE) -> None:
        super().__init__(message)
        self.code = code


def fail(message: str, code: ExitCode = ExitCode.FAILURE) -> NoReturn:
    """Stop the command: one error line on stderr, then exit with ``code``."""
    raise CommandError(message, code)


# The first matching class wins, so subclasses come before their bases.
_EXIT_CODES: tuple[tuple[type[BaseException], ExitCode], ...] = (
    (errors.StaleTransition, ExitCode.CONFLICT),
    (errors.RetryableError, ExitCode.UNAVAILABLE),
    (errors.Retry, ExitCode.UNAVAILABLE),
    (errors.SchemaError, ExitCode.INCOMPATIBLE),
    (errors.EnvelopeError, ExitCode.USAGE),
    (errors.ConfigurationError, ExitCode.CONFIGURATION),
    (errors.InvalidInput, ExitCode.USAGE),
    (errors.NotFound, ExitCode.NOT_FOUND),
    (errors.Conflict, ExitCode.CONFLICT),
    (errors.HubError, ExitCode.FAILURE),
    (FileNotFoundError, ExitCode.NOT_FOUND),
    (FileExistsError, ExitCode.CONFLICT),
    (IsADirectoryError, ExitCode.USAGE),
    (NotADirectoryError, ExitCode.USAGE),
    (PermissionError, ExitCode.USAGE),
    (ValueError, ExitCode.USAGE),
)


def exit_code_for(exc: BaseException) -> ExitCode | None:
    """The exit code of a user mistake, or None when ``exc`` is unexpected (a bug)."""
    if isinstance(exc, CommandError):
        return exc.code
    for kind, code in _EXIT_CODES:
        if isinstance(exc, kind):
            return code
    return None


def describe(exc: BaseException) -> str:
    """A one-line, human-readable account of ``exc``."""
    if isinstance(exc, pydantic.ValidationError):
        first = exc.errors(include_url=False)[0]
        loc = ".".join(str(part) for part in first.get("loc", ())) or "$"
        return f"invalid {exc.title}: {loc}: {first['msg']}"
    if isinstance(exc, OSError) and exc.strerror and exc.filename is not None:
        return f"{exc.strerror}: {exc.filename}"
    return " ".join(str(exc).split()) or type(exc).__name__


def console() -> Console:
    """The console for a command's output (stdout); built per call so tests can swap streams."""
    out = Console(highlight=False, emoji=False)  # ids such as clip:a: are not emoji codes
    if not out.is_terminal and "COLUMNS" not in os.environ:
        out.width = 200  # piped output: do not squeeze tables into 80 columns
    return out


def error_console() -> Console:
    """The console for diagnostics (stderr); lines are never wrapped."""
    return Console(stderr=True, highlight=False, soft_wrap=True, emoji=False)


def report_error(message: str) -> None:
    """Print ``error: message`` in red on stderr, as one line."""
    error_console().print(f"[bold red]error:[/] {escape(message)}")


def report_warning(message: str) -> None:
    """Print ``warning: message`` in yellow on stderr, as one line."""
    error_console().print(f"[bold yellow]warning:[/] {escape(message)}")


@contextlib.contextmanager
def user_errors() -> Iterator[None]:
    """Turn a user mistake into one error line and its exit code; also usable as a decorator.

    Typer's own exits and usage errors pass through. Anything else is a bug: its traceback
    is printed and the command exits with ``ExitCode.INTERNAL``.
    """
    try:
        yield
    except (typer.Exit, typer.Abort, typer.TyperException):
        raise
    except BrokenPipeError:
        # The reader went away (``aigc-hub … | head``): stop quietly, as Unix tools do.
        with contextlib.suppress(OSError):
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - flushed at exit, never read
        raise typer.Exit(int(ExitCode.OK)) from None
    except Exception as exc:
        code = exit_code_for(exc)
        if code is None:
            error_console().print_exception(show_locals=False)
            report_error(f"internal error: {type(exc).__name__}: {describe(exc)}")
            code = ExitCode.INTERNAL
        else:
            report_error(describe(exc))
        raise typer.Exit(int(code)) from None


class HubGroup(TyperGroup):
    """A command group whose commands all run under :func:`user_errors`."""

    def invoke(self, ctx: Any) -> Any:
        with user_errors():
            return super().invoke(ctx)


def new_app(name: str, help: str, **options: Any) -> typer.Typer:
    """A Typer app wired like every other in the CLI (error handling, help on no args)."""
    options.setdefault("no_args_is_help", True)
    return typer.Typer(
        name=name,
        help=help,
        cls=HubGroup,
        pretty_exceptions_show_locals=False,
        **options,
    )


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to completion on a fresh event loop and return its result."""
    return asyncio.run(coro)


def installed_pipelines(value: str | None = None) -> list[PipelineBase]:
    """The pipelines the hub would run: those ``value`` selects, default ``$AIGC_HUB_PIPELINES``
    (unset: every installed one; see :mod:`aigc_hub.plugins`). ConfigurationError names the
    first bad entry."""
    from aigc_hub.settings import Settings

    return plugins.load(Settings().pipelines if value is None else value)
