"""Running a render graph: each node once, in order, reused from the node cache when an
earlier export made its key, retried alone when it fails.

A node runs only when its key is not in the cache; its inputs are fetched from the cache
only when it runs (a reused ``encode`` fetches nothing upstream). A node that fails is run
again alone, after ``backoff_s`` doubling, up to ``attempts`` times; then
:class:`NodeFailed` names it. What the graph's earlier nodes made is in the cache by then, so
a retried export starts where this one stopped.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from aigc_hub.core import errors
from aigc_hub.core.failpoints import NONE, Failpoints
from aigc_hub.media import inputs, sandbox
from aigc_hub.media.sandbox import MediaLimits

from . import render_commands
from .render_graph import RenderGraph, RenderNode

log = logging.getLogger(__name__)


class NodeCache(Protocol):
    """Where made nodes are kept by key (the blob store in the hub, a folder in tests)."""

    async def has(self, key: str) -> bool:
        """Whether ``key`` was made (and is still kept)."""
        ...

    async def fetch(self, key: str, dest: Path) -> None:
        """Write the file kept under ``key`` to ``dest``."""
        ...

    async def keep(self, key: str, path: Path) -> None:
        """Keep ``path`` under ``key``."""
        ...


class NodeFailed(errors.PermanentError):
    """A node failed on every attempt; the export fails naming it."""

    def __init__(self, node_id: str, attempts: int, reason: str) -> None:
        self.node_id, self.attempts, self.reason = node_id, attempts, reason
        super().__init__(f"node {node_id} failed {attempts} times: {reason}")


@dataclass
class RunReport:
    """What a run did: the nodes it ran and reused, attempts per node, the child CPU."""

    ran: list[str] = field(default_factory=list)
    reused: list[str] = field(default_factory=list)
    attempts: dict[str, int] = field(default_factory=dict)
    cpu_s: float = 0.0


#: Called after each node with its id and whether it ran ("ran") or was reused ("reused").
OnNode = Callable[[RenderNode, str], Awaitable[None]]


@dataclass(frozen=True)
class RunSettings:
    """How nodes run: their media limits, FFmpeg threads each, attempts and first backoff."""

    limits: MediaLimits = sandbox.DEFAULT_LIMITS
    threads: int = 1
    attempts: int = 3
    backoff_s: float = 0.5


async def run_graph(
    graph: RenderGraph,
    sources: Mapping[str, Path],
    cache: NodeCache,
    work: Path,
    *,
    settings: RunSettings = RunSettings(),
    on_node: OnNode | None = None,
    failpoints: Failpoints = NONE,
) -> RunReport:
    """Make ``graph.output``'s key in ``cache``; ``sources`` maps asset ids to local files.
    NodeFailed when a node fails ``settings.attempts`` times."""
    report = RunReport()
    for node in graph.nodes:
        if await cache.has(node.key):
            report.reused.append(node.id)
            if on_node is not None:
                await on_node(node, "reused")
            continue
        for attempt in range(1, settings.attempts + 1):
            report.attempts[node.id] = attempt
            try:
                # Tests make a node fail here (a crash of its tool, a lost disk) on purpose.
                failpoints.hit(f"render.node:{node.id}")
                report.cpu_s += await _run_node(graph, node, sources, cache, work, settings)
                break
            except (sandbox.MediaRefused, OSError, errors.RetryableError) as exc:
                if attempt == settings.attempts:
                    raise NodeFailed(node.id, attempt, str(exc)[:300]) from exc
                delay = settings.backoff_s * 2 ** (attempt - 1)
                log.warning("render node %s failed (%s); again in %.1f s", node.id, exc, delay)
                await asyncio.sleep(delay)
        report.ran.append(node.id)
        if on_node is not None:
            await on_node(node, "ran")
    return report


async def _run_node(
    graph: RenderGraph,
    node: RenderNode,
    sources: Mapping[str, Path],
    cache: NodeCache,
    work: Path,
    settings: RunSettings,
) -> float:
    """Run one node in a fresh directory under ``work`` and keep its output; its CPU seconds."""
    folder = work / node.id.replace(":", "-")
    await asyncio.to_thread(shutil.rmtree, folder, True)
    await asyncio.to_thread(folder.mkdir, parents=True)
    try:
        readers = [graph.node(i) for i in node.inputs]
        for index, upstream in enumerate(readers):
            await cache.fetch(upstream.key, folder / render_commands.input_name(index, upstream))
        out = folder / render_commands.output_name(node)
        cpu = 0.0
        if node.kind == "text":
            await asyncio.to_thread(render_commands.draw_text, node, out)
        else:
            staged = None
            if node.source is not None:
                staged = await asyncio.to_thread(
                    inputs.stage, sources[node.source], folder, settings.limits
                )
            args = render_commands.node_args(
                graph,
                node,
                inputs_of=readers,
                source=staged,
                limits=settings.limits,
                threads=settings.threads,
            )
            result = await sandbox.run_tool("ffmpeg", args, cwd=folder, limits=settings.limits)
            if result.returncode != 0:
                raise sandbox.refuse_failure(result, node.id)
            cpu = result.cpu_s
        if not out.is_file() or out.stat().st_size == 0:
            raise sandbox.MediaRefused("empty", f"{node.id} made no output")
        await cache.keep(node.key, out)
        return cpu
    finally:
        await asyncio.to_thread(shutil.rmtree, folder, True)


class FolderCache:
    """A node cache in a local folder (one file per key): for a single machine, the bench
    and the tests; the hub keeps nodes in its blob store."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def _path(self, key: str) -> Path:
        return self.root / key

    async def has(self, key: str) -> bool:
        return self._path(key).is_file()

    async def fetch(self, key: str, dest: Path) -> None:
        await asyncio.to_thread(link_or_copy, self._path(key), dest)

    async def keep(self, key: str, path: Path) -> None:
        await asyncio.to_thread(_copy_whole, path, self._path(key))


def _copy_whole(source: Path, dest: Path) -> None:
    """Copy then rename: a reader never sees half a file under a key."""
    partial = dest.with_name(dest.name + ".partial")
    shutil.copyfile(source, partial)
    os.replace(partial, dest)


def link_or_copy(source: Path, dest: Path) -> None:
    """``dest`` as a hard link of ``source`` (no bytes copied), or a copy across devices."""
    try:
        os.link(source, dest)
    except OSError:
        shutil.copyfile(source, dest)
