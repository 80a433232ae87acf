"""How every FFmpeg and ffprobe process runs: bounded, isolated, and killed when late.

A hostile file can crash or stall the tool; it must never take the host or read what is not
its job's. So each run (seed 004 §3.11, "恶意媒体文件" and "Shell 注入"; §3.9.3-5):

- takes an argument list and no shell, so no byte of input is ever parsed as a command;
- starts in a new session (its own process group), in the job's private scratch directory,
  with stdin closed and a minimal environment (no ``*_proxy`` variables, no locale surprises);
- runs under an address-space limit (``RLIMIT_AS``) set before the tool's ``exec`` (by
  util-linux's ``prlimit``, else in the forked child): an allocation past it fails inside
  the tool, which exits, instead of the host swapping;
- runs at the niceness its job asks for (the render worker's batch work yields the CPU);
- has a wall-clock deadline; past it the whole process group is killed and the job refused
  with code ``timeout``;
- is reaped with ``wait4``, which reports the child's own CPU seconds (what the benchmark and
  the media worker's metrics read), exactly, whatever else the hub runs at the time.

Which formats, codecs and protocols a tool may open is the callers' part (:mod:`.inputs`).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import logging
import os
import resource
import shutil
import signal
import subprocess
import tempfile
import threading
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from aigc_hub.core import errors
from aigc_hub.media import tools
from aigc_hub.media.tools import ToolName

log = logging.getLogger(__name__)

GiB: Final = 1 << 30
#: What of a tool's stderr is kept: its last lines say why it failed.
STDERR_TAIL: Final = 64 * 1024
#: The whole environment a tool sees; FFmpeg needs nothing else (and must see no proxy).
CHILD_ENV: Final = {"PATH": os.defpath, "LC_ALL": "C"}
#: util-linux's ``prlimit`` sets the limit and then execs the tool, so the limit holds from the
#: tool's first instruction without a ``preexec_fn``. A ``preexec_fn`` makes Popen use a full
#: ``fork()`` of the hub, which with torch loaded took tens of milliseconds of the event loop
#: per run (a fifth of the generation hub's CPU, by py-spy); without one Popen uses vfork.
PRLIMIT: Final = shutil.which("prlimit")
#: coreutils' ``nice`` sets the niceness before its exec of the tool, for the same reason.
NICE: Final = shutil.which("nice")


@dataclass(frozen=True)
class MediaLimits:
    """What one media job may ask of the host; the probe refuses a file past any of them."""

    max_bytes: int = 2 * GiB
    max_width: int = 7680
    max_height: int = 4320
    max_pixels: int = 7680 * 4320
    max_streams: int = 8
    max_duration_s: float = 4 * 3600
    max_frame_rate: float = 240.0
    timeout_s: float = 600.0
    address_space_bytes: int = 4 * GiB
    #: CPU niceness the tool runs at (0: as the hub). Batch work (the render worker) runs
    #: nicer, so on a busy host the kernel gives the hub's own work the CPU first.
    niceness: int = 0


#: The limits a job gets when its caller names none.
DEFAULT_LIMITS: Final = MediaLimits()


class MediaRefused(errors.PermanentError):
    """The media was refused: not readable, not allowed, or past a limit (never retried)."""

    def __init__(self, code: str, message: str) -> None:
        #: A machine code: "too_many_streams", "dimensions", "duration", "frame_rate",
        #: "too_large", "format", "codec", "timeout", "memory", "unreadable", "empty", …
        self.code = code
        super().__init__(message)


@dataclass(frozen=True)
class ToolResult:
    """How a tool's run ended, what it printed, and the CPU it used."""

    returncode: int
    stdout: bytes
    stderr: bytes
    cpu_s: float  # the child's user + system CPU seconds

    def last_error(self) -> str:
        """The tool's last non-empty stderr line (why it failed), shortened for a reason."""
        lines = self.stderr.decode(errors="replace").strip().splitlines()
        return (lines[-1].strip() if lines else f"exit status {self.returncode}")[:300]


@contextlib.asynccontextmanager
async def scratch_dir(root: Path | None = None) -> AsyncIterator[Path]:
    """A fresh private (0700) directory for one job, removed afterwards whatever happens.

    ``root`` is where it is made (the system's temporary directory when None); the same
    filesystem as the job's inputs lets them be hard-linked instead of copied.
    """
    path = await asyncio.to_thread(_make_scratch, root)
    try:
        yield path
    finally:
        # rmtree of a large job's files is disk work: off the event loop
        await asyncio.to_thread(shutil.rmtree, path, True)


def _make_scratch(root: Path | None) -> Path:
    if root is not None:
        root.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix="aigc-media-", dir=root))


def refuse_failure(result: ToolResult, what: str) -> MediaRefused:
    """The refusal for a tool run that did not succeed (code ``memory`` when it ran out of
    address space, ``crashed`` when a signal ended it, ``tool_failed`` otherwise)."""
    text = result.stderr.decode(errors="replace").lower()
    if "malloc" in text or "cannot allocate memory" in text or "out of memory" in text:
        return MediaRefused("memory", f"{what}: out of memory (address-space limit)")
    if result.returncode < 0:
        return MediaRefused("crashed", f"{what}: killed by signal {-result.returncode}")
    return MediaRefused("tool_failed", f"{what}: {result.last_error()}")


async def run_tool(
    tool: ToolName,
    args: Sequence[str],
    *,
    cwd: Path,
    limits: MediaLimits,
    max_stdout: int = 64 * 1024 * 1024,
) -> ToolResult:
    """Run ``tool`` with ``args`` in ``cwd`` inside the sandbox described in the module doc.

    Returns whatever exit status the tool had (the caller judges it). Raises
    MediaRefused("timeout") when ``limits.timeout_s`` passes (the process group is killed and
    reaped first), MediaRefused("too_large") when stdout passes ``max_stdout`` bytes,
    MediaRefused("memory") when the tool cannot even start under the address-space limit,
    and MediaToolMissing when the tool is not installed. If the caller is cancelled, the
    process group is killed and reaped before the cancellation goes on. A tool that dies of
    a signal is run once more before its result is returned.
    """
    result = await _run_once(tool, args, cwd=cwd, limits=limits, max_stdout=max_stdout)
    if result.returncode < 0:
        # Killed by a signal it did not get from us (a timeout raises instead): a crash.
        # Run it once more, so one crash of the tool is not taken for the file's fault; a
        # file that crashes it again is refused by the caller as before.
        log.warning("%s died of signal %d; running it once more", tool, -result.returncode)
        result = await _run_once(tool, args, cwd=cwd, limits=limits, max_stdout=max_stdout)
    return result


async def _run_once(
    tool: ToolName,
    args: Sequence[str],
    *,
    cwd: Path,
    limits: MediaLimits,
    max_stdout: int,
) -> ToolResult:
    argv = [tools.executable(tool), *args]
    limit = limits.address_space_bytes
    # The limit must hold from the tool's first instruction (a limit set on a running child
    # could not promise that): ``prlimit`` sets it before its exec of the tool; where it is
    # missing, a preexec_fn that runs only setrlimit (no Python objects touched).
    preexec = None
    if limits.niceness and NICE is not None:
        argv = [NICE, "-n", str(limits.niceness), *argv]
    if PRLIMIT is not None:
        argv = [PRLIMIT, f"--as={limit}", "--", *argv]
    else:
        preexec = functools.partial(resource.setrlimit, resource.RLIMIT_AS, (limit, limit))
    try:
        proc = subprocess.Popen(  # noqa: ASYNC220 (vfork + exec; the waiting is async below)
            argv,
            cwd=cwd,
            env=CHILD_ENV,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            preexec_fn=preexec,
        )
    except OSError as exc:
        if exc.errno == errno.ENOMEM:
            raise MediaRefused("memory", f"{tool} cannot start within {limit} bytes") from None
        raise
    if limits.niceness:
        _nice_session(proc.pid, limits.niceness)
    return await _supervise(proc, tool, limits.timeout_s, max_stdout)


def _nice_session(pid: int, niceness: int) -> None:
    """Give the tool's session its niceness too. With the kernel's autogroup scheduling (on
    by default on desktop and many server kernels) every session is its own scheduling group,
    and a process's nice value only ranks it inside its group: a tool in a new session at
    nice 10 still got as much CPU as the whole hub. The group's own nice value is what ranks
    it against the hub's. (Its first milliseconds run before this lands.)"""
    with contextlib.suppress(OSError):  # no autogroup here: the process's nice value rules
        Path(f"/proc/{pid}/autogroup").write_text(str(niceness))


async def _supervise(
    proc: subprocess.Popen[bytes], tool: str, timeout_s: float, max_stdout: int
) -> ToolResult:
    loop = asyncio.get_running_loop()
    exited: asyncio.Future[tuple[int, float]] = loop.create_future()
    threading.Thread(target=_reap, args=(proc.pid, loop, exited), daemon=True).start()
    out = _Collector(loop, cap=max_stdout)
    err = _Collector(loop, cap=STDERR_TAIL, keep_tail=True)
    assert proc.stdout is not None and proc.stderr is not None
    stdout, stderr = proc.stdout, proc.stderr
    proc.stdout = proc.stderr = None  # the transports own and close them now
    pipes: list[asyncio.BaseTransport] = []
    refused: MediaRefused | None = None
    try:
        async with asyncio.timeout(timeout_s):
            pipes.append((await loop.connect_read_pipe(lambda: out, stdout))[0])
            pipes.append((await loop.connect_read_pipe(lambda: err, stderr))[0])
            await asyncio.gather(out.done, err.done)
            await asyncio.shield(exited)
    except TimeoutError:
        refused = MediaRefused("timeout", f"{tool} ran past its {timeout_s:g} s limit")
    except _Overflow:
        refused = MediaRefused("too_large", f"{tool} wrote more than {max_stdout} bytes")
    finally:
        if not exited.done():
            _kill_group(proc.pid)
            # shielded: a cancelled caller still waits for the (killed) child to be reaped
            await asyncio.shield(exited)
        for transport in pipes:
            transport.close()
        # reaped by _reap: tell Popen, or it warns at collection that the child still runs
        proc.returncode = exited.result()[0]
    status, cpu_s = exited.result()
    if refused is not None:
        raise refused
    return ToolResult(status, bytes(out.data), bytes(err.data), cpu_s)


def _reap(
    pid: int, loop: asyncio.AbstractEventLoop, exited: asyncio.Future[tuple[int, float]]
) -> None:
    # wait4, not asyncio's child watcher: only wait4 gives this child's own rusage.
    _, status, usage = os.wait4(pid, 0)
    result = (os.waitstatus_to_exitcode(status), usage.ru_utime + usage.ru_stime)
    with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nobody waits
        loop.call_soon_threadsafe(_settle, exited, result)


def _settle(fut: asyncio.Future[tuple[int, float]], result: tuple[int, float]) -> None:
    if not fut.done():
        fut.set_result(result)


def _kill_group(pid: int) -> None:
    # The child leads its own session, so its group id is its pid; the group is killed even
    # when the tool started helpers of its own.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


class _Overflow(Exception):
    """A pipe carried more than its cap."""


class _Collector(asyncio.Protocol):
    """Collects one pipe's bytes until EOF: all of them up to ``cap`` (more is an error), or
    with ``keep_tail`` the last ``cap`` bytes."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, *, cap: int, keep_tail: bool = False
    ) -> None:
        self.data = bytearray()
        self.cap = cap
        self.keep_tail = keep_tail
        self.done: asyncio.Future[None] = loop.create_future()

    def data_received(self, data: bytes) -> None:
        if self.done.done():
            return  # refused already: the process is being killed
        self.data += data
        if len(self.data) > self.cap:
            if self.keep_tail:
                del self.data[: len(self.data) - self.cap]
            elif not self.done.done():
                self.done.set_exception(_Overflow())

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_result(None)
