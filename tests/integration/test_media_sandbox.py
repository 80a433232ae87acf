"""What a tool run by the sandbox gets, seen from inside: a stand-in ``ffmpeg`` (a shell
script) reports its arguments, environment, directory, limits and process group; a stand-in
that never ends, and leaves a helper of its own behind, is killed with its whole group."""

from __future__ import annotations

import os
import select
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from aigc_hub.media import sandbox, tools
from aigc_hub.media.sandbox import MediaLimits, MediaRefused


@pytest.fixture
def stand_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Makes ``ffmpeg`` the script written to the returned path."""
    script = tmp_path / "bin" / "ffmpeg"
    script.parent.mkdir()
    monkeypatch.setenv("AIGC_HUB_FFMPEG", str(script))
    tools.executable.cache_clear()
    yield script
    tools.executable.cache_clear()


def write(script: Path, body: str) -> None:
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(0o755)


REPORT = """\
for a in "$@"; do printf 'arg=%s\\n' "$a"; done
env | sed 's/^/env=/'
printf 'cwd=%s\\n' "$(pwd)"
printf 'as_kib=%s\\n' "$(ulimit -v)"
printf 'stat=%s\\n' "$(cat /proc/$$/stat)"
printf 'stdin=%s\\n' "$(cat)"
echo done
"""


@pytest.mark.parametrize("limit_by", ["prlimit", "preexec"])
async def test_the_tool_gets_literal_arguments_a_bare_environment_and_its_limits(
    stand_in: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, limit_by: str
) -> None:
    if limit_by == "prlimit":
        assert sandbox.PRLIMIT is not None, "util-linux's prlimit is part of every Debian"
    else:  # a host without prlimit: the limit is set in the forked child
        monkeypatch.setattr(sandbox, "PRLIMIT", None)
    write(stand_in, REPORT)
    for proxy in ("http_proxy", "HTTPS_PROXY", "all_proxy", "no_proxy"):
        monkeypatch.setenv(proxy, "http://127.0.0.1:9")
    job = tmp_path / "job"
    job.mkdir()
    args = ["-i", "$(touch pwned)", "; rm -rf x", "a b", "file:../../etc/passwd"]
    limits = MediaLimits(address_space_bytes=3 << 30)
    result = await sandbox.run_tool("ffmpeg", args, cwd=job, limits=limits)
    assert result.returncode == 0 and result.cpu_s >= 0
    lines = result.stdout.decode().splitlines()
    values = {k: v for k, _, v in (line.partition("=") for line in lines)}
    assert [line[4:] for line in lines if line.startswith("arg=")] == args  # never a shell
    env = {line[4:].partition("=")[0] for line in lines if line.startswith("env=")}
    assert env <= {"PATH", "LC_ALL", "PWD", "SHLVL", "_", "OLDPWD"}, env  # the shell adds some
    assert not any("proxy" in name.lower() for name in env)
    assert same_place(Path(values["cwd"]), job)
    assert int(values["as_kib"]) * 1024 == 3 << 30
    fields = values["stat"].rsplit(")", 1)[1].split()
    pid, pgrp, session = int(values["stat"].split()[0]), int(fields[2]), int(fields[3])
    assert pid == pgrp == session != os.getpgrp()  # its own session and process group
    assert values["stdin"] == "" and lines[-1] == "done"  # stdin is closed, not ours
    assert not any(exists(d / "pwned") for d in (job, tmp_path))


async def test_a_run_past_its_deadline_is_killed_with_its_whole_group(
    stand_in: Path, tmp_path: Path
) -> None:
    # the helper keeps stdout open: only killing the group ends the run
    write(stand_in, "sleep 60 &\necho $! > helper.pid\nsleep 60\n")
    started = time.monotonic()
    with pytest.raises(MediaRefused) as refused:
        await sandbox.run_tool("ffmpeg", [], cwd=tmp_path, limits=MediaLimits(timeout_s=0.5))
    assert refused.value.code == "timeout"
    assert time.monotonic() - started < 10
    helper = int((tmp_path / "helper.pid").read_text())
    # SIGKILL is sent to the group, not awaited: a helper on a busy core may still show "R"
    # for a moment while it dies, so wait for its exit (a pidfd turns readable) — or fail
    assert exits_within(helper, seconds=5), f"the helper is still {state(helper)}"


async def test_output_past_its_cap_is_refused(stand_in: Path, tmp_path: Path) -> None:
    write(stand_in, "head -c 100000 /dev/zero\n")
    with pytest.raises(MediaRefused) as refused:
        await sandbox.run_tool("ffmpeg", [], cwd=tmp_path, limits=MediaLimits(), max_stdout=1000)
    assert refused.value.code == "too_large"


async def test_a_failed_run_reports_its_status_and_last_error(
    stand_in: Path, tmp_path: Path
) -> None:
    write(stand_in, "echo 'first line' >&2\necho 'the reason' >&2\nexit 3\n")
    result = await sandbox.run_tool("ffmpeg", [], cwd=tmp_path, limits=MediaLimits())
    assert (result.returncode, result.last_error()) == (3, "the reason")
    refused = sandbox.refuse_failure(result, "test")
    assert (refused.code, refused.message) == ("tool_failed", "test: the reason")


async def test_the_scratch_dir_is_private_and_removed_even_on_error(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError):
        async with sandbox.scratch_dir(tmp_path / "root") as job:
            (job / "half-made.ts").write_bytes(b"x")
            assert job.stat().st_mode & 0o777 == 0o700
            raise RuntimeError("the job failed")
    assert list((tmp_path / "root").iterdir()) == []


def same_place(a: Path, b: Path) -> bool:
    return a.resolve() == b.resolve()


def exists(path: Path) -> bool:
    return path.exists()


def exits_within(pid: int, seconds: float) -> bool:
    """Whether a process (not necessarily our child) ends, or is a zombie, within ``seconds``."""
    try:
        handle = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        readable, _, _ = select.select([handle], [], [], seconds)
        return bool(readable)
    finally:
        os.close(handle)


def state(pid: int) -> str | None:
    """A process's state letter, None once it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return None


async def test_a_tool_that_crashes_once_is_run_again_and_one_that_always_crashes_is_not_twice(
    stand_in: Path, tmp_path: Path
) -> None:
    job = tmp_path / "job"
    job.mkdir()
    runs = tmp_path / "runs"
    # counts its runs in a file outside the job; crashes (SIGSEGV) on the first one only
    write(
        stand_in,
        f'echo run >> "{runs}"\n'
        f'if [ "$(wc -l < "{runs}")" -eq 1 ]; then kill -SEGV $$; fi\necho ok\n',
    )
    result = await sandbox.run_tool("ffmpeg", [], cwd=job, limits=MediaLimits())
    assert (result.returncode, result.stdout) == (0, b"ok\n")
    assert runs.read_text().count("run") == 2

    runs.unlink()
    write(stand_in, f'echo run >> "{runs}"\nkill -SEGV $$\n')
    result = await sandbox.run_tool("ffmpeg", [], cwd=job, limits=MediaLimits())
    assert result.returncode == -11  # crashed twice: the caller refuses it ("crashed")
    assert runs.read_text().count("run") == 2
