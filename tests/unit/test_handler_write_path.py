"""Handlers change facts only through staged writes, returned events and ``ctx.checkpoint``.

An AST check over the modules a consumer-group handler runs: none may open a transaction of
its own (``hub.transaction()``, ``engine.begin()``, ``conn.begin_nested()``). The one sanctioned
exception, recording an intent before an outside call, goes through the checkpoint helper in
``aigc_hub.runtime.context``, which is the only place such a transaction is opened.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import aigc_hub
from aigc_hub import plugins
from aigc_hub.pipeline import StreamSpec

PIPELINES = Path(aigc_hub.__file__).parent / "pipelines"
#: Modules whose code runs inside consumer-group handlers (plus any ``handlers/`` package,
#: where the folder shape puts one module per consumer group).
HANDLER_MODULES = {"pipeline.py", "handlers.py"}
#: Folders of outside systems and their clients, not handler code.
OUTSIDE = {"adapters"}
#: Calls that open a write transaction outside the runtime's commit.
OPENS_TRANSACTION = {"transaction", "begin", "begin_nested"}


def own_transactions(source: str) -> list[str]:
    """``line: call`` for every call in ``source`` that opens a transaction by itself."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in OPENS_TRANSACTION
        ):
            found.append(f"{node.lineno}: {ast.unparse(node.func)}()")
    return found


def stream_modules() -> set[Path]:
    """Files of stream groups' handlers (the telemetry road): they get raw records, no
    context to stage writes on, and write in transactions of their own by design."""
    found = set()
    for pipeline in plugins.load(None):
        makers = [*pipeline.streams, *getattr(pipeline, "state_streams", {}).values()]
        for maker in makers:
            fn = maker.handler if isinstance(maker, StreamSpec) else maker
            module = sys.modules[fn.__module__]
            if module.__file__ and "_unbound_stream" not in fn.__qualname__:
                found.add(Path(module.__file__))
    return found


def handler_modules() -> list[Path]:
    """Every handler module of every pipeline under ``aigc_hub/pipelines`` (consumer groups
    on the reliable road; stream groups' modules are left out)."""
    found = []
    streams = stream_modules()
    for path in PIPELINES.rglob("*.py"):
        folders = path.relative_to(PIPELINES).parts[:-1]
        if OUTSIDE & set(folders) or path in streams:
            continue
        if path.name in HANDLER_MODULES or "handlers" in folders:
            found.append(path)
    return sorted(found)


def test_stream_handler_modules_are_found_and_left_out() -> None:
    names = {p.name for p in stream_modules()}
    assert "sink.py" in names
    assert not {p.name for p in handler_modules()} & {"sink.py"}


def test_the_check_flags_a_planted_handler_that_opens_its_own_transaction() -> None:
    planted = (
        "async def on_event(env, ctx):\n"
        "    async with ctx.hub.transaction() as conn:\n"
        "        await conn.execute(stmt)\n"
        "    async with ctx.engine.begin() as conn:\n"
        "        async with conn.begin_nested():\n"
        "            pass\n"
        "    ctx.write(stmt)\n"
        "    await ctx.checkpoint('intent before the call', fn)\n"
    )
    assert own_transactions(planted) == [
        "2: ctx.hub.transaction()",
        "4: ctx.engine.begin()",
        "5: conn.begin_nested()",
    ]


def test_no_generation_handler_module_opens_a_transaction_outside_the_checkpoint() -> None:
    modules = handler_modules()
    names = {
        str(p.relative_to(PIPELINES / "generation")) for p in modules if "generation" in p.parts
    }
    expected = {
        "pipeline.py",
        "handlers/submitter.py",
        "handlers/fetcher.py",
        "handlers/scheduler.py",
    }
    assert expected <= names  # never vacuous
    offenders = {
        str(path.relative_to(PIPELINES)): hits
        for path in modules
        if (hits := own_transactions(path.read_text(encoding="utf-8")))
    }
    assert offenders == {}
